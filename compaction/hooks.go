package compaction

import "context"

// MemoryExtractor receives the messages about to be summarized away, so an agent can move
// durable facts into its long-term memory first. Failures are ignored (fail-open, spec 6.1).
type MemoryExtractor interface {
	Extract(ctx context.Context, sessionID string, msgs []Message) error
}

// TodoInjector supplies the agent's current todo list, which is written into the compaction
// message so pending work survives summarization. Failures are ignored (fail-open).
type TodoInjector interface {
	Todos(ctx context.Context, sessionID string) (string, error)
}

// MemoryExtractorFunc adapts a function to MemoryExtractor.
type MemoryExtractorFunc func(ctx context.Context, sessionID string, msgs []Message) error

// Extract calls f.
func (f MemoryExtractorFunc) Extract(ctx context.Context, sessionID string, msgs []Message) error {
	return f(ctx, sessionID, msgs)
}

// TodoInjectorFunc adapts a function to TodoInjector.
type TodoInjectorFunc func(ctx context.Context, sessionID string) (string, error)

// Todos calls f.
func (f TodoInjectorFunc) Todos(ctx context.Context, sessionID string) (string, error) {
	return f(ctx, sessionID)
}
