package policy

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
)

// TestLocationIndex: on a real kube-apiserver and a manager cache set up as the manager's
// (LocationCache), Locations with an index read a pinned location from it once it is in, see
// it replaced and deleted, and fall back to the API reader for a location not in it yet.
func TestLocationIndex(t *testing.T) {
	_, cfg := kubeenv.Start(t, kubeenv.Options{})
	// Cancelled before the control plane stops (cleanups run last first): the informers'
	// watches end, so kube-apiserver can.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}); err != nil {
		t.Fatal(err)
	}
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: LocationCache("ops")})
	if err != nil {
		t.Fatal(err)
	}
	index, err := NewLocationIndex(ctx, informers, "ops")
	if err != nil {
		t.Fatal(err)
	}
	if _, known := index.lookup(client.ObjectKey{Namespace: "ops", Name: "x"}); known {
		t.Fatal("an index whose informer has not synced says it knows")
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	l := Locations{Namespace: "ops", Reader: informers, APIReader: c, Writer: c, Index: index}
	creds := compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: "s3"}}
	p := &Policy{Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: "team", Name: "p", Spec: spec("/a/", creds)}
	s := agentSession("uid-1")
	if _, err := l.Pin(ctx, s, p, "ops"); err != nil {
		t.Fatal(err)
	}
	// Read at once: not in the index yet or already, the API reader or the index has it.
	if got, err := l.Get(ctx, s); err != nil || got == nil {
		t.Fatalf("Get right after Pin: %+v, %v", got, err)
	}
	key := l.key("team", "agent")
	testenv.Eventually(t, 30*time.Second, "the pinned location in the index", func() (bool, string) {
		cm, known := index.lookup(key)
		return known && cm != nil, fmt.Sprintf("known %t, %v", known, cm != nil)
	})
	// The index answers alone: a reader that fails is never asked.
	indexed := Locations{Namespace: "ops", Reader: failingReader{}, Index: index}
	if got, err := indexed.Get(ctx, s); err != nil || got == nil || got.Policy != "CompactionPolicy/team/p" {
		t.Fatalf("Get from the index: %+v, %v", got, err)
	}

	// Pinned again for a new session of the same name (another UID): the index follows.
	if err := l.Delete(ctx, "team", "agent", ""); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the deleted location gone from the index", func() (bool, string) {
		cm, known := index.lookup(key)
		return known && cm == nil, fmt.Sprintf("known %t, %v", known, cm != nil)
	})
	if got, err := l.Get(ctx, s); err != nil || got != nil {
		t.Fatalf("Get after Delete: %+v, %v; want nothing pinned", got, err)
	}
	s2 := agentSession("uid-2")
	if _, err := l.Pin(ctx, s2, p, "ops"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the new session's location in the index", func() (bool, string) {
		got, err := indexed.Get(ctx, s2)
		return err == nil && got != nil, fmt.Sprintf("%+v, %v", got, err)
	})
	if got, err := indexed.Get(ctx, s); err != nil || got != nil {
		t.Fatalf("the old session's location from the index: %+v, %v; want none (another UID)", got, err)
	}
}

// failingReader fails every read.
type failingReader struct{ client.Reader }

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return fmt.Errorf("the reader was asked")
}
