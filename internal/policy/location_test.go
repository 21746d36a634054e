package policy

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

func newLocations(t *testing.T) (Locations, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	return Locations{Namespace: "ops", Reader: c, Writer: c}, c
}

// agentSession is the session team/agent with the given uid.
func agentSession(uid string) *compactionv1alpha1.AgentSession {
	return &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "agent", UID: types.UID(uid)}}
}

func TestPinAndGet(t *testing.T) {
	ctx := context.Background()
	l, c := newLocations(t)
	creds := compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: "s3"}}
	p := &Policy{Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: "team", Name: "p", Spec: spec("/a/", creds)}
	s := agentSession("uid-1")

	if got, err := l.Get(ctx, s); got != nil || err != nil {
		t.Fatalf("Get before Pin = %+v, %v; want nothing pinned", got, err)
	}
	pinned, err := l.Pin(ctx, s, p, "ops")
	if err != nil {
		t.Fatal(err)
	}
	want := p.Location("uid-1", "ops")
	if !SameLocation(pinned.Location, want) || pinned.Policy != "CompactionPolicy/team/p" {
		t.Errorf("Pin = %+v (%s), want %+v", pinned.Location, pinned.Policy, want)
	}
	got, err := l.Get(ctx, s)
	if err != nil || got == nil || !SameLocation(got.Location, want) {
		t.Fatalf("Get after Pin = %+v, %v", got, err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ops", Name: LocationName("team", "agent")}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Immutable == nil || !*cm.Immutable || cm.Labels[LocationUIDLabel] != "uid-1" {
		t.Errorf("ConfigMap immutable %v, labels %v", cm.Immutable, cm.Labels)
	}

	// A later change of the policy's storage does not move a pinned session.
	p.Spec.Storage.S3.Bucket = "elsewhere"
	again, err := l.Pin(ctx, s, p, "ops")
	if err != nil || !SameLocation(again.Location, want) {
		t.Errorf("Pin of a pinned session = %+v, %v; want the first location", again, err)
	}

	// A session of the same name with another UID: the pin is not its own; pinning replaces it.
	next := agentSession("uid-2")
	if got, err := l.Get(ctx, next); got != nil || err != nil {
		t.Errorf("Get for a new session of the same name = %+v, %v; want nothing pinned", got, err)
	}
	replaced, err := l.Pin(ctx, next, p, "ops")
	if err != nil || replaced.Location.Bucket != "elsewhere" || replaced.Location.SessionPrefix != "a/compaction_records/uid-2/" {
		t.Fatalf("Pin over an earlier session's location = %+v, %v", replaced, err)
	}

	// Delete keeps the pin of the existing session, and removes it when the session is gone.
	if err := l.Delete(ctx, "team", "agent", "uid-2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Get(ctx, next); got == nil {
		t.Errorf("Delete removed the pin of the session that exists")
	}
	if err := l.Delete(ctx, "team", "agent", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Get(ctx, next); got != nil || err != nil {
		t.Errorf("Get after Delete = %+v, %v", got, err)
	}
}

// TestGetRejectsInvalidLocations: a ConfigMap that the operator would not have written is not
// used, even with the right UID.
func TestGetRejectsInvalidLocations(t *testing.T) {
	s := agentSession("uid-1")
	good := &compactionv1alpha1.RecordsLocation{Endpoint: "minio:9000", Bucket: "b", Prefix: "p", SessionPrefix: "p/compaction_records/uid-1/",
		CredentialsSecretRef: compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Namespace: "team", Name: "s3"}}}
	cases := []struct {
		name   string
		policy string
		mutate func(*compactionv1alpha1.RecordsLocation, *corev1.ConfigMap)
	}{
		{"another namespace's Secret for a CompactionPolicy", "CompactionPolicy/team/p", func(l *compactionv1alpha1.RecordsLocation, _ *corev1.ConfigMap) {
			l.CredentialsSecretRef.Namespace = "kube-system"
		}},
		{"a CompactionPolicy of another namespace", "CompactionPolicy/other/p", nil},
		{"another session's prefix", "CompactionPolicy/team/p", func(l *compactionv1alpha1.RecordsLocation, _ *corev1.ConfigMap) {
			l.SessionPrefix = "p/compaction_records/uid-9/"
		}},
		{"another session's annotation", "ClusterCompactionPolicy//p", func(_ *compactionv1alpha1.RecordsLocation, cm *corev1.ConfigMap) {
			cm.Annotations[LocationSessionAnnotation] = "team/other"
		}},
		{"an unknown policy kind", "Wizard/team/p", nil},
		{"a Secret without a namespace", "ClusterCompactionPolicy//p", func(l *compactionv1alpha1.RecordsLocation, _ *corev1.ConfigMap) {
			l.CredentialsSecretRef.Namespace = ""
		}},
		{"an unknown protocol", "CompactionPolicy/team/p", func(l *compactionv1alpha1.RecordsLocation, _ *corev1.ConfigMap) {
			l.Protocol = "FTP"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loc := good.DeepCopy()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: LocationName("team", "agent"),
				Labels: map[string]string{LocationUIDLabel: "uid-1"}, Annotations: map[string]string{LocationSessionAnnotation: "team/agent"}}}
			if tc.mutate != nil {
				tc.mutate(loc, cm)
			}
			data, _ := json.Marshal(loc)
			cm.Data = map[string]string{locationKey: string(data), locationPolicyKey: tc.policy}
			l, c := newLocations(t)
			if err := c.Create(context.Background(), cm); err != nil {
				t.Fatal(err)
			}
			if got, err := l.Get(context.Background(), s); !errors.Is(err, ErrInvalidLocation) {
				t.Errorf("Get = %+v, %v; want ErrInvalidLocation", got, err)
			}
		})
	}
	// A cluster policy may name a Secret in any namespace (a cluster admin wrote it).
	loc := good.DeepCopy()
	loc.CredentialsSecretRef.Namespace = "vault"
	data, _ := json.Marshal(loc)
	l, c := newLocations(t)
	if err := c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: LocationName("team", "agent"),
		Labels: map[string]string{LocationUIDLabel: "uid-1"}, Annotations: map[string]string{LocationSessionAnnotation: "team/agent"}},
		Data: map[string]string{locationKey: string(data), locationPolicyKey: "ClusterCompactionPolicy//p"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Get(context.Background(), s); err != nil || got == nil {
		t.Errorf("a ClusterCompactionPolicy's Secret in another namespace: %+v, %v", got, err)
	}
}

