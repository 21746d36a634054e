package policy

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretsReader serves Secrets (or their metadata) from a map and counts reads.
type secretsReader struct {
	secrets map[client.ObjectKey]*corev1.Secret
	reads   int
}

func (r *secretsReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.reads++
	s, ok := r.secrets[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		s.DeepCopyInto(o)
	case *metav1.PartialObjectMetadata:
		s.ObjectMeta.DeepCopyInto(&o.ObjectMeta)
	}
	return nil
}

func (r *secretsReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

func TestSecretCache(t *testing.T) {
	key := client.ObjectKey{Namespace: "team", Name: "minio"}
	v1 := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "minio", ResourceVersion: "1"}, Data: map[string][]byte{"k": []byte("one")}}
	api := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{key: v1}}
	meta := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{}} // the watch has not seen it yet
	c := &SecretCache{Meta: meta, API: api}
	get := func() string {
		t.Helper()
		var s corev1.Secret
		if err := c.Get(context.Background(), key, &s); err != nil {
			t.Fatalf("Get: %v", err)
		}
		return string(s.Data["k"])
	}

	if got := get(); got != "one" || api.reads != 1 {
		t.Fatalf("Secret missing from the metadata cache: %q after %d API reads; want it read from the API server", got, api.reads)
	}
	meta.secrets[key] = v1 // the watch caught up
	get()
	get()
	if api.reads != 2 {
		t.Errorf("%d API reads for an unchanged Secret; want one more, then none", api.reads)
	}
	v2 := v1.DeepCopy()
	v2.ResourceVersion, v2.Data["k"] = "2", []byte("two")
	api.secrets[key], meta.secrets[key] = v2, v2 // rotated
	if got := get(); got != "two" || api.reads != 3 {
		t.Errorf("rotated Secret: %q after %d API reads; want the new data, read once", got, api.reads)
	}
	delete(api.secrets, key)
	delete(meta.secrets, key)
	var s corev1.Secret
	if err := c.Get(context.Background(), key, &s); !apierrors.IsNotFound(err) {
		t.Errorf("deleted Secret: %v, want NotFound", err)
	}
}
