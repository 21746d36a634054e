package policy

import (
	"context"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
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
	// secretStaleGrace is how long past its TTL a value is still used while the API server
	// cannot be asked (a restart or an upgrade): agents keep compacting through it, as the
	// compaction API's authentication does. A Secret deleted or rotated meanwhile is seen
	// once the API server answers again.
	secretStaleGrace = 5 * time.Minute
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
	missing bool // the Secret does not exist
	readAt  time.Time
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
	case apierrors.IsNotFound(err):
		for _, k := range keys {
			c.entries.Add(secretEntryKey{key.Namespace, key.Name, k}, secretEntry{missing: true, readAt: now})
		}
		return nil, err
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
		if e.missing {
			return nil, true, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
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