// TestGetReadsLocationsPinnedBeforeProtocol: a location pinned before v1alpha1 named the
// protocol says "insecure": true for plain HTTP, and nothing for HTTPS; both keep working.
func TestGetReadsLocationsPinnedBeforeProtocol(t *testing.T) {
	s := agentSession("uid-1")
	for _, tc := range []struct {
		json string
		want compactionv1alpha1.S3Protocol
	}{
		{`{"endpoint":"minio:9000","bucket":"bkt","prefix":"p","sessionPrefix":"p/compaction_records/uid-1/","insecure":true}`, compactionv1alpha1.S3HTTP},
		{`{"endpoint":"s3.example.com","bucket":"bkt","prefix":"p","sessionPrefix":"p/compaction_records/uid-1/"}`, compactionv1alpha1.S3HTTPS},
		{`{"endpoint":"minio:9000","bucket":"bkt","prefix":"p","sessionPrefix":"p/compaction_records/uid-1/","protocol":"HTTP"}`, compactionv1alpha1.S3HTTP},
	} {
		l, c := newLocations(t)
		if err := c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: LocationName("team", "agent"),
			Labels: map[string]string{LocationUIDLabel: "uid-1"}, Annotations: map[string]string{LocationSessionAnnotation: "team/agent"}},
			Data: map[string]string{locationKey: tc.json, locationPolicyKey: "CompactionPolicy/team/p"}}); err != nil {
			t.Fatal(err)
		}
		got, err := l.Get(context.Background(), s)
		if err != nil || got == nil || got.Location.Protocol != tc.want {
			t.Errorf("%s: %+v, %v; want protocol %s", tc.json, got, err, tc.want)
		}
	}
}

// TestDecodedLocations: with Decoded, Get answers what it decoded before for the same
// ConfigMap and session, a copy the caller may change, and decodes a new ConfigMap (a
// session of the same name pinned again) afresh; an invalid location is never kept.
func TestDecodedLocations(t *testing.T) {
	ctx := context.Background()
	l, c := newLocations(t)
	decoded, err := NewDecodedLocations(10)
	if err != nil {
		t.Fatal(err)
	}
	l.Decoded = decoded
	p := &Policy{Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: "team", Name: "p", Spec: spec("/a/", compactionv1alpha1.S3CredentialsSecretRef{})}
	s := agentSession("uid-1")
	if _, err := l.Pin(ctx, s, p, "ops"); err != nil {
		t.Fatal(err)
	}
	first, err := l.Get(ctx, s)
	if err != nil || first == nil || first.object == nil {
		t.Fatalf("Get = %+v, %v", first, err)
	}
	first.Location.Bucket = "changed by the caller"
	second, err := l.Get(ctx, s)
	if err != nil || second.Location.Bucket != p.Spec.Storage.S3.Bucket || second.object == nil || decoded.cache.Len() != 1 {
		t.Fatalf("second Get = %+v, %v (%d kept); want the pinned bucket %q and its ConfigMap", second, err, decoded.cache.Len(), p.Spec.Storage.S3.Bucket)
	}

	// Pinned again for a new session of the same name, from a policy that moved.
	next := agentSession("uid-2")
	p.Spec.Storage.S3.Bucket = "elsewhere"
	if _, err := l.Pin(ctx, next, p, "ops"); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Get(ctx, next); err != nil || got == nil || got.Location.Bucket != "elsewhere" {
		t.Fatalf("Get after a new pin = %+v, %v; want bucket elsewhere", got, err)
	}
	if got, err := l.Get(ctx, s); got != nil || err != nil {
		t.Fatalf("Get for the old session = %+v, %v; want nothing pinned", got, err)
	}

	// An invalid location is refused every time.
	if err := l.Delete(ctx, "team", "agent", ""); err != nil {
		t.Fatal(err)
	}
	before := decoded.cache.Len()
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: LocationName("team", "agent"),
		Labels: map[string]string{LocationUIDLabel: "uid-2"}, Annotations: map[string]string{LocationSessionAnnotation: "team/agent"}},
		Data: map[string]string{locationKey: `{"bucket":"b","sessionPrefix":"p/compaction_records/uid-9/"}`, locationPolicyKey: "CompactionPolicy/team/p"}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := l.Get(ctx, next); !errors.Is(err, ErrInvalidLocation) {
			t.Fatalf("Get of an invalid location = %+v, %v", got, err)
		}
	}
	if decoded.cache.Len() != before {
		t.Errorf("an invalid location was kept")
	}
}
