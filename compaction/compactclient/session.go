package compactclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/harness9/compaction-operator/compaction"
)

// Session compacts one AgentSession's history turn by turn, sending only what is new: it
// remembers the watermark of the last answer and sends the leading system messages plus the
// messages after it, falling back to the full history when the server says the watermark is
// stale (another process compacted, or the history was rewritten) or cannot read the
// session's state (storage down: the full history lets it fail open). Before the first
// summary it does the same from the history the last answer returned as it was
// (CompactRequest.Seen), so a conversation that compacts nothing is not sent whole every
// turn; the server asks for the full history (409) on the turn that must compact. The
// history is expected to grow by appending: a Session checks that the last message it sent
// is still where it was, not every message before it.
//
// Conversation, when set, is the conversation of the AgentSession this Session works on
// (Client.InConversation): one AgentSession carries any number of conversations (a
// proxy's sub-agents, retries, parallel workers), each with its own state, records and tool
// results. Empty is the session's default conversation. Use one Session per conversation.
//
// OffloadToolResult sends only a result over the policy's hook threshold, once an answer has
// said what it is: a smaller one would come back unchanged, so it is returned as it is,
// without a round trip.
type Session struct {
	Client       *Client
	Namespace    string
	Name         string
	Conversation string

	mu         sync.Mutex
	watermark  int
	prefixHash string
	// noEcho: the server refused OmitEcho (it is older than the field).
	noEcho bool
	// seen and seenHash are the last answer's Seen and SeenHash, seenLast the message
	// history[seen-1] was then; noSeen: a server refused Seen (it is older than the field).
	seen     int
	seenHash string
	seenLast compaction.Message
	noSeen   bool
	// hookThreshold is the hook threshold of the last answer that carried one (0: none
	// yet). Not under mu: a hook need not wait for a compaction in flight.
	hookThreshold atomic.Int64
}

