package policy

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// ErrSecretKeyMissing is what StorageCredentials and APIKey return when a usable (labelled) Secret lacks
// a key; with ErrSecretNotUsable, the controllers turn it into a condition reason.
var ErrSecretKeyMissing = errors.New("secret key missing")

// SecretNamespace is the namespace a policy's secret reference points into: the policy's own
// namespace for a CompactionPolicy, the reference's namespace (or clusterResourceNamespace,
// the operator's namespace) for a ClusterCompactionPolicy.
func (p *Policy) SecretNamespace(ref compactionv1alpha1.SecretReference, clusterResourceNamespace string) string {
	if p.Kind == compactionv1alpha1.PolicyKindNamespaced {
		return p.Namespace
	}
	if ref.Namespace != "" {
		return ref.Namespace
	}
	return clusterResourceNamespace
}

// SecretKeys are the "namespace/name" keys of every Secret the policy reads.
func (p *Policy) SecretKeys(clusterResourceNamespace string) []string {
	var keys []string
	if ref := p.Spec.Storage.S3.CredentialsSecretRef; ref.IsSet() {
		keys = append(keys, p.SecretNamespace(ref.SecretReference, clusterResourceNamespace)+"/"+ref.Name)
	}
	if oa := p.Spec.Summarizer.OpenAI; oa.IsSet() && oa.APIKeySecretRef.IsSet() {
		keys = append(keys, p.SecretNamespace(oa.APIKeySecretRef.SecretReference, clusterResourceNamespace)+"/"+oa.APIKeySecretRef.Name)
	}
	return keys
}

// Location is where the policy stores a session's objects, with the credentials reference
// resolved to a namespace, so it can be pinned for the session (Locations.Pin) and used
// without the policy.
func (p *Policy) Location(sessionID, clusterResourceNamespace string) *compactionv1alpha1.RecordsLocation {
	loc := p.Storage(clusterResourceNamespace)
	loc.SessionPrefix = sessionPrefix(loc.Prefix, sessionID)
	return loc
}

// Storage is the policy's storage location, without a session.
func (p *Policy) Storage(clusterResourceNamespace string) *compactionv1alpha1.RecordsLocation {
	s := p.Spec.Storage.S3
	loc := &compactionv1alpha1.RecordsLocation{
		Endpoint: s.Endpoint,
		Bucket:   s.Bucket,
		Prefix:   s.Prefix,
		Region:   s.Region,
		Protocol: compactionv1alpha1.S3HTTPS,
	}
	if s.Protocol == compactionv1alpha1.S3HTTP {
		loc.Protocol = compactionv1alpha1.S3HTTP
	}
	if ref := s.CredentialsSecretRef; ref.IsSet() {
		c := ref
		c.Namespace = p.SecretNamespace(ref.SecretReference, clusterResourceNamespace)
		if c.AccessKeyIDKey == "" {
			c.AccessKeyIDKey = "accessKeyID"
		}
		if c.SecretAccessKeyKey == "" {
			c.SecretAccessKeyKey = "secretAccessKey"
		}
		loc.CredentialsSecretRef = c
	}
	return loc
}

// StorageCredentials reads the access key pair of loc from its Secret; both are empty when
// loc names no Secret (the store then uses no credentials). The S3 store's configuration is
// built from loc and these in package backends, so this package needs no S3 client.
func StorageCredentials(ctx context.Context, secrets SecretReader, loc *compactionv1alpha1.RecordsLocation) (accessKey, secretKey string, err error) {
	ref := loc.CredentialsSecretRef
	if !ref.IsSet() {
		return "", "", nil
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	data, err := secrets.SecretValues(ctx, key, ref.AccessKeyIDKey, ref.SecretAccessKeyKey)
	if err != nil {
		if errors.Is(err, ErrSecretNotUsable) {
			return "", "", fmt.Errorf("credentials Secret %q %w", key.String(), ErrSecretNotUsable)
		}
		return "", "", fmt.Errorf("read credentials Secret %s: %w", key, err)
	}
	var missing []string
	access := data[ref.AccessKeyIDKey]
	if len(access) == 0 {
		missing = append(missing, ref.AccessKeyIDKey)
	}
	secret := data[ref.SecretAccessKeyKey]
	if len(secret) == 0 {
		missing = append(missing, ref.SecretAccessKeyKey)
	}
	if len(missing) > 0 {
		return "", "", fmt.Errorf("credentials Secret %s has no (or an empty) %q: %w", key, missing, ErrSecretKeyMissing)
	}
	return string(access), string(secret), nil
}

// APIKey reads the OpenAI summarizer's API key, if the policy names one.
func (p *Policy) APIKey(ctx context.Context, secrets SecretReader, clusterResourceNamespace string) (string, error) {
	oa := p.Spec.Summarizer.OpenAI
	if !oa.IsSet() || !oa.APIKeySecretRef.IsSet() {
		return "", nil
	}
	ref := oa.APIKeySecretRef
	key := types.NamespacedName{Namespace: p.SecretNamespace(ref.SecretReference, clusterResourceNamespace), Name: ref.Name}
	data, err := secrets.SecretValues(ctx, key, ref.Key)
	if err != nil {
		if errors.Is(err, ErrSecretNotUsable) {
			return "", fmt.Errorf("API key Secret %q %w", key.String(), ErrSecretNotUsable)
		}
		return "", fmt.Errorf("read API key Secret %s: %w", key, err)
	}
	v := data[ref.Key]
	if len(v) == 0 {
		return "", fmt.Errorf("API key Secret %s has no (or an empty) %q: %w", key, ref.Key, ErrSecretKeyMissing)
	}
	return string(v), nil
}
