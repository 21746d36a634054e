package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// APICompactor compacts through the operator's compaction API: one AgentSession, and in it
// one conversation (its own state, records and tool results on the server; its own
// watermark and prefix hash for delta requests here) per conversation the proxy sees.
type APICompactor struct {
	client    *compactclient.Client
	namespace string
	name      string

	mu       sync.Mutex
	sessions *lru.Cache[string, *compactclient.Session]
	// hookThreshold is the last hook threshold an answer of the API gave (0: none yet). It
	// is the AgentSession's policy's, the same for all its conversations.
	hookThreshold atomic.Int64
}

// NewAPICompactor compacts the conversations of the AgentSession namespace/name with c.
func NewAPICompactor(c *compactclient.Client, namespace, name string) *APICompactor {
	sessions, _ := lru.New[string, *compactclient.Session](maxConversations) // errors only for a size below 1
	return &APICompactor{client: c, namespace: namespace, name: name, sessions: sessions}
}

// Compact returns the compacted view of history.
func (a *APICompactor) Compact(ctx context.Context, conversation string, history []compaction.Message, promptTokens int) ([]compaction.Message, error) {
	resp, err := a.session(conversation).Compact(ctx, history, promptTokens)
	if err != nil {
		return nil, err
	}
	if resp.HookThreshold > 0 {
		a.hookThreshold.Store(int64(resp.HookThreshold))
	}
	return resp.Messages, nil
}

// HookThreshold is the policy's hook threshold as the API's last answer gave it (0: not
// known yet, or a server that does not say).
func (a *APICompactor) HookThreshold() int { return int(a.hookThreshold.Load()) }

// OffloadToolResult sends m to the session's toolresults route in conversation.
func (a *APICompactor) OffloadToolResult(ctx context.Context, conversation string, m compaction.Message) (compaction.Message, error) {
	resp, err := a.session(conversation).OffloadToolResult(ctx, m)
	if err != nil {
		return m, err
	}
	if resp.HookThreshold > 0 {
		a.hookThreshold.Store(int64(resp.HookThreshold))
	}
	return resp.Message, nil
}

// GetToolResult reads an offloaded result of conversation back.
func (a *APICompactor) GetToolResult(ctx context.Context, conversation, toolCallID string) ([]byte, error) {
	// Not through a.session: a read-back names any conversation, and must not push the
	// Sessions (watermarks) of the conversations being compacted out of the cache.
	data, err := a.client.GetToolResult(ctx, a.namespace, a.name, toolCallID, compactclient.InConversation(conversation))
	var ae *compactclient.APIError
	if errors.As(err, &ae) && ae.Code == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %w", ErrToolResultNotFound, err)
	}
	return data, err
}

// History reads archived messages of conversation by index.
func (a *APICompactor) History(ctx context.Context, conversation string, r compactclient.HistoryRange) (*compactclient.HistoryResponse, error) {
	return a.client.History(ctx, a.namespace, a.name, r, compactclient.InConversation(conversation))
}

// SearchHistory finds archived messages of conversation by their text.
func (a *APICompactor) SearchHistory(ctx context.Context, conversation string, s compactclient.HistorySearch) (*compactclient.HistoryResponse, error) {
	return a.client.SearchHistory(ctx, a.namespace, a.name, s, compactclient.InConversation(conversation))
}

func (a *APICompactor) session(conversation string) *compactclient.Session {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.sessions.Get(conversation); ok {
		return s
	}
	s := &compactclient.Session{Client: a.client, Namespace: a.namespace, Name: a.name, Conversation: conversation}
	a.sessions.Add(conversation, s)
	return s
}

// ReportPassThrough reports requests passed through to the AgentSession's status.
func (a *APICompactor) ReportPassThrough(ctx context.Context, r PassThrough) error {
	return a.client.ReportPassThrough(ctx, a.namespace, a.name, compactclient.PassThroughReport{
		Conversation: r.Conversation, Protocol: r.Protocol, Reason: compactclient.PassThroughReason(r.Reason),
		Message: r.Message, Count: r.Count,
	})
}
