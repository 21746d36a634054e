package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// TestConditionalWritesProbe is issue 28, item 6 (second half): the S3 store's create-only
// writes (If-None-Match: *) keep a reused tool-call ID from replacing an offloaded original
// and two replicas from both writing a session's first state, but a backend that ignores the
// header overwrites silently. Against the manager binary:
//
//   - a policy on MinIO, which honours the header, gets ConditionalWrites=True (Supported);
//   - a policy on MinIO behind a proxy that drops the header (an S3-compatible store that
//     ignores it) gets ConditionalWrites=False (IfNoneMatchIgnored) and a Warning event of
//     that reason, and stays Ready;
//   - the probe runs once per generation, not at every storage probe (every second here),
//     and again after the policy changes;
//   - no probe object is left in the bucket.
func TestConditionalWritesProbe(t *testing.T) {
	const window = 8000
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	ignoring := testenv.StartIgnoringS3(t, m)
	cl.StartManager(bin, func(c *configv1alpha1.Configuration) {
		c.Controllers.StorageProbeInterval, c.Controllers.StorageRetryInterval = operator.Duration(time.Second), operator.Duration(time.Second)
	})
	c, ctx := cl.Client, context.Background()

	cl.CreateMinIOPolicy(ns, "cw-honours", "cw-honours", m, window, nil)
	secret := builder.MinIOSecret(ns, "cw-ignores-minio", m.AccessKey, m.SecretKey)
	testenv.Must(t, c.Create(ctx, secret))
	ignores := builder.Policy(ns, "cw-ignores").Window(window).
		Storage(builder.MinIOStorage(ignoring.Endpoint(), "agent-context", "cw-ignores", secret.Name)).Build()
	testenv.Must(t, c.Create(ctx, ignores))
	honours := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cw-honours"}}

	if got := waitPolicyCondition(t, c, honours, compactionv1alpha1.ConditionConditionalWrites, metav1.ConditionTrue); got.Reason != compactionv1alpha1.ReasonSupported {
		t.Errorf("MinIO: ConditionalWrites = %s: %q; want reason %s", got.Reason, got.Message, compactionv1alpha1.ReasonSupported)
	}
	got := waitPolicyCondition(t, c, ignores, compactionv1alpha1.ConditionConditionalWrites, metav1.ConditionFalse)
	if got.Reason != compactionv1alpha1.ReasonIfNoneMatchIgnored {
		t.Errorf("ignoring backend: ConditionalWrites = %s, want %s", got.Reason, compactionv1alpha1.ReasonIfNoneMatchIgnored)
	}
	for _, want := range []string{ignoring.Endpoint(), "If-None-Match", "tool-call ID", "replicas"} {
		if !strings.Contains(got.Message, want) {
			t.Errorf("ConditionalWrites message %q does not mention %q", got.Message, want)
		}
	}
	// A warning: the policy stays usable.
	waitPolicyCondition(t, c, ignores, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	waitPolicyCondition(t, c, honours, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	waitPolicyEvent(t, c, ignores.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonIfNoneMatchIgnored)
	if n := ignoring.Stripped.Load(); n < 2 {
		t.Errorf("the proxy dropped If-None-Match from %d requests, want at least the probe's 2", n)
	}

	// Once per generation: storage is probed every second, conditional writes are not.
	before := ignoring.Stripped.Load()
	time.Sleep(5 * time.Second)
	if n := ignoring.Stripped.Load(); n != before {
		t.Errorf("%d more conditional writes in 5 s of storage probes every second; want the answer kept", n-before)
	}
	if ignoring.Passed.Load() == 0 {
		t.Error("no request passed the proxy in 5 s: storage was not probed, the check above proves nothing")
	}
	// A new generation probes again.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ignores), ignores); err != nil {
			return err
		}
		ignores.Spec.ContextWindow = window + 1000
		return c.Update(ctx, ignores)
	}))
	waitPolicyCondition(t, c, ignores, compactionv1alpha1.ConditionConditionalWrites, metav1.ConditionFalse)
	if n := ignoring.Stripped.Load(); n != before+2 {
		t.Errorf("the new generation made %d conditional writes at the ignoring backend, want the probe's 2", n-before)
	}
	if events := policyEvents(t, c, honours.Name); strings.Contains(events, compactionv1alpha1.ReasonIfNoneMatchIgnored) {
		t.Errorf("the policy on MinIO got events %s", events)
	}

	// Nothing of the probes is left in the bucket.
	raw, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	testenv.Must(t, err)
	for obj := range raw.ListObjects(ctx, "agent-context", minio.ListObjectsOptions{Recursive: true}) {
		testenv.Must(t, obj.Err)
		t.Errorf("object left in the bucket: %s", obj.Key)
	}
}

// waitPolicyCondition waits until the policy's condition condType has status want for its
// current generation, and returns it.
func waitPolicyCondition(t *testing.T, c client.Client, p *compactionv1alpha1.CompactionPolicy, condType string, want metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	testenv.Eventually(t, time.Minute, fmt.Sprintf("policy %s: %s=%s", p.Name, condType, want), func() (bool, string) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(p.Status.Conditions, condType)
		if cond == nil {
			return false, "no condition"
		}
		got = *cond
		return cond.Status == want && cond.ObservedGeneration == p.Generation, fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
	})
	return got
}

// policyEvents lists the type/reason of the events about the named object in ns.
func policyEvents(t *testing.T, c client.Client, name string) string {
	t.Helper()
	var list eventsv1.EventList
	testenv.Must(t, c.List(context.Background(), &list, client.InNamespace(ns)))
	var seen []string
	for _, ev := range list.Items {
		if ev.Regarding.Name == name {
			seen = append(seen, ev.Type+"/"+ev.Reason)
		}
	}
	return strings.Join(seen, " ")
}

func waitPolicyEvent(t *testing.T, c client.Client, name, eventType, reason string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%s event %s on %s", eventType, reason, name), func() (bool, string) {
		seen := policyEvents(t, c, name)
		return strings.Contains(" "+seen+" ", " "+eventType+"/"+reason+" "), "events: " + seen
	})
}