// Compact compacts history (the agent's whole raw history) and returns the view for the LLM.
// usage is the prompt token count of the last LLM call, or 0. It asks for answers that leave
// out the messages it sent which end the view (CompactRequest.OmitEcho; not again after a
// server older than it refused the field), and puts them back: the view's last messages are
// then history's own (their tool calls, parts and extra fields shared with it; copy a message
// before changing it in place), and a view that is all of history shares history's array,
// capped so appending to it never writes into history.
func (s *Session) Compact(ctx context.Context, history []compaction.Message, promptTokens int) (*CompactResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req := CompactRequest{Messages: history}
	if promptTokens > 0 {
		req.Usage = &Usage{PromptTokens: promptTokens}
	}
	if from, seen := s.deltaFrom(history); from > 0 {
		delta := deltaOf(history, from)
		dreq := req
		dreq.Messages, dreq.Watermark, dreq.PrefixHash = delta, s.watermark, s.prefixHash
		if seen {
			dreq.Watermark, dreq.Seen, dreq.PrefixHash = 0, from, s.seenHash
		}
		resp, err := s.send(ctx, dreq)
		switch {
		case err == nil && seen:
			if err := s.learnSeen(resp, history, delta); err != nil {
				return nil, err
			}
			return resp, nil
		case err == nil:
			if err := s.learn(resp, delta, history); err != nil {
				return nil, err
			}
			return resp, nil
		case seen && refusesField(err, "seen"):
			// A replica older than seen deltas (a rolling upgrade): full histories from now.
			s.noSeen = true
		case !IsStaleWatermark(err) && !isReason(err, ReasonStorage):
			// Stale watermark or seen history, or the session's state unreadable (storage
			// down): only the full history lets the server answer, failing open on it.
			return nil, err
		}
	}
	resp, err := s.send(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := s.learn(resp, history, history); err != nil {
		return nil, err
	}
	return resp, nil
}

// deltaFrom is where the next request's delta starts in history: after the last answer's
// watermark, or (seen true) after the history it returned as it was, while history still
// holds it. 0: send the full history.
func (s *Session) deltaFrom(history []compaction.Message) (from int, seen bool) {
	switch {
	case s.watermark > 0 && s.watermark <= len(history):
		return s.watermark, false
	case s.watermark > 0 || s.seen == 0 || s.noSeen || s.seen >= len(history) || !history[s.seen-1].Equal(&s.seenLast):
		return 0, false
	}
	// The server answered the seen history as it was: a pin mark added since would have
	// to be taken off the view, which only the full history lets it do.
	for i := range history[:s.seen] {
		if history[i].Pinned {
			return 0, false
		}
	}
	return s.seen, true
}

// deltaOf is history's leading system messages (those before from) followed by the
// messages from from on.
func deltaOf(history []compaction.Message, from int) []compaction.Message {
	lead := 0
	for lead < len(history) && lead < from && history[lead].Role == compaction.RoleSystem {
		lead++
	}
	delta := make([]compaction.Message, 0, lead+len(history)-from)
	delta = append(delta, history[:lead]...)
	return append(delta, history[from:]...)
}

// send sends req with OmitEcho, unless a server refused it before: a server older than the
// field refuses it as unknown (400), and req is then sent again without it, as it is from
// then on. Call with s.mu held.
func (s *Session) send(ctx context.Context, req CompactRequest) (*CompactResponse, error) {
	req.OmitEcho = !s.noEcho
	resp, err := s.Client.Compact(ctx, s.Namespace, s.Name, req, InConversation(s.Conversation))
	if err != nil && req.OmitEcho && refusesField(err, "omitEcho") {
		s.noEcho, req.OmitEcho = true, false
		resp, err = s.Client.Compact(ctx, s.Namespace, s.Name, req, InConversation(s.Conversation))
	}
	return resp, err
}

// refusesField reports whether err is a server's refusal of a request field it does not
// know.
func refusesField(err error, field string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusBadRequest && strings.Contains(ae.Message, `unknown field "`+field+`"`)
}

// learnSeen is learn for the answer to a seen delta that sent delta: the view is history's
// first seen messages followed by the answer's messages and the echo.
func (s *Session) learnSeen(resp *CompactResponse, history, delta []compaction.Message) error {
	from := s.seen
	lead := len(delta) - (len(history) - from)
	if resp.Echoed > len(delta)-lead {
		return fmt.Errorf("the answer says the view ends with %d of the %d messages after the seen history", resp.Echoed, len(delta)-lead)
	}
	whole := len(resp.Messages) == 0 && resp.Echoed == len(delta)-lead
	if err := s.learn(resp, delta, history); err != nil {
		return err
	}
	if whole { // the view is history as it is: share it, as a full request's answer would
		resp.Messages = history[:len(history):len(history)]
		return nil
	}
	view := make([]compaction.Message, 0, from+len(resp.Messages))
	resp.Messages = append(append(view, history[:from]...), resp.Messages...)
	return nil
}

// learn keeps what resp, the answer to a request that sent msgs from history, says for the
// next request, and puts back the messages of msgs the answer left out (Echoed).
func (s *Session) learn(resp *CompactResponse, msgs, history []compaction.Message) error {
	n := resp.Echoed
	if n < 0 || n > len(msgs) {
		return fmt.Errorf("the answer says the view ends with %d of the %d messages sent", n, len(msgs))
	}
	if resp.Seen < 0 || resp.Seen > len(history) || (resp.Seen > 0 && (resp.Watermark != 0 || resp.SeenHash == "")) {
		return fmt.Errorf("the answer says it saw %d messages (watermark %d) of a history of %d", resp.Seen, resp.Watermark, len(history))
	}
	s.watermark, s.prefixHash = resp.Watermark, resp.PrefixHash
	s.seen, s.seenHash, s.seenLast = resp.Seen, resp.SeenHash, compaction.Message{}
	if resp.Seen > 0 {
		s.seenLast = history[resp.Seen-1].Clone()
	}
	s.learnHookThreshold(resp.HookThreshold)
	switch {
	case n == 0:
	case len(resp.Messages) == 0:
		resp.Messages = msgs[len(msgs)-n : len(msgs) : len(msgs)]
	default:
		resp.Messages = append(resp.Messages[:len(resp.Messages):len(resp.Messages)], msgs[len(msgs)-n:]...)
	}
	resp.Echoed = 0
	return nil
}

// OffloadToolResult is Client.OffloadToolResult in the Session's conversation, without the
// round trip for a result at or under the hook threshold of the last answer: the server
// would keep it as it is, and so does this. Until an answer has given the threshold, every
// result is sent.
func (s *Session) OffloadToolResult(ctx context.Context, msg compaction.Message) (*OffloadResponse, error) {
	if t := int(s.hookThreshold.Load()); t > 0 && len(msg.Content) <= t {
		return &OffloadResponse{Message: msg, HookThreshold: t}, nil
	}
	resp, err := s.Client.OffloadToolResult(ctx, s.Namespace, s.Name, msg, InConversation(s.Conversation))
	if err == nil {
		s.learnHookThreshold(resp.HookThreshold)
	}
	return resp, err
}

// HookThreshold is the hook threshold of the last answer that gave one: OffloadToolResult
// sends only results over it. 0 until an answer has given it.
func (s *Session) HookThreshold() int { return int(s.hookThreshold.Load()) }

// learnHookThreshold keeps the hook threshold an answer gave; an answer without one (a
// server before hookThreshold existed) changes nothing.
func (s *Session) learnHookThreshold(t int) {
	if t > 0 {
		s.hookThreshold.Store(int64(t))
	}
}

// GetToolResult is Client.GetToolResult in the Session's conversation.
func (s *Session) GetToolResult(ctx context.Context, toolCallID string) ([]byte, error) {
	return s.Client.GetToolResult(ctx, s.Namespace, s.Name, toolCallID, InConversation(s.Conversation))
}

// Records is Client.Records of the Session's conversation.
func (s *Session) Records(ctx context.Context, w io.Writer) error {
	return s.Client.Records(ctx, s.Namespace, s.Name, w, InConversation(s.Conversation))
}

// History is Client.History of the Session's conversation.
func (s *Session) History(ctx context.Context, r HistoryRange) (*HistoryResponse, error) {
	return s.Client.History(ctx, s.Namespace, s.Name, r, InConversation(s.Conversation))
}

// SearchHistory is Client.SearchHistory in the Session's conversation.
func (s *Session) SearchHistory(ctx context.Context, q HistorySearch) (*HistoryResponse, error) {
	return s.Client.SearchHistory(ctx, s.Namespace, s.Name, q, InConversation(s.Conversation))
}

// Reset is Client.Reset of the Session's conversation; the Session forgets its watermark
// too, so its next Compact sends the full history.
func (s *Session) Reset(ctx context.Context) (*ResetResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp, err := s.Client.Reset(ctx, s.Namespace, s.Name, InConversation(s.Conversation))
	// Whatever the answer: a full history is always right, a stale delta costs a 409.
	s.watermark, s.prefixHash = 0, ""
	s.seen, s.seenHash, s.seenLast = 0, "", compaction.Message{}
	return resp, err
}
