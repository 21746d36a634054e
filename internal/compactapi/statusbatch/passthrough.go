package statusbatch

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// DefaultPassThroughQuiet is Config.PassThroughQuiet's default.
const DefaultPassThroughQuiet = 5 * time.Minute

// PassThrough is a proxy's report of requests of a session it forwarded to the LLM
// uncompacted (checked by the caller).
type PassThrough struct {
	Reason                          compactionv1alpha1.PassThroughReason
	Protocol, Message, Conversation string
	// Count is how many requests passed through since the proxy's last report.
	Count int64
	// At is when the report arrived.
	At time.Time
}

// passThroughWork is what pass-through reports of a session added since its last status
// write.
type passThroughWork struct {
	requests int64
	reasons  map[compactionv1alpha1.PassThroughReason]int64
	// last is the latest report (nil: none).
	last *passThroughLast
}

// passThroughLast is the latest report of a session, and when it arrived.
type passThroughLast struct {
	reason                          compactionv1alpha1.PassThroughReason
	protocol, message, conversation string
	at                              time.Time
}

// add adds o to w; w's last report, when it has one, is the newer.
func (w *passThroughWork) add(o passThroughWork) {
	w.requests += o.requests
	for r, n := range o.reasons {
		if w.reasons == nil {
			w.reasons = make(map[compactionv1alpha1.PassThroughReason]int64, len(o.reasons))
		}
		w.reasons[r] += n
	}
	if w.last == nil || (o.last != nil && o.last.at.After(w.last.at)) {
		w.last = o.last
	}
}

// RecordPassThrough notes a report on the session obj, to be written with the session's
// other status changes.
func (b *Batcher) RecordPassThrough(obj *compactionv1alpha1.AgentSession, r PassThrough) {
	b.mu.Lock()
	p := b.pendingOf(obj)
	p.passThrough.add(passThroughWork{requests: r.Count, reasons: map[compactionv1alpha1.PassThroughReason]int64{r.Reason: r.Count},
		last: &passThroughLast{reason: r.Reason, protocol: r.Protocol, message: r.Message, conversation: r.Conversation, at: r.At}})
	b.mu.Unlock()
	b.wake()
}

// passThroughOver reports whether a request compacted at now would end obj's PassThrough
// condition: it is True and the last report is at least quiet old.
func passThroughOver(obj *compactionv1alpha1.AgentSession, now time.Time, quiet time.Duration) bool {
	c := meta.FindStatusCondition(obj.Status.Conditions, compactionv1alpha1.ConditionPassThrough)
	if c == nil || c.Status != metav1.ConditionTrue {
		return false
	}
	last := obj.Status.PassThrough.LastTime
	return last == nil || now.Sub(last.Time) >= quiet
}

// applyPassThrough adds w to obj's status.passThrough and sets its PassThrough condition True
// with the latest report.
func applyPassThrough(obj *compactionv1alpha1.AgentSession, w passThroughWork) {
	if w.requests == 0 || w.last == nil {
		return
	}
	st := &obj.Status
	pt := &st.PassThrough
	addTo(&pt.Requests, w.requests)
	for r, n := range w.reasons {
		if c := pt.Reasons.Counter(r); c != nil {
			addTo(c, n)
		}
	}
	last := w.last
	if pt.LastTime != nil && last.at.Before(pt.LastTime.Time) {
		// Another replica wrote a newer report: the counts add up, its last report stays.
		return
	}
	pt.LastReason, pt.LastProtocol, pt.LastTime = last.reason, last.protocol, &metav1.Time{Time: last.at}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: compactionv1alpha1.ConditionPassThrough, Status: metav1.ConditionTrue, Reason: string(last.reason),
		Message: passThroughMessage(ptr.Deref(pt.Requests, 0), last), ObservedGeneration: obj.Generation,
	})
}

// passThroughMessage is the PassThrough condition's message: "12 requests passed through
// uncompacted (StatefulRequest, protocol responses, conversation "sub-1"): <message>".
func passThroughMessage(requests int64, last *passThroughLast) string {
	var b strings.Builder
	if requests == 1 {
		b.WriteString("1 request passed through uncompacted")
	} else {
		fmt.Fprintf(&b, "%d requests passed through uncompacted", requests)
	}
	fmt.Fprintf(&b, " (%s, protocol %s", last.reason, last.protocol)
	if last.conversation != "" {
		fmt.Fprintf(&b, ", conversation %q", last.conversation)
	}
	b.WriteString(")")
	if last.message != "" {
		b.WriteString(": ")
		b.WriteString(last.message)
	}
	return b.String()
}

// resumeCompacting sets obj's PassThrough condition False (reason Compacting) when a request
// was compacted at compacted, at least quiet after the last pass-through report. A condition
// that is absent or False already stays as it is.
func resumeCompacting(obj *compactionv1alpha1.AgentSession, compacted time.Time, quiet time.Duration) {
	if !passThroughOver(obj, compacted, quiet) {
		return
	}
	msg := "requests are compacted"
	if pt := obj.Status.PassThrough; pt.LastTime != nil {
		msg = fmt.Sprintf("requests are compacted; the last pass-through report (%s) was at %s, %s before",
			pt.LastReason, pt.LastTime.UTC().Format(time.RFC3339), compacted.Sub(pt.LastTime.Time).Truncate(time.Second))
	}
	meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
		Type: compactionv1alpha1.ConditionPassThrough, Status: metav1.ConditionFalse, Reason: compactionv1alpha1.ReasonCompacting,
		Message: msg, ObservedGeneration: obj.Generation,
	})
}
