package statusbatch

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// TestPassThroughLifecycle: reports set the condition True with the last reason and add up;
// a compaction sets it False (Compacting) only once the last report is PassThroughQuiet old,
// and a later report makes it True again.
func TestPassThroughLifecycle(t *testing.T) {
	const quiet = 5 * time.Minute
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	obj := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u", Generation: 3}}
	report := func(reason compactionv1alpha1.PassThroughReason, n int64, at time.Time, msg string) passThroughWork {
		return passThroughWork{requests: n, reasons: map[compactionv1alpha1.PassThroughReason]int64{reason: n},
			last: &passThroughLast{reason: reason, protocol: "openai", message: msg, at: at}}
	}
	cond := func() metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(obj.Status.Conditions, compactionv1alpha1.ConditionPassThrough)
		if c == nil {
			t.Fatal("no PassThrough condition")
		}
		return *c
	}

	resumeCompacting(obj, t0, quiet)
	if len(obj.Status.Conditions) != 0 {
		t.Fatalf("a compaction with no report set %+v", obj.Status.Conditions)
	}
	applyPassThrough(obj, report(compactionv1alpha1.PassThroughStatefulRequest, 12, t0, "previous_response_id is set"))
	c := cond()
	if c.Status != metav1.ConditionTrue || c.Reason != "StatefulRequest" || c.ObservedGeneration != 3 ||
		c.Message != "12 requests passed through uncompacted (StatefulRequest, protocol openai): previous_response_id is set" {
		t.Errorf("after a report: %+v", c)
	}
	w := report(compactionv1alpha1.PassThroughWebSocket, 1, t0.Add(time.Minute), "")
	w.last.conversation = "sub-1"
	applyPassThrough(obj, w)
	pt := &obj.Status.PassThrough
	if c := cond(); c.Reason != "WebSocket" || c.Message != `13 requests passed through uncompacted (WebSocket, protocol openai, conversation "sub-1")` {
		t.Errorf("after a second report: %+v", c)
	}
	if ptr.Deref(pt.Requests, 0) != 13 || ptr.Deref(pt.Reasons.StatefulRequest, 0) != 12 || ptr.Deref(pt.Reasons.WebSocket, 0) != 1 ||
		pt.Reasons.TooLarge != nil || pt.LastReason != compactionv1alpha1.PassThroughWebSocket || !pt.LastTime.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("status.passThrough %+v", pt)
	}
	// An older report written after a newer one (another replica's) adds its counts and
	// leaves the last report.
	applyPassThrough(obj, report(compactionv1alpha1.PassThroughTooLarge, 2, t0.Add(30*time.Second), "big"))
	if c := cond(); c.Reason != "WebSocket" || ptr.Deref(pt.Requests, 0) != 15 || ptr.Deref(pt.Reasons.TooLarge, 0) != 2 {
		t.Errorf("after an older report: %+v, %+v", c, pt)
	}

	resumeCompacting(obj, t0.Add(time.Minute+quiet-time.Second), quiet)
	if c := cond(); c.Status != metav1.ConditionTrue {
		t.Errorf("a compaction within the quiet interval ended the condition: %+v", c)
	}
	resumeCompacting(obj, t0.Add(time.Minute+quiet), quiet)
	if c := cond(); c.Status != metav1.ConditionFalse || c.Reason != compactionv1alpha1.ReasonCompacting ||
		!strings.Contains(c.Message, "last pass-through report (WebSocket) was at 2026-03-01T12:01:00Z, 5m0s before") {
		t.Errorf("after a compaction past the quiet interval: %+v", c)
	}
	if ptr.Deref(pt.Requests, 0) != 15 {
		t.Errorf("the counts changed with the condition: %+v", pt)
	}
	applyPassThrough(obj, report(compactionv1alpha1.PassThroughCompactionFailed, 1, t0.Add(time.Hour), "503"))
	if c := cond(); c.Status != metav1.ConditionTrue || c.Reason != "CompactionFailed" {
		t.Errorf("a report after Compacting: %+v", c)
	}
}

// TestRequeueKeepsPassThrough: a failed write's reports are kept under newer changes, and a
// report's pending change never clears the anchors (it does not know the policy).
func TestRequeueKeepsPassThrough(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	t0 := time.Now()
	failed := &pendingStatus{uid: "u1", compacted: t0, passThrough: passThroughWork{requests: 3,
		reasons: map[compactionv1alpha1.PassThroughReason]int64{compactionv1alpha1.PassThroughTooLarge: 3},
		last:    &passThroughLast{reason: compactionv1alpha1.PassThroughTooLarge, at: t0}}}
	b := New(Config{})
	b.pending[key] = &pendingStatus{uid: "u1", passThrough: passThroughWork{requests: 1,
		reasons: map[compactionv1alpha1.PassThroughReason]int64{compactionv1alpha1.PassThroughWebSocket: 1},
		last:    &passThroughLast{reason: compactionv1alpha1.PassThroughWebSocket, at: t0.Add(time.Second)}}}
	b.requeue(key, failed)
	p := b.pending[key]
	if p.passThrough.requests != 4 || p.passThrough.reasons[compactionv1alpha1.PassThroughTooLarge] != 3 ||
		p.passThrough.reasons[compactionv1alpha1.PassThroughWebSocket] != 1 || p.passThrough.last.reason != compactionv1alpha1.PassThroughWebSocket {
		t.Errorf("pass-through after requeue: %+v", p.passThrough)
	}
	if !p.compacted.Equal(t0) {
		t.Errorf("compacted %v, want %v", p.compacted, t0)
	}
	if p.anchorsKnown {
		t.Error("a change of reports only claims to know the policy's anchorsInStatus")
	}
}
