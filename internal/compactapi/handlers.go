package compactapi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactrequest"
)

// maxConflictRetries bounds the reruns of a compaction whose state another replica saved
// first; after that the caller gets a 409 and may retry.
const maxConflictRetries = 5

// jsonMediaType is the only media type of a request body.
const jsonMediaType = "application/json"

// requireJSON accepts the Content-Type of a request body when it is application/json, in any
// case and with any parameters, except a charset other than UTF-8 (the only encoding JSON
// allows, RFC 8259). A request without Content-Type, or with an empty one, is accepted and
// read as JSON, so simple clients need not send it. Anything else (text/plain, form and
// multipart bodies, a malformed or repeated header) is a 415.
func requireJSON(h http.Header) error {
	values := h.Values("Content-Type")
	switch {
	case len(values) == 0:
		return nil
	case len(values) > 1:
		return &apiError{http.StatusUnsupportedMediaType, ReasonMediaType,
			fmt.Sprintf("%d Content-Type headers: send one, %s", len(values), jsonMediaType)}
	case strings.TrimSpace(values[0]) == "":
		return nil
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil {
		return &apiError{http.StatusUnsupportedMediaType, ReasonMediaType,
			fmt.Sprintf("malformed Content-Type %q (%v): send %s", clip(values[0]), err, jsonMediaType)}
	}
	if mt != jsonMediaType {
		return &apiError{http.StatusUnsupportedMediaType, ReasonMediaType,
			fmt.Sprintf("Content-Type %q is not supported: send %s", clip(mt), jsonMediaType)}
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return &apiError{http.StatusUnsupportedMediaType, ReasonMediaType,
			fmt.Sprintf("charset %q is not supported: JSON is UTF-8", clip(cs))}
	}
	return nil
}

// clip shortens a header value the caller sent for an error message.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}

func (s *Server) compact(w http.ResponseWriter, r *http.Request, sess *session, req *compactclient.CompactRequest) error {
	d := compaction.Delta{Watermark: req.Watermark, PrefixHash: req.PrefixHash, Seen: req.Seen}
	if req.Usage != nil {
		d.PromptTokens = req.Usage.PromptTokens
	}

	e, err := s.engineFor(sess)
	if err != nil {
		return err
	}
	var out []compaction.Message
	var rec *compaction.CompactionRecord
	// The session's engine serializes its compactions on this replica; another replica may
	// still save the session's state first. The engine then records nothing and says so, and the
	// compaction runs again on the new state.
	for attempt := 1; ; attempt++ {
		var res compaction.Result
		res, err = e.c.Compact(r.Context(), compaction.Request{Messages: req.Messages, Force: req.Force, Delta: d})
		out, rec = res.View, res.Record
		if !errors.Is(err, compaction.ErrStateConflict) || attempt == maxConflictRetries {
			break
		}
	}
	if err != nil {
		var ve *compaction.ValidationError
		switch {
		case errors.As(err, &ve):
			return &apiError{http.StatusBadRequest, ReasonInvalidMessages, err.Error()}
		case errors.Is(err, compaction.ErrBusy):
			return &apiError{http.StatusServiceUnavailable, ReasonTimeout, "timed out waiting for an earlier request of this session"}
		case errors.Is(err, compaction.ErrStaleWatermark), errors.Is(err, compaction.ErrStateConflict):
			return &apiError{http.StatusConflict, ReasonStaleWatermark, err.Error()}
		case r.Context().Err() != nil:
			return r.Context().Err()
		default:
			return &apiError{http.StatusServiceUnavailable, ReasonStorage, err.Error()}
		}
	}
	if s.lastViews != nil {
		// By conversation: the next usage.promptTokens of this conversation measures this view.
		s.lastViews.Add(sess.storeID(), rec.TokensAfter)
	}
	s.metrics.observeCompaction(e.summarizer.Name(), rec)
	s.emitEvent(sess, rec)
	s.status.RecordTurn(sess.statusSession(), sess.statusTurn(rec))
	resp := compactResponse(sess.cfg, out, rec)
	if req.OmitEcho {
		// The caller has the end of the view that it sent: all of it on a turn that
		// compacts nothing before the first summary, what followed the watermark after.
		// (A seen delta's view part holds no system message: the echo cannot reach them.)
		resp.Echoed = compaction.SharedTail(out, req.Messages)
		resp.Messages = out[:len(out)-resp.Echoed]
	}
	writeCompactResponse(w, resp)
	return nil
}

// conversationParam is the query parameter that names a conversation of the session: a
// proxy in an agent's pod carries several conversations (sub-agents, retries, parallel
// workers) through one AgentSession, each with its own state, records and tool results.
// A query parameter, not a header, so a URL names what it reads (records, a tool result)
// and curl or a browser need nothing more.
const conversationParam = "conversation"

// conversationOf reads the request's conversation: "" (the session's default conversation,
// as before conversations existed) without the parameter. A malformed query, a repeated,
// empty or invalid conversation ID is a 400 that names it, before anything is read or
// stored. Other parameters are ignored, as they always were.
func conversationOf(r *http.Request) (string, error) {
	if r.URL.RawQuery == "" {
		return "", nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", &apiError{http.StatusBadRequest, ReasonBadRequest, "malformed query string: " + err.Error()}
	}
	values, ok := q[conversationParam]
	switch {
	case !ok:
		return "", nil
	case len(values) > 1:
		return "", &apiError{http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("%d %s parameters: send one", len(values), conversationParam)}
	}
	if err := compaction.ValidateConversationID(values[0]); err != nil {
		return "", &apiError{http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf(
			"%s parameter: %v (1 to %d letters, digits, '-', '_' and '.', not starting with '.'; leave it out for the session's default conversation)",
			conversationParam, err, compaction.MaxConversationIDLength)}
	}
	return values[0], nil
}

// scope names what a request works on, for messages.
func (sess *session) scope() string {
	if sess.conversation == "" {
		return "session"
	}
	return fmt.Sprintf("conversation (%q) of the session", sess.conversation)
}

// compactResponse is the answer to a compaction that made the view out.
func compactResponse(cfg compaction.Config, out []compaction.Message, rec *compaction.CompactionRecord) compactclient.CompactResponse {
	u := usageOf(cfg, rec)
	return compactclient.CompactResponse{Messages: out, Record: rec, Watermark: rec.WatermarkAfter, PrefixHash: rec.PrefixHash,
		Seen: rec.Seen, SeenHash: rec.SeenHash, Usage: u.after, NextTier: u.next, TokensToNextTier: u.toNext, HookThreshold: cfg.HookThreshold}
}

// recordUsage is the calibrated usage of a compaction's input and output views and the
// headroom of its output.
type recordUsage struct {
	before, after float64
	next          compaction.Tier
	toNext        int
}

// usageOf reads the calibrated usage and next tier from rec. A record without them (an
// engine that does not fill them yet) gets them computed from its token estimates, with no
// calibration.
func usageOf(cfg compaction.Config, rec *compaction.CompactionRecord) recordUsage {
	if rec.Calibration != 0 || rec.UsageBefore != 0 || rec.UsageAfter != 0 || rec.NextTier != compaction.TierNone || rec.TokensToNextTier != 0 {
		return recordUsage{before: rec.UsageBefore, after: rec.UsageAfter, next: rec.NextTier, toNext: rec.TokensToNextTier}
	}
	next, toNext := cfg.NextTier(rec.TokensAfter)
	return recordUsage{before: cfg.Usage(rec.TokensBefore), after: cfg.Usage(rec.TokensAfter), next: next, toNext: toNext}
}

// lastViewTokens is the estimate of the view this replica returned last for the session (0
// when unknown).
func (s *Server) lastViewTokens(id string) int {
	if s.lastViews == nil {
		return 0
	}
	n, _ := s.lastViews.Get(id)
	return n
}

// parseOffload decodes and checks the body of an offload, before the session is locked.
func (s *Server) parseOffload(body []byte) (*compactclient.OffloadRequest, error) {
	var req compactclient.OffloadRequest
	if err := compactrequest.DecodeOffload(body, &req); err != nil {
		return nil, asAPIError(err)
	}
	if err := s.checkMessages([]compaction.Message{req.Message}); err != nil {
		return nil, err
	}
	m := req.Message
	if m.Role != compaction.RoleTool {
		return nil, &apiError{http.StatusBadRequest, ReasonInvalidMessages, fmt.Sprintf("message.role is %q: only tool results are offloaded", m.Role)}
	}
	if err := compaction.ValidateToolCallID(m.ToolCallID); err != nil {
		return nil, &apiError{http.StatusBadRequest, ReasonInvalidMessages, "message.tool_call_id: " + err.Error()}
	}
	return &req, nil
}

func (s *Server) offload(w http.ResponseWriter, r *http.Request, sess *session, req *compactclient.OffloadRequest) error {
	m := req.Message
	o := compaction.NewOffloader(sess.store, sess.storeID(), sess.cfg.OffloadThreshold, sess.cfg.PreviewLines)
	out, entry, err := o.Hook(r.Context(), m, sess.cfg.HookThreshold)
	if errors.Is(err, compaction.ErrToolResultExists) {
		return &apiError{http.StatusConflict, ReasonToolResultExists, fmt.Sprintf(
			"tool call ID %q already holds a different result in this %s; the stored one is kept: keep this result in the history", m.ToolCallID, sess.scope())}
	}
	if err != nil {
		return &apiError{http.StatusServiceUnavailable, ReasonStorage, "offload failed, keep the result in the history: " + err.Error()}
	}
	if entry != nil {
		s.metrics.OffloadBytes.Add(float64(entry.Bytes))
		s.status.RecordOffload(sess.statusSession(), entry.Bytes)
	}
	writeJSON(w, http.StatusOK, compactclient.OffloadResponse{Message: out, Offloaded: entry, HookThreshold: sess.cfg.HookThreshold})
	return nil
}

func (s *Server) toolResult(w http.ResponseWriter, r *http.Request, sess *session, _ struct{}) error {
	id := r.PathValue("id")
	if err := compaction.ValidateToolCallID(id); err != nil {
		return &apiError{http.StatusBadRequest, ReasonBadRequest, "tool call ID: " + err.Error()}
	}
	// Streamed from the store: a large result is never held in memory, however many
	// readers it has.
	rc, size, err := sess.store.OpenToolResult(r.Context(), sess.storeID(), id)
	switch {
	case errors.Is(err, compaction.ErrNotFound):
		return &apiError{http.StatusNotFound, ReasonNotFound, fmt.Sprintf("no offloaded result for tool call %q in this %s", id, sess.scope())}
	case err != nil:
		return &apiError{http.StatusServiceUnavailable, ReasonStorage, err.Error()}
	}
	defer func() { _ = rc.Close() }() // a read stream: closing only releases its connection
	var body io.Reader = rc
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if compaction.IsImageID(id) {
		// An offloaded image is stored as a data URL: the answer is its bytes, typed.
		br := bufio.NewReader(rc)
		body = br
		if mt, img, ok := compaction.ImageFromStore(br); ok {
			body, size = img, -1
			w.Header().Set("Content-Type", mt)
		}
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if size >= 0 { // -1: the store's endpoint gave no length, or an image is decoded; the answer is chunked
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil {
		// The status line is out: the answer ends short of its Content-Length, which the
		// client sees as a broken read.
		s.log.Error(err, "tool result stream broken", "session", sess.obj.Namespace+"/"+sess.obj.Name, "toolCallID", id)
	}
	return nil
}

func (s *Server) records(w http.ResponseWriter, r *http.Request, sess *session, _ struct{}) error {
	// Records are buffered up to a first chunk so a storage error before any output can still
	// be answered with a proper status; after that they stream.
	sw := &lazyWriter{w: w, threshold: 64 << 10}
	err := sess.store.ReadRecords(r.Context(), sess.storeID(), sw)
	if err != nil && !sw.started {
		return &apiError{http.StatusServiceUnavailable, ReasonStorage, err.Error()}
	}
	if err != nil {
		s.log.Error(err, "records stream broken", "session", sess.obj.Namespace+"/"+sess.obj.Name)
		return nil
	}
	return sw.flush()
}

// lazyWriter holds output until threshold bytes, then writes the header and streams.
type lazyWriter struct {
	w         http.ResponseWriter
	buf       bytes.Buffer
	threshold int
	started   bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if l.started {
		return l.w.Write(p)
	}
	l.buf.Write(p)
	if l.buf.Len() >= l.threshold {
		if err := l.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (l *lazyWriter) flush() error {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/x-ndjson")
		l.w.WriteHeader(http.StatusOK)
	}
	if l.buf.Len() > 0 {
		_, err := l.w.Write(l.buf.Bytes())
		l.buf.Reset()
		return err
	}
	return nil
}
