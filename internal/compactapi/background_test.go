package compactapi

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/harness9/compaction-operator/compaction"
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

// TestBackgroundForget: issue 29, item 4. A deleted session's work is cancelled (forget,
// by its UID or any of its conversations' IDs): queued work never runs, running work sees
// its context cancelled with compaction.ErrSessionGone, later work is refused; other
// sessions' work is untouched; the metrics count it as cancelled, not done.
func TestBackgroundForget(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b := newBackground(m)
	bRan := make(chan struct{})
	// Queued before the workers start: session A's two works, and B's.
	for range 2 {
		if !b.Go(compaction.ConversationSessionID("uid-a", "c1"), func(context.Context) { t.Error("work of a forgotten session ran") }) {
			t.Fatal("work refused")
		}
	}
	if !b.Go("uid-b", func(context.Context) { close(bRan) }) {
		t.Fatal("work refused")
	}
	b.forget(compaction.ConversationSessionID("uid-a", "c2"))
	if b.Go("uid-a", func(context.Context) { t.Error("work of a forgotten session ran") }) {
		t.Error("work taken for a forgotten session")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Session C's work is running when C is deleted.
	started, cause := make(chan struct{}), make(chan error, 1)
	if !b.Go("uid-c", func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
	}) {
		t.Fatal("work refused")
	}
	waitFor(t, "start of session C's work", started)
	b.forget("uid-c")
	select {
	case err := <-cause:
		if !errors.Is(err, compaction.ErrSessionGone) {
			t.Errorf("running work ended with %v, want compaction.ErrSessionGone", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("running work of a forgotten session not cancelled within 30 s")
	}
	waitFor(t, "session B's work", bRan)
	// A's two queued works, the refused one and C's: counted once the workers are done.
	deadline := time.Now().Add(10 * time.Second)
	for counterValue(t, m.BackgroundSummaries.WithLabelValues("cancelled")) < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := counterValue(t, m.BackgroundSummaries.WithLabelValues("cancelled")); got != 4 {
		t.Errorf("cancelled = %v, want 4", got)
	}
	for counterValue(t, m.BackgroundSummaries.WithLabelValues("done")) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := counterValue(t, m.BackgroundSummaries.WithLabelValues("done")); got != 1 {
		t.Errorf("done = %v, want 1 (session B's)", got)
	}
	b.mu.Lock()
	left := len(b.sessions)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sessions' contexts kept after their work ended or was cancelled", left)
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
