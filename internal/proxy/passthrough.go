package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// Reason says why a conversation request went upstream uncompacted. Its values are the
// compaction API's (compactclient.PassThroughReason), which the proxy reports and which
// become the reason of the AgentSession's PassThrough condition; Label is the metric's.
type Reason compactclient.PassThroughReason

// The reasons a request is passed through, and when the proxy gives each.
const (
	// ReasonNotDecodable: a body the proxy could not read as its protocol's request.
	ReasonNotDecodable = Reason(compactclient.PassThroughNotDecodable)
	// ReasonStatefulRequest: a request that continues history held by the provider
	// (previous_response_id, conversation): the proxy does not see what it would compact.
	ReasonStatefulRequest = Reason(compactclient.PassThroughStatefulRequest)
	// ReasonTooLarge: a body over --max-body-bytes.
	ReasonTooLarge = Reason(compactclient.PassThroughTooLarge)
	// ReasonUnsupportedRequest: a POST the proxy has no protocol for (a legacy completions
	// call, an API it does not know).
	ReasonUnsupportedRequest = Reason(compactclient.PassThroughUnsupportedRequest)
	// ReasonCompactionFailed: the compaction API failed or timed out (fail-open).
	ReasonCompactionFailed = Reason(compactclient.PassThroughCompactionFailed)
	// ReasonWebSocket: a WebSocket upgrade, refused with 426 so the client falls back to HTTP.
	ReasonWebSocket = Reason(compactclient.PassThroughWebSocket)
)

// Label is the reason as the metric's result label.
func (r Reason) Label() string {
	switch r {
	case ReasonNotDecodable:
		return "not_decoded"
	case ReasonStatefulRequest:
		return "stateful"
	case ReasonTooLarge:
		return "too_large"
	case ReasonUnsupportedRequest:
		return "unsupported"
	case ReasonCompactionFailed:
		return "failed_open"
	case ReasonWebSocket:
		return "websocket"
	}
	return "other"
}

// passThroughError is a decode error that names its reason; any other decode error is
// ReasonNotDecodable.
type passThroughError struct {
	reason Reason
	err    error
}

func (e *passThroughError) Error() string { return e.err.Error() }
func (e *passThroughError) Unwrap() error { return e.err }

// reasonOf is the reason a decode error passes a request through for.
func reasonOf(err error) Reason {
	var pe *passThroughError
	if errors.As(err, &pe) {
		return pe.reason
	}
	return ReasonNotDecodable
}

// PassThroughReporter is what a Compactor can do to show pass-throughs where the user looks:
// the AgentSession's status. APICompactor reports to the compaction API.
type PassThroughReporter interface {
	ReportPassThrough(ctx context.Context, r PassThrough) error
}

// PassThrough is one report: count requests of protocol passed through for reason since the
// last report of that reason.
type PassThrough struct {
	Conversation string
	Protocol     string
	Reason       Reason
	Message      string
	Count        int
}

// reportInterval is the least time between two reports of one reason: the status shows a
// pass-through within seconds, and a flood of them costs one API call per interval.
const reportInterval = 10 * time.Second

// reportTimeout bounds one report; reports run beside the requests, never in their way.
const reportTimeout = 5 * time.Second

// passThroughs logs and reports the requests passed through: a log line at info the first
// time a conversation is passed through for a reason, and a report to the AgentSession's
// status at most every reportInterval per reason.
type passThroughs struct {
	// logged holds the conversation and reason pairs already logged.
	logged *lru.Cache[string, struct{}]

	mu      sync.Mutex
	pending map[Reason]*PassThrough
	last    map[Reason]time.Time
	sending map[Reason]bool
}

func newPassThroughs() *passThroughs {
	c, _ := lru.New[string, struct{}](maxConversations) // errors only for a size below 1
	return &passThroughs{logged: c, pending: map[Reason]*PassThrough{}, last: map[Reason]time.Time{}, sending: map[Reason]bool{}}
}

// passThrough counts, logs and reports a request of protocol proto passed through for reason.
// conv is "" when the request could not be read far enough to name its conversation.
func (p *Proxy) passThrough(proto string, conv string, reason Reason, detail error) {
	p.cfg.Metrics.request(proto, reason.Label())
	msg := fmt.Sprintf("%s request passed through uncompacted (%s)", proto, reason)
	if detail != nil {
		msg += ": " + detail.Error()
	}
	if len(msg) > maxReportMessage {
		msg = strings.ToValidUTF8(msg[:maxReportMessage], "")
	}
	pt := p.pass
	if seen, _ := pt.logged.ContainsOrAdd(conv+"\x00"+string(reason), struct{}{}); !seen {
		p.cfg.Log.Info("request passed through uncompacted; further ones of this conversation and reason are only counted",
			"protocol", proto, "conversation", conv, "reason", string(reason), "detail", errString(detail))
	}
	rep, ok := p.cfg.Compactor.(PassThroughReporter)
	if !ok {
		return
	}
	pt.mu.Lock()
	cur := pt.pending[reason]
	if cur == nil {
		cur = &PassThrough{Reason: reason}
		pt.pending[reason] = cur
	}
	cur.Count++
	cur.Conversation, cur.Protocol, cur.Message = conv, proto, msg
	send := !pt.sending[reason] && time.Since(pt.last[reason]) >= reportInterval
	var report PassThrough
	if send {
		report = *cur
		delete(pt.pending, reason)
		pt.sending[reason] = true
		pt.last[reason] = time.Now()
	}
	pt.mu.Unlock()
	if !send {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
		defer cancel()
		if err := rep.ReportPassThrough(ctx, report); err != nil {
			p.cfg.Log.V(1).Info("could not report a pass-through to the AgentSession's status", "reason", string(reason), "error", err.Error())
			// Counted again with the next report of the reason.
			pt.mu.Lock()
			if cur := pt.pending[reason]; cur != nil {
				cur.Count += report.Count
			} else {
				pt.pending[reason] = &report
			}
			pt.mu.Unlock()
		}
		pt.mu.Lock()
		pt.sending[reason] = false
		pt.mu.Unlock()
	}()
}

// maxReportMessage bounds a report's message (the API refuses longer ones).
const maxReportMessage = 480

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
