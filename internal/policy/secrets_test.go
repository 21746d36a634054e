package policy

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretsReader serves Secrets from a map and counts reads.
type secretsReader struct {
	secrets map[client.ObjectKey]*corev1.Secret
	reads   int
	down    error // every read fails with it, as when the API server is restarting
}

func (r *secretsReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.reads++
	if r.down != nil {
		return r.down
	}
	s, ok := r.secrets[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	}
	s.DeepCopyInto(obj.(*corev1.Secret))
	return nil
}

func (r *secretsReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

func TestSecretCache(t *testing.T) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "team", Name: "minio"}
	api := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{key: {
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "minio"},
		Data:       map[string][]byte{"k": []byte("one"), "other": []byte("not-used")},
	}}}
	c := NewSecretCache(api, time.Hour)
	get := func() string {
		t.Helper()
		v, err := c.SecretValues(ctx, key, "k", "absent")
		if err != nil {
			t.Fatalf("SecretValues: %v", err)
		}
		if _, ok := v["absent"]; ok {
			t.Errorf("a key the Secret lacks is in the answer")
		}
		return string(v["k"])
	}
	if got := get(); got != "one" || api.reads != 1 {
		t.Fatalf("first read: %q after %d API reads", got, api.reads)
	}
	get()
	if api.reads != 1 {
		t.Errorf("%d API reads for a cached value; want 1", api.reads)
	}
	// Only the keys asked for are kept, never the whole Secret.
	for _, e := range c.entries.Values() {
		if string(e.value) == "not-used" {
			t.Errorf("the cache holds the value of a key nobody asked for")
		}
	}

	// Rotated: the cache answers until told (Forget) or until the TTL passes.
	api.secrets[key].Data["k"] = []byte("two")
	if got := get(); got != "one" {
		t.Errorf("before Forget: %q", got)
	}
	c.Forget(key)
	if got := get(); got != "two" || api.reads != 2 {
		t.Errorf("after Forget: %q after %d API reads; want the new value, read once", got, api.reads)
	}

	// A missing Secret is remembered as missing.
	gone := client.ObjectKey{Namespace: "team", Name: "gone"}
	for range 3 {
		if _, err := c.SecretValues(ctx, gone, "k"); !apierrors.IsNotFound(err) {
			t.Fatalf("missing Secret: %v, want NotFound", err)
		}
	}
	if api.reads != 3 {
		t.Errorf("%d API reads after three reads of a missing Secret; want one more", api.reads)
	}
}

func TestSecretCacheExpires(t *testing.T) {
	key := client.ObjectKey{Namespace: "team", Name: "minio"}
	api := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{key: {Data: map[string][]byte{"k": []byte("one")}}}}
	c := NewSecretCache(api, time.Millisecond)
	for range 2 {
		if _, err := c.SecretValues(context.Background(), key, "k"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // past the TTL
	}
	if api.reads != 2 {
		t.Errorf("%d API reads; an expired value must be read again", api.reads)
	}
}

// While the API server cannot answer, a value read before is used for secretStaleGrace past
// its TTL, so agents keep compacting through an API server restart; after that, the error.
func TestSecretCacheServesStaleWhileAPIServerIsDown(t *testing.T) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "team", Name: "minio"}
	api := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{key: {Data: map[string][]byte{"k": []byte("one")}}}}
	c := NewSecretCache(api, time.Minute)
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	if _, err := c.SecretValues(ctx, key, "k"); err != nil {
		t.Fatal(err)
	}
	api.down = errors.New("connect: connection refused")
	now = now.Add(time.Minute + secretStaleGrace - time.Second)
	v, err := c.SecretValues(ctx, key, "k")
	if err != nil || string(v["k"]) != "one" {
		t.Fatalf("API server down, value within the grace: %q, %v; want the value read before", v["k"], err)
	}
	if api.reads != 2 {
		t.Errorf("%d API reads; an expired value must be asked for again first", api.reads)
	}
	now = now.Add(2 * time.Second)
	if _, err := c.SecretValues(ctx, key, "k"); !errors.Is(err, api.down) {
		t.Errorf("API server down, value past the grace: error %v, want the API server's", err)
	}
	// A missing Secret is not made up from nothing: with no value ever read, the error.
	other := client.ObjectKey{Namespace: "team", Name: "other"}
	if _, err := c.SecretValues(ctx, other, "k"); !errors.Is(err, api.down) {
		t.Errorf("never read, API server down: error %v, want the API server's", err)
	}
}
