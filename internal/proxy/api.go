package proxy

import (
	"context"
	"sync"

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
	return resp.Messages, nil
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
