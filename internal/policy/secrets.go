package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// Defaults of SecretCache.
const (
	// DefaultSecretTTL is how long a Secret value read from the API server is used before it
	// is read again: a rotated credential is picked up by the compaction API within it.
	DefaultSecretTTL = 30 * time.Second
	// defaultSecretEntries bounds the cache: one entry per (Secret, key) in use.
	defaultSecretEntries = 1024
	// secretStaleGrace is how long past its TTL a value is still used while the API server
	// cannot be asked (a restart or an upgrade): agents keep compacting through it, as the
	// compaction API's authentication does. A Secret deleted or rotated meanwhile is seen
	// once the API server answers again.
	secretStaleGrace = 5 * time.Minute
)

// ErrSecretNotUsable is what a SecretReader returns for a Secret that does not exist and for
// one that is not labelled compactionv1alpha1.CredentialsLabel=true, with one message for
// both: whoever may write a policy (and so name any Secret of its namespace) learns nothing
// about which Secrets exist, and none of an unlabelled Secret's values is ever used.
var ErrSecretNotUsable = errors.New("not found or not labelled " +
	compactionv1alpha1.CredentialsLabel + "=" + compactionv1alpha1.CredentialsLabelValue)

// notUsable is the error of a Secret that is missing or not labelled: the same text for both.
func notUsable(key client.ObjectKey) error {
	return fmt.Errorf("secret %q %w", key.String(), ErrSecretNotUsable)
}

// OptedIn reports whether the Secret may be used by policies: it carries
// compactionv1alpha1.CredentialsLabel=true.
func OptedIn(secret *corev1.Secret) bool {
	return secret.Labels[compactionv1alpha1.CredentialsLabel] == compactionv1alpha1.CredentialsLabelValue
}

// SecretReader reads a few keys of one Secret.
type SecretReader interface {
	// SecretValues returns the values of keys in the Secret key; a key the Secret does not
	// hold is absent from the map. A missing Secret, and a Secret that is not labelled
	// compactionv1alpha1.CredentialsLabel=true, is ErrSecretNotUsable (the same message for
	// both), and none of the latter's values is returned.
	SecretValues(ctx context.Context, key client.ObjectKey, keys ...string) (map[string][]byte, error)
}

// SecretCache reads Secrets from the API server on demand (the operator may only get
// Secrets: it neither lists nor watches them) and keeps, for a short time, only the values of
// the keys asked for, never whole Secrets. A missing or unlabelled Secret (see OptedIn) is
// remembered as not usable for the same time, and nothing of it is kept, so a flood of
// requests for a session whose Secret is gone costs one read per TTL.
// While the API server cannot answer, values up to secretStaleGrace past their TTL are used.
// It is safe for concurrent use.
type SecretCache struct {
	api     client.Reader
	ttl     time.Duration
	entries *lru.Cache[secretEntryKey, secretEntry]
	now     func() time.Time // time.Now; tests move it
}

type secretEntryKey struct{ namespace, name, key string }

type secretEntry struct {
	value   []byte
	present bool // the key is in the Secret
	// unusable: the Secret does not exist or is not labelled (OptedIn).
	unusable bool
	readAt   time.Time
}

var _ SecretReader = (*SecretCache)(nil)

// NewSecretCache reads Secrets with api (the API server, not a cache) and keeps values for
// ttl (DefaultSecretTTL when 0 or less).
func NewSecretCache(api client.Reader, ttl time.Duration) *SecretCache {
	if ttl <= 0 {
		ttl = DefaultSecretTTL
	}
	entries, err := lru.New[secretEntryKey, secretEntry](defaultSecretEntries)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &SecretCache{api: api, ttl: ttl, entries: entries, now: time.Now}
}

// SecretValues implements SecretReader.
func (c *SecretCache) SecretValues(ctx context.Context, key client.ObjectKey, keys ...string) (map[string][]byte, error) {
	now := c.now()
	if out, ok, err := c.cached(key, keys, now.Add(-c.ttl)); ok {
		return out, err
	}
	var secret corev1.Secret
	err := c.api.Get(ctx, key, &secret)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !OptedIn(&secret)):
		for _, k := range keys {
			c.entries.Add(secretEntryKey{key.Namespace, key.Name, k}, secretEntry{unusable: true, readAt: now})
		}
		return nil, notUsable(key)
	case err != nil:
		if out, ok, cerr := c.cached(key, keys, now.Add(-c.ttl-secretStaleGrace)); ok {
			return out, cerr
		}
		return nil, err
	}
	out := make(map[string][]byte, len(keys))
	for _, k := range keys {
		v, ok := secret.Data[k]
		c.entries.Add(secretEntryKey{key.Namespace, key.Name, k}, secretEntry{value: v, present: ok, readAt: now})
		if ok {
			out[k] = v
		}
	}
	return out, nil
}

// cached answers from the entries of every key read after since; ok is false when one is
// missing or older.
func (c *SecretCache) cached(key client.ObjectKey, keys []string, since time.Time) (map[string][]byte, bool, error) {
	out := make(map[string][]byte, len(keys))
	for _, k := range keys {
		e, ok := c.entries.Get(secretEntryKey{key.Namespace, key.Name, k})
		if !ok || e.readAt.Before(since) {
			return nil, false, nil
		}
		if e.unusable {
			return nil, true, notUsable(key)
		}
		if e.present {
			out[k] = e.value
		}
	}
	return out, true, nil
}

// Forget drops what is cached of the Secret key, so the next read asks the API server: the
// policy controllers call it when they see the Secret's resourceVersion change.
func (c *SecretCache) Forget(key client.ObjectKey) {
	for _, k := range c.entries.Keys() {
		if k.namespace == key.Namespace && k.name == key.Name {
			c.entries.Remove(k)
		}
	}
}

// DirectSecrets reads every Secret from the API server, caching nothing. Like SecretCache,
// it uses only Secrets labelled compactionv1alpha1.CredentialsLabel=true.
type DirectSecrets struct{ Reader client.Reader }

// SecretValues implements SecretReader.
func (d DirectSecrets) SecretValues(ctx context.Context, key client.ObjectKey, keys ...string) (map[string][]byte, error) {
	var secret corev1.Secret
	err := d.Reader.Get(ctx, key, &secret)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !OptedIn(&secret)):
		return nil, notUsable(key)
	case err != nil:
		return nil, err
	}
	out := make(map[string][]byte, len(keys))
	for _, k := range keys {
		if v, ok := secret.Data[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}
