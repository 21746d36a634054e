package compactapi

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactrequest"
)

// The pass-through route: a compaction-proxy that forwards requests of a session to the LLM
// uncompacted says so (POST .../passthrough), and the session's status shows it: the counts
// in status.passThrough, and the PassThrough condition, whose reason is the Proxy column of
// kubectl get agentsession.
//
// The condition's lifecycle: a report makes it True, with the report's reason and a message
// that counts the requests and repeats the report's message. It goes False (reason
// Compacting) when a request of the session is compacted (any answered compact request, also
// one that needed no compaction) at least PassThroughQuiet after the last report: a proxy
// that passes some requests through and compacts others (a WebSocket next to HTTP requests,
// say) keeps it True as long as it keeps reporting. A session whose requests stop altogether
// keeps the last state; status.passThrough.lastTime says when the last report came.
//
// Everything in a report is the tenant's word about its own session, and it is bounded: a
// small body (maxPassThroughBody), a reason of a fixed set, a protocol token, a message of at
// most compactclient.MaxPassThroughMessageBytes of printable UTF-8, a bounded count. The
// reports of a session are added up and written with its other status changes by the status
// batcher: at most one status write per session per status interval, however many reports.

// DefaultPassThroughQuiet is Config.PassThroughQuiet's default.
const DefaultPassThroughQuiet = 5 * time.Minute

// maxPassThroughBody bounds the body of a pass-through report: the fields at their longest,
// each character of the message escaped (\u00XX, 6 bytes), and room for whitespace.
const maxPassThroughBody = 8 << 10

// protocolPattern is what a report's protocol may be (the CRD's pattern of
// status.passThrough.lastProtocol, with its length).
var protocolPattern = regexp.MustCompile(`^[a-z][a-z0-9._-]*$`)

// passThroughReport is a checked report.
type passThroughReport struct {
	conversation, protocol, message string
	reason                          compactionv1alpha1.PassThroughReason
	count                           int64
}

// parsePassThrough decodes and checks a pass-through report; anything it does not accept is a
// 400 that says why.
func parsePassThrough(body []byte) (*passThroughReport, error) {
	var req compactclient.PassThroughReport
	if err := compactrequest.Decode(body, &req); err != nil {
		return nil, asAPIError(err)
	}
	bad := func(format string, args ...any) error {
		return &apiError{http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf(format, args...)}
	}
	if !req.Reason.Valid() {
		names := make([]string, len(compactclient.PassThroughReasons))
		for i, r := range compactclient.PassThroughReasons {
			names[i] = string(r)
		}
		return nil, bad("reason %q is not one of %s", clip(string(req.Reason)), strings.Join(names, ", "))
	}
	if len(req.Protocol) == 0 || len(req.Protocol) > compactclient.MaxPassThroughProtocolLength || !protocolPattern.MatchString(req.Protocol) {
		return nil, bad("protocol %q: send the LLM API as a lower-case token of 1 to %d letters, digits, '.', '_' and '-', starting with a letter (openai, anthropic, responses, gemini)",
			clip(req.Protocol), compactclient.MaxPassThroughProtocolLength)
	}
	if err := checkPassThroughMessage(req.Message); err != nil {
		return nil, err
	}
	if req.Count < 1 || req.Count > compactclient.MaxPassThroughCount {
		return nil, bad("count is %d: send how many requests passed through since the last report, 1 to %d", req.Count, compactclient.MaxPassThroughCount)
	}
	if req.Conversation != "" {
		if err := compaction.ValidateConversationID(req.Conversation); err != nil {
			return nil, bad("conversation: %v (1 to %d letters, digits, '-', '_' and '.', not starting with '.'; leave it out for the session's default conversation)",
				err, compaction.MaxConversationIDLength)
		}
	}
	return &passThroughReport{conversation: req.Conversation, protocol: req.Protocol, message: req.Message,
		reason: compactionv1alpha1.PassThroughReason(req.Reason), count: int64(req.Count)}, nil
}

// checkPassThroughMessage accepts a report's message: printable UTF-8 of at most
// compactclient.MaxPassThroughMessageBytes bytes (compactclient.FitPassThroughMessage makes
// one).
func checkPassThroughMessage(msg string) error {
	switch {
	case len(msg) > compactclient.MaxPassThroughMessageBytes:
		return &apiError{http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("message is %d bytes: send at most %d",
			len(msg), compactclient.MaxPassThroughMessageBytes)}
	case !utf8.ValidString(msg):
		return &apiError{http.StatusBadRequest, ReasonBadRequest, "message is not valid UTF-8"}
	}
	for i, r := range msg {
		if !unicode.IsPrint(r) {
			return &apiError{http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf(
				"message has the unprintable character %U at byte %d: send printable text on one line", r, i)}
		}
	}
	return nil
}

// passThrough counts a pass-through report in the session's status and answers 204.
func (s *Server) passThrough(w http.ResponseWriter, _ *http.Request, sess *session, req *passThroughReport) error {
	switch {
	case req.conversation == "":
		req.conversation = sess.conversation
	case sess.conversation != "" && sess.conversation != req.conversation:
		return &apiError{http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf(
			"the %s parameter (%q) and the body's conversation (%q) differ: send one", conversationParam, sess.conversation, req.conversation)}
	}
	s.metrics.PassThroughReports.WithLabelValues(string(req.reason)).Inc()
	s.metrics.PassThroughRequests.WithLabelValues(string(req.reason)).Add(float64(req.count))
	s.recordPassThrough(sess, req, time.Now())
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusNoContent)
	return nil
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

// recordPassThrough notes a report, to be written with the session's other status changes.
func (s *Server) recordPassThrough(sess *session, req *passThroughReport, now time.Time) {
	b := s.status
	b.mu.Lock()
	p := b.pendingOf(sess)
	p.passThrough.add(passThroughWork{requests: req.count, reasons: map[compactionv1alpha1.PassThroughReason]int64{req.reason: req.count},
		last: &passThroughLast{reason: req.reason, protocol: req.protocol, message: req.message, conversation: req.conversation, at: now}})
	b.mu.Unlock()
	b.wake()
}

// passThroughQuiet is Config.PassThroughQuiet, or its default.
func (s *Server) passThroughQuiet() time.Duration {
	if s.cfg.PassThroughQuiet > 0 {
		return s.cfg.PassThroughQuiet
	}
	return DefaultPassThroughQuiet
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
