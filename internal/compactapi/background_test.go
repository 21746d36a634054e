package compactapi

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestBackground: issue 29, item 4. The replica runs summarizations off the turn on a few
// workers with a bounded queue: past it, work is refused (the engine then summarizes
// extractively), never queued without bound; taken work runs on a context of its own, not
// the request's, and the metrics say what became of it.
func TestBackground(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b := newBackground(m)
	release := make(chan struct{})
	var ran atomic.Int32
	block := func(ctx context.Context) {
		select {
		case <-release:
		case <-ctx.Done():
			t.Error("work cancelled before it was released")
		}
		ran.Add(1)
	}
	// Not started yet: the queue fills, then refuses.
	for i := range backgroundQueue {
		if !b.Go("sess-a/conversations/c"+string(rune('a'+i%26)), block) {
			t.Fatalf("work %d refused with room in the queue", i)
		}
	}
	if b.Go("sess-b", block) {
		t.Fatal("work taken past the queue's limit")
	}
	if got := counterValue(t, m.BackgroundSummaries.WithLabelValues("rejected")); got != 1 {
		t.Errorf("rejected = %v, want 1", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.run(ctx); close(done) }()
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for ran.Load() < backgroundQueue && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ran.Load() != backgroundQueue {
		t.Fatalf("ran %d of %d", ran.Load(), backgroundQueue)
	}
	cancel()
	<-done
	if got := counterValue(t, m.BackgroundSummaries.WithLabelValues("done")); got != backgroundQueue {
		t.Errorf("done = %v, want %d", got, backgroundQueue)
	}
	b.mu.Lock()
	left := len(b.sessions)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sessions' contexts kept after their work ended", left)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
