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
// session's state (storage down: the full history lets it fail open).
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
	if s.watermark > 0 && s.watermark <= len(history) {
		lead := 0
		for lead < len(history) && lead < s.watermark && history[lead].Role == compaction.RoleSystem {
			lead++
		}
		delta := make([]compaction.Message, 0, lead+len(history)-s.watermark)
		delta = append(delta, history[:lead]...)
		delta = append(delta, history[s.watermark:]...)
		dreq := req
		dreq.Messages, dreq.Watermark, dreq.PrefixHash = delta, s.watermark, s.prefixHash
		resp, err := s.send(ctx, dreq)
		if err == nil {
			if err := s.learn(resp, delta); err != nil {
				return nil, err
			}
			return resp, nil
		}
		// Stale watermark, or the session's state unreadable (storage down): only the full
		// history lets the server answer, failing open on it.
		if !IsStaleWatermark(err) && !isReason(err, ReasonStorage) {
			return nil, err
		}
	}
	resp, err := s.send(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := s.learn(resp, history); err != nil {
		return nil, err
	}
	return resp, nil
}

// send sends req with OmitEcho, unless a server refused it before: a server older than the
// field refuses it as unknown (400), and req is then sent again without it, as it is from
// then on. Call with s.mu held.
func (s *Session) send(ctx context.Context, req CompactRequest) (*CompactResponse, error) {
	req.OmitEcho = !s.noEcho
	resp, err := s.Client.Compact(ctx, s.Namespace, s.Name, req, InConversation(s.Conversation))
	if err != nil && req.OmitEcho && refusesOmitEcho(err) {
		s.noEcho, req.OmitEcho = true, false
		resp, err = s.Client.Compact(ctx, s.Namespace, s.Name, req, InConversation(s.Conversation))
	}
	return resp, err
}

// refusesOmitEcho reports whether err is a server's refusal of the omitEcho field it does
// not know.
func refusesOmitEcho(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusBadRequest && strings.Contains(ae.Message, `unknown field "omitEcho"`)
}

// learn keeps what resp, the answer to a request that sent msgs, says for the next request,
// and puts back the messages of msgs the answer left out (Echoed).
func (s *Session) learn(resp *CompactResponse, msgs []compaction.Message) error {
	n := resp.Echoed
	if n < 0 || n > len(msgs) {
		return fmt.Errorf("the answer says the view ends with %d of the %d messages sent", n, len(msgs))
	}
	s.watermark, s.prefixHash = resp.Watermark, resp.PrefixHash
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
