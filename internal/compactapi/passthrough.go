package compactapi

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactapi/statusbatch"
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
// batcher (statusbatch): at most one status write per session per status interval, however
// many reports.

// DefaultPassThroughQuiet is Config.PassThroughQuiet's default.
const DefaultPassThroughQuiet = statusbatch.DefaultPassThroughQuiet

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
	s.status.RecordPassThrough(sess.obj, statusbatch.PassThrough{Reason: req.reason, Protocol: req.protocol, Message: req.message,
		Conversation: req.conversation, Count: req.count, At: time.Now()})
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusNoContent)
	return nil
}
