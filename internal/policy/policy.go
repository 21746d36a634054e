// Package policy resolves an AgentSession's policy reference and turns a policy's storage
// settings into a working S3 store configuration. The controllers and the compaction API
// share it, so both read a policy the same way.
package policy

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// Policy is a CompactionPolicy or ClusterCompactionPolicy, seen through what they share.
type Policy struct {
	Kind compactionv1alpha1.PolicyKind
	// Namespace is empty for a ClusterCompactionPolicy.
	Namespace  string
	Name       string
	Generation int64
	Spec       *compactionv1alpha1.CompactionPolicySpec
	Conditions []metav1.Condition
	// Sessions is the status' count of sessions using the policy.
	Sessions int32
	// NamespaceSelector is a ClusterCompactionPolicy's: the namespaces whose sessions may
	// use it (nil: every namespace).
	NamespaceSelector *metav1.LabelSelector
}

// Key is the policy's index key, as returned by RefKey for a reference to it.
func (p *Policy) Key() string { return Key(p.Kind, p.Namespace, p.Name) }

// Ready reports whether the policy's Ready condition is True for its current generation.
func (p *Policy) Ready() bool {
	c := meta.FindStatusCondition(p.Conditions, compactionv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation
}

// Condition returns the policy's condition of type t, or nil.
func (p *Policy) Condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(p.Conditions, t)
}

// Key names a policy in indexes: "CompactionPolicy/ns/name" or "ClusterCompactionPolicy//name".
func Key(kind compactionv1alpha1.PolicyKind, namespace, name string) string {
	if kind == compactionv1alpha1.PolicyKindCluster {
		namespace = ""
	}
	return string(kind) + "/" + namespace + "/" + name
}

// RefKind is the reference's kind with the API default applied.
func RefKind(ref compactionv1alpha1.PolicyReference) compactionv1alpha1.PolicyKind {
	if ref.Kind == "" {
		return compactionv1alpha1.PolicyKindNamespaced
	}
	return ref.Kind
}

// RefKey is the index key of the policy a session in namespace references.
func RefKey(namespace string, ref compactionv1alpha1.PolicyReference) string {
	return Key(RefKind(ref), namespace, ref.Name)
}

// ErrNotFound is returned by Get when the referenced policy does not exist.
var ErrNotFound = errors.New("policy not found")

// Get fetches the policy a session in namespace references.
func Get(ctx context.Context, c client.Reader, namespace string, ref compactionv1alpha1.PolicyReference) (*Policy, error) {
	kind := RefKind(ref)
	switch kind {
	case compactionv1alpha1.PolicyKindNamespaced:
		var p compactionv1alpha1.CompactionPolicy
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, &p); err != nil {
			return nil, notFound(err, kind, namespace, ref.Name)
		}
		return FromNamespaced(&p), nil
	case compactionv1alpha1.PolicyKindCluster:
		var p compactionv1alpha1.ClusterCompactionPolicy
		if err := c.Get(ctx, types.NamespacedName{Name: ref.Name}, &p); err != nil {
			return nil, notFound(err, kind, "", ref.Name)
		}
		return FromCluster(&p), nil
	default:
		return nil, fmt.Errorf("unknown policy kind %q", kind)
	}
}

func notFound(err error, kind compactionv1alpha1.PolicyKind, namespace, name string) error {
	what := string(kind) + " " + name
	if namespace != "" {
		what = string(kind) + " " + namespace + "/" + name
	}
	if client.IgnoreNotFound(err) == nil {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("get %s: %w", what, err)
}

// FromNamespaced views a CompactionPolicy as a Policy.
func FromNamespaced(p *compactionv1alpha1.CompactionPolicy) *Policy {
	return &Policy{
		Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: p.Namespace, Name: p.Name,
		Generation: p.Generation, Spec: &p.Spec, Conditions: p.Status.Conditions, Sessions: ptr.Deref(p.Status.Sessions, 0),
	}
}

// FromCluster views a ClusterCompactionPolicy as a Policy.
func FromCluster(p *compactionv1alpha1.ClusterCompactionPolicy) *Policy {
	return &Policy{
		Kind: compactionv1alpha1.PolicyKindCluster, Name: p.Name,
		Generation: p.Generation, Spec: &p.Spec.CompactionPolicySpec, Conditions: p.Status.Conditions, Sessions: ptr.Deref(p.Status.Sessions, 0),
		NamespaceSelector: p.Spec.NamespaceSelector,
	}
}
