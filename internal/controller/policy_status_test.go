package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/policy/backends"
)

func TestPruneDropsProbesOfVanishedPolicies(t *testing.T) {
	now := time.Now()
	c := &PolicyChecker{ProbeInterval: time.Minute, RetryInterval: 10 * time.Second}
	c.probes = map[types.UID]probeResult{
		"live":     {at: now.Add(-time.Minute)},     // due for its next probe
		"retrying": {at: now.Add(-2 * time.Minute)}, // still within 3 intervals
		"gone":     {at: now.Add(-4 * time.Minute)}, // not probed for 4 intervals
	}
	c.pruneLocked(now)
	for uid, want := range map[types.UID]bool{"live": true, "retrying": true, "gone": false} {
		if _, ok := c.probes[uid]; ok != want {
			t.Errorf("probe %s kept = %v, want %v", uid, ok, want)
		}
	}
}

// countingReader answers every Get with resourceVersion "1" and counts the calls.
type countingReader struct{ gets int }

func (r *countingReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.gets++
	obj.SetResourceVersion("1")
	return nil
}

func (r *countingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

// TestFingerprintReusesARecentLook: the reconciles that only recount sessions (many, when
// sessions come and go) do not ask the API server for the policy's Secrets each time; a look
// older than half the recheck interval, or a new generation, asks again.
func TestFingerprintReusesARecentLook(t *testing.T) {
	api := &countingReader{}
	c := &PolicyChecker{APIReader: api, SecretRecheckInterval: time.Hour, ClusterResourceNamespace: "ops"}
	p := &policy.Policy{Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: "team", Name: "p", Generation: 1,
		Spec: &compactionv1alpha1.CompactionPolicySpec{Storage: compactionv1alpha1.StorageSpec{S3: compactionv1alpha1.S3StorageSpec{
			CredentialsSecretRef: compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: "s"}}}}}}
	for range 10 {
		if _, err := c.fingerprint(context.Background(), "uid", p); err != nil {
			t.Fatal(err)
		}
	}
	if api.gets != 1 {
		t.Errorf("%d Secret reads for 10 reconciles within the interval; want 1", api.gets)
	}
	p.Generation = 2
	if _, err := c.fingerprint(context.Background(), "uid", p); err != nil || api.gets != 2 {
		t.Errorf("a new generation: %d reads, %v; want the Secret read again", api.gets, err)
	}
	c.looks["uid"] = secretLook{fingerprint: c.looks["uid"].fingerprint, at: time.Now().Add(-time.Hour)}
	if _, err := c.fingerprint(context.Background(), "uid", p); err != nil || api.gets != 3 {
		t.Errorf("an old look: %d reads, %v; want the Secret read again", api.gets, err)
	}
}

// TestInvalidEngineConfigIsNotReady: issue 15. A policy the engine would refuse is never
// Ready, whatever its storage says. The CRD's rules are the engine's today, so such a policy
// can only be one stored before a rule existed; it is built here directly.
func TestInvalidEngineConfigIsNotReady(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := compactionv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&compactionv1alpha1.AgentSession{}, sessionPolicyIndex, func(o client.Object) []string {
		s := o.(*compactionv1alpha1.AgentSession)
		return []string{policy.RefKey(s.Namespace, s.Spec.PolicyRef)}
	}).Build()
	checker := &PolicyChecker{Client: c, APIReader: &countingReader{}, Secrets: policy.NewSecretCache(&countingReader{}, 0),
		Stores: &backends.Stores{}, Recorder: events.NewFakeRecorder(10)}
	cp := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p", UID: "uid", Generation: 3},
		Spec: compactionv1alpha1.CompactionPolicySpec{ContextWindow: 100000,
			Thresholds: compactionv1alpha1.Thresholds{WarnPercent: 60, SoftPercent: 55, FullPercent: 80, EmergencyPercent: 95, TargetPercent: 50, MinSavingPercent: 15},
			Storage:    compactionv1alpha1.StorageSpec{S3: compactionv1alpha1.S3StorageSpec{Endpoint: "127.0.0.1:1", Bucket: "b", Protocol: compactionv1alpha1.S3HTTP}}}}
	if _, _, err := checker.UpdateStatus(context.Background(), cp, policy.FromNamespaced(cp), &cp.Status); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(cp.Status.Conditions, compactionv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != compactionv1alpha1.ReasonInvalidEngineConfig || !strings.Contains(ready.Message, "soft threshold") {
		t.Errorf("Ready = %+v, want False %s naming the soft threshold", ready, compactionv1alpha1.ReasonInvalidEngineConfig)
	}
}
