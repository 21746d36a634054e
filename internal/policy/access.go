package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/egress"
)

// ErrSecretNamespaceNotAllowed is returned for a ClusterCompactionPolicy (or a location pinned
// from one) naming a Secret outside the namespaces the operator lets cluster policies read:
// such a Secret is never read.
var ErrSecretNamespaceNotAllowed = errors.New("secret namespace not allowed")

// Access is what the operator's flags let policies use, on top of what the API server checks.
// The zero value allows cluster policies only the cluster resource namespace's Secrets.
type Access struct {
	// ClusterResourceNamespace is the operator's namespace, where a ClusterCompactionPolicy's
	// Secrets live by default.
	ClusterResourceNamespace string
	// ClusterSecretNamespaces are further namespaces a ClusterCompactionPolicy may read
	// Secrets from (secrets.clusterPolicyNamespaces). Whoever can write a cluster policy
	// could otherwise send any Secret of the cluster to an endpoint of their choice.
	ClusterSecretNamespaces []string
	// Endpoints are the S3 endpoints and summarizer base URLs policies may name
	// (egress.allowedEndpoints); nil allows every endpoint. Stores and the summarizer's client
	// also check every connection against it when dialling.
	Endpoints *egress.Allowlist
	// NamespacedEndpoints, when set, are the endpoints a CompactionPolicy may name
	// (--namespaced-policy-endpoints, And Endpoints): a namespace admin writes those, and an
	// endpoint of theirs is one the operator dials and reads from. It must be no wider than
	// Endpoints; nil means Endpoints.
	NamespacedEndpoints *egress.Allowlist
}

// EndpointsFor is the list that applies to a policy of kind.
func (a Access) EndpointsFor(kind compactionv1alpha1.PolicyKind) *egress.Allowlist {
	if kind == compactionv1alpha1.PolicyKindCluster || a.NamespacedEndpoints == nil {
		return a.Endpoints
	}
	return a.NamespacedEndpoints
}

// PinEndpoints is the list that applies to a pinned location: its policy's kind's.
func (a Access) PinEndpoints(pin *Pinned) *egress.Allowlist {
	if strings.HasPrefix(pin.Policy, string(compactionv1alpha1.PolicyKindCluster)+"/") {
		return a.Endpoints
	}
	return a.EndpointsFor(compactionv1alpha1.PolicyKindNamespaced)
}

// secretNamespaceAllowed reports whether a ClusterCompactionPolicy may read Secrets in ns.
func (a Access) secretNamespaceAllowed(ns string) bool {
	return ns == a.ClusterResourceNamespace || slices.Contains(a.ClusterSecretNamespaces, ns)
}

func (a Access) allowedNamespaces() string {
	return strings.Join(append([]string{a.ClusterResourceNamespace}, a.ClusterSecretNamespaces...), ", ")
}

// Check returns an error wrapping ErrSecretNamespaceNotAllowed or egress.ErrNotAllowed when p
// may not be used as it is. Call it before reading any of p's Secrets or dialling its
// endpoints.
func (a Access) Check(p *Policy) error {
	s3 := p.Spec.Storage.S3
	endpoints := a.EndpointsFor(p.Kind)
	if err := endpoints.CheckS3(s3.Endpoint, s3.Protocol == compactionv1alpha1.S3HTTP); err != nil {
		return fmt.Errorf("storage endpoint: %w", err)
	}
	if oa := p.Spec.Summarizer.OpenAI; oa.IsSet() && p.Spec.Summarizer.Mode == compactionv1alpha1.SummarizerOpenAI {
		if err := endpoints.CheckURL(oa.BaseURL); err != nil {
			return fmt.Errorf("summarizer base URL: %w", err)
		}
	}
	if p.Kind != compactionv1alpha1.PolicyKindCluster {
		return nil // the API server keeps a CompactionPolicy's Secrets in its namespace
	}
	for _, key := range p.SecretKeys(a.ClusterResourceNamespace) {
		ns, _, _ := strings.Cut(key, "/")
		if !a.secretNamespaceAllowed(ns) {
			return fmt.Errorf("%w: the Secret %s is outside the namespaces a ClusterCompactionPolicy may read Secrets from (%s; more with the operator's secrets.clusterPolicyNamespaces); it is not read",
				ErrSecretNamespaceNotAllowed, key, a.allowedNamespaces())
		}
	}
	return nil
}

// CheckLocation is Check for a pinned location (pinned before the operator was restricted, or
// from a policy since changed). A CompactionPolicy's location is checked by Locations.Get.
func (a Access) CheckLocation(pin *Pinned) error {
	if err := a.PinEndpoints(pin).CheckS3(pin.Location.Endpoint, pin.Location.Protocol == compactionv1alpha1.S3HTTP); err != nil {
		return fmt.Errorf("the session's storage endpoint: %w", err)
	}
	if !strings.HasPrefix(pin.Policy, string(compactionv1alpha1.PolicyKindCluster)+"/") {
		return nil
	}
	if ref := pin.Location.CredentialsSecretRef; ref.IsSet() && !a.secretNamespaceAllowed(ref.Namespace) {
		return fmt.Errorf("%w: the session's storage location names the Secret %s/%s, outside the namespaces a ClusterCompactionPolicy may read Secrets from (%s); it is not read",
			ErrSecretNamespaceNotAllowed, ref.Namespace, ref.Name, a.allowedNamespaces())
	}
	return nil
}
