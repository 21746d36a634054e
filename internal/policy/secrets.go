package policy

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxSecrets bounds SecretCache; a full cache is emptied.
const maxSecrets = 1024

// SecretCache reads Secrets through the metadata-only informer: it asks the API server for a
// Secret's data only when the cached resourceVersion changed, so per-request reads are free
// while a rotated credential is picked up as soon as the watch delivers it. It implements
// client.Reader for Secrets only.
type SecretCache struct {
	// Meta reads PartialObjectMetadata from the manager's cache.
	Meta client.Reader
	// API reads Secrets from the API server.
	API client.Reader

	mu      sync.Mutex
	secrets map[client.ObjectKey]*corev1.Secret
}

var _ client.Reader = (*SecretCache)(nil)

// Get fills obj, which must be a *corev1.Secret.
func (c *SecretCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return fmt.Errorf("SecretCache reads Secrets only, not %T", obj)
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := c.Meta.Get(ctx, key, m); err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		// Not in the cache yet: a Secret created a moment ago, or a watch that is catching
		// up (after an API server restart the watch backs off for a while). Ask the API
		// server; the answer is not cached, as there is no resourceVersion to check it by.
		return c.API.Get(ctx, key, secret, opts...)
	}
	c.mu.Lock()
	cached, hit := c.secrets[key]
	c.mu.Unlock()
	if hit && cached.ResourceVersion == m.ResourceVersion {
		cached.DeepCopyInto(secret)
		return nil
	}
	if err := c.API.Get(ctx, key, secret, opts...); err != nil {
		return err
	}
	c.mu.Lock()
	if c.secrets == nil || len(c.secrets) >= maxSecrets {
		c.secrets = make(map[client.ObjectKey]*corev1.Secret)
	}
	c.secrets[key] = secret.DeepCopy()
	c.mu.Unlock()
	return nil
}

// List is not supported: the operator never lists Secret data.
func (c *SecretCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("SecretCache does not list")
}
