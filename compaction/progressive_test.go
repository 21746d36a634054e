package compaction

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCallsWaitForTheirTurn: a call made while another call of the session holds the
// compactor waits for it, and gives up with ErrBusy (and its context's error) when its
// context ends first.
func TestCallsWaitForTheirTurn(t *testing.T) {
	c, err := NewProgressiveCompactor(Config{ContextWindow: 8000})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: RoleUser, Content: "hi"}}
	c.turn <- struct{}{} // an earlier call holds it
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := compactDelta(ctx, c, Delta{}, msgs, false); !errors.Is(err, ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting past the deadline: %v, want ErrBusy and the deadline", err)
	}
	done := make(chan error)
	go func() {
		_, _, err := c.CompactWithRecord(context.Background(), msgs)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a call ran while another held the compactor: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.release()
	if err := <-done; err != nil {
		t.Fatalf("the waiting call: %v", err)
	}
	// A free compactor is taken even with a context that has ended.
	cancel()
	if _, err := c.State(ctx); errors.Is(err, ErrBusy) {
		t.Fatalf("a free compactor refused: %v", err)
	}
}
