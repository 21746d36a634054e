package policy

import (
	"context"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Defaults of SecretCache.
const (
	// DefaultSecretTTL is how long a Secret value read from the API server is used before it
	// is read again: a rotated credential is picked up by the compaction API within it.
	DefaultSecretTTL = 30 * time.Second
	// defaultSecretEntries bounds the cache: one entry per (Secret, key) in use.
	defaultSecretEntries = 1024
)

// SecretReader reads a few keys of one Secret.
type SecretReader interface {
	// SecretValues returns the values of keys in the Secret key; a key the Secret does not
	// hold is absent from the map. A missing Secret is a NotFound error.
	SecretValues(ctx context.Context, key client.ObjectKey, keys ...string) (map[string][]byte, error)
}

// SecretCache reads Secrets from the API server on demand (the operator may only get
// Secrets: it neither lists nor watches them) and keeps, for a short time, only the values of
// the keys asked for, never whole Secrets. A missing Secret is remembered as missing for the
// same time, so a flood of requests for a session whose Secret is gone costs one read per TTL.
// It is safe for concurrent use.
type SecretCache struct {
	api     client.Reader
	entries *expirable.LRU[secretEntryKey, secretEntry]
}

type secretEntryKey struct{ namespace, name, key string }

type secretEntry struct {
	value   []byte
	present bool // the key is in the Secret
	missing bool // the Secret does not exist
}

var _ SecretReader = (*SecretCache)(nil)

// NewSecretCache reads Secrets with api (the API server, not a cache) and keeps values for
// ttl (DefaultSecretTTL when 0 or less).
func NewSecretCache(api client.Reader, ttl time.Duration) *SecretCache {
	if ttl <= 0 {
		ttl = DefaultSecretTTL
	}
	return &SecretCache{api: api, entries: expirable.NewLRU[secretEntryKey, secretEntry](defaultSecretEntries, nil, ttl)}
}

// SecretValues implements SecretReader.
func (c *SecretCache) SecretValues(ctx context.Context, key client.ObjectKey, keys ...string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	hit := true
	for _, k := range keys {
		e, ok := c.entries.Get(secretEntryKey{key.Namespace, key.Name, k})
		if !ok {
			hit = false
			break
		}
		if e.missing {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
		}
		if e.present {
			out[k] = e.value
		}
	}
	if hit {
		return out, nil
	}

	var secret corev1.Secret
	err := c.api.Get(ctx, key, &secret)
	if apierrors.IsNotFound(err) {
		for _, k := range keys {
			c.entries.Add(secretEntryKey{key.Namespace, key.Name, k}, secretEntry{missing: true})
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	clear(out)
	for _, k := range keys {
		v, ok := secret.Data[k]
		c.entries.Add(secretEntryKey{key.Namespace, key.Name, k}, secretEntry{value: v, present: ok})
		if ok {
			out[k] = v
		}
	}
	return out, nil
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

// DirectSecrets reads every Secret from the API server, caching nothing.
type DirectSecrets struct{ Reader client.Reader }

// SecretValues implements SecretReader.
func (d DirectSecrets) SecretValues(ctx context.Context, key client.ObjectKey, keys ...string) (map[string][]byte, error) {
	var secret corev1.Secret
	if err := d.Reader.Get(ctx, key, &secret); err != nil {
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
