package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// optedIn are the labels of a Secret policies may use.
var optedIn = map[string]string{compactionv1alpha1.CredentialsLabel: compactionv1alpha1.CredentialsLabelValue}

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
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "minio", Labels: optedIn},
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

	// A missing Secret is remembered as not usable.
	gone := client.ObjectKey{Namespace: "team", Name: "gone"}
	for range 3 {
		if _, err := c.SecretValues(ctx, gone, "k"); !errors.Is(err, ErrSecretNotUsable) {
			t.Fatalf("missing Secret: %v, want ErrSecretNotUsable", err)
		}
	}
	if api.reads != 3 {
		t.Errorf("%d API reads after three reads of a missing Secret; want one more", api.reads)
	}
}

func TestSecretCacheExpires(t *testing.T) {
	key := client.ObjectKey{Namespace: "team", Name: "minio"}
	api := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{key: {ObjectMeta: metav1.ObjectMeta{Labels: optedIn}, Data: map[string][]byte{"k": []byte("one")}}}}
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
	api := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{key: {ObjectMeta: metav1.ObjectMeta{Labels: optedIn}, Data: map[string][]byte{"k": []byte("one")}}}}
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

// Issue 28, item 2: writing a policy must not give its author the use of every Secret of the
// namespace. A Secret without the label compaction.harness9.io/credentials=true is answered
// as a missing one is, with the same error text, by both readers, and none of its values is
// returned or kept; labelling it (or removing the label) is seen once the cache forgets it.
func TestSecretsOnlyOptedIn(t *testing.T) {
	ctx := context.Background()
	unlabelled := client.ObjectKey{Namespace: "team", Name: "x"}
	missing := client.ObjectKey{Namespace: "other", Name: "x"}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "x", Labels: map[string]string{
		compactionv1alpha1.CredentialsLabel: "yes", // only "true" opts in
	}}, Data: map[string][]byte{"k": []byte("the-value")}}
	api := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{unlabelled: secret}}
	cache := NewSecretCache(api, time.Hour)
	for name, r := range map[string]SecretReader{"SecretCache": cache, "DirectSecrets": DirectSecrets{Reader: api}} {
		v, err := r.SecretValues(ctx, unlabelled, "k")
		if !errors.Is(err, ErrSecretNotUsable) || v != nil {
			t.Errorf("%s: an unlabelled Secret gave %q, %v; want no value and ErrSecretNotUsable", name, v, err)
		}
		_, merr := r.SecretValues(ctx, missing, "k")
		if !errors.Is(merr, ErrSecretNotUsable) {
			t.Errorf("%s: a missing Secret gave %v, want ErrSecretNotUsable", name, merr)
		}
		if err != nil && merr != nil {
			// The namespace is the only difference: same name, same text.
			want := `secret "other/x" not found or not labelled compaction.harness9.io/credentials=true`
			if merr.Error() != want || err.Error() != `secret "team/x" not found or not labelled compaction.harness9.io/credentials=true` {
				t.Errorf("%s: errors %q and %q; want %q for both, but for the namespace", name, err, merr, want)
			}
		}
	}
	for _, e := range cache.entries.Values() {
		if len(e.value) > 0 || e.present {
			t.Errorf("the cache keeps something of an unlabelled Secret: %+v", e)
		}
	}

	// Opted in: used once the cache forgets the earlier answer (the policy controllers make
	// it forget on a resourceVersion change, which a label change is).
	secret.Labels = optedIn
	cache.Forget(unlabelled)
	for name, r := range map[string]SecretReader{"SecretCache": cache, "DirectSecrets": DirectSecrets{Reader: api}} {
		if v, err := r.SecretValues(ctx, unlabelled, "k"); err != nil || string(v["k"]) != "the-value" {
			t.Errorf("%s: a labelled Secret gave %q, %v", name, v["k"], err)
		}
	}
	// And the label removed again: no longer used.
	secret.Labels = nil
	cache.Forget(unlabelled)
	if v, err := cache.SecretValues(ctx, unlabelled, "k"); !errors.Is(err, ErrSecretNotUsable) || v != nil {
		t.Errorf("the label removed: %q, %v; want ErrSecretNotUsable", v, err)
	}
}

// StorageCredentials and APIKey name the Secret and say the same for a missing and an unlabelled one;
// a labelled Secret lacking a key may say so.
func TestCredentialErrorsDoNotTellMissingFromUnlabelled(t *testing.T) {
	ctx := context.Background()
	api := &secretsReader{secrets: map[client.ObjectKey]*corev1.Secret{
		{Namespace: "team", Name: "unlabelled"}: {Data: map[string][]byte{"accessKeyID": []byte("a"), "secretAccessKey": []byte("s"), "apiKey": []byte("k")}},
		{Namespace: "team", Name: "labelled"}:   {ObjectMeta: metav1.ObjectMeta{Labels: optedIn}, Data: map[string][]byte{"accessKeyID": []byte("a")}},
	}}
	r := DirectSecrets{Reader: api}
	s3Err := func(name string) error {
		loc := &compactionv1alpha1.RecordsLocation{CredentialsSecretRef: compactionv1alpha1.S3CredentialsSecretRef{
			SecretReference: compactionv1alpha1.SecretReference{Namespace: "team", Name: name}, AccessKeyIDKey: "accessKeyID", SecretAccessKeyKey: "secretAccessKey"}}
		access, secret, err := StorageCredentials(ctx, r, loc)
		if access != "" || secret != "" {
			t.Errorf("StorageCredentials(%s) returned credentials with %v", name, err)
		}
		return err
	}
	keyErr := func(name string) error {
		p := &Policy{Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: "team", Name: "p", Spec: spec("", compactionv1alpha1.S3CredentialsSecretRef{})}
		p.Spec.Summarizer.OpenAI = compactionv1alpha1.OpenAISummarizerSpec{BaseURL: "http://llm/v1", Model: "m",
			APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: name}, Key: "apiKey"}}
		key, err := p.APIKey(ctx, r, "")
		if key != "" {
			t.Errorf("APIKey(%s) = %q", name, key)
		}
		return err
	}
	for what, f := range map[string]func(string) error{"credentials": s3Err, "API key": keyErr} {
		// One name, so one text: the unlabelled Secret is asked for as "x", then "x" is gone.
		x := client.ObjectKey{Namespace: "team", Name: "x"}
		api.secrets[x] = api.secrets[client.ObjectKey{Namespace: "team", Name: "unlabelled"}]
		unlabelled := f("x")
		delete(api.secrets, x)
		without := f("x")
		if !errors.Is(unlabelled, ErrSecretNotUsable) || !errors.Is(without, ErrSecretNotUsable) || unlabelled.Error() != without.Error() {
			t.Errorf("%s: unlabelled %v, missing %v; want ErrSecretNotUsable with one message", what, unlabelled, without)
		}
		want := what + ` Secret "team/x" not found or not labelled compaction.harness9.io/credentials=true`
		if without != nil && without.Error() != want {
			t.Errorf("%s: %q, want %q", what, without, want)
		}
	}
	if err := s3Err("labelled"); !errors.Is(err, ErrSecretKeyMissing) || !strings.Contains(err.Error(), "secretAccessKey") {
		t.Errorf("a labelled Secret lacking a key: %v, want ErrSecretKeyMissing naming the key", err)
	}
}
