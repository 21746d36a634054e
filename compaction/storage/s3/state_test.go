package s3

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

func TestSaveStateIsConditional(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	a, err := New(ctx(t), srv.config(bucket, "p"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx(t), srv.config(bucket, "p"))
	if err != nil {
		t.Fatal(err)
	}
	// Two writers both create the state: the second finds it exists.
	if err := a.SaveState(ctx(t), "s", &compaction.State{Watermark: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.SaveState(ctx(t), "s", &compaction.State{Watermark: 2}); !errors.Is(err, compaction.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	// Two writers load the same version: the first save wins, the second conflicts.
	sa, err := a.LoadState(ctx(t), "s")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.LoadState(ctx(t), "s")
	if err != nil {
		t.Fatal(err)
	}
	if sa.Version == "" || sa.Version != sb.Version {
		t.Fatalf("versions %q and %q, want the same non-empty ETag", sa.Version, sb.Version)
	}
	sa.Watermark = 10
	if err := a.SaveState(ctx(t), "s", sa); err != nil {
		t.Fatal(err)
	}
	sb.Watermark = 20
	if err := b.SaveState(ctx(t), "s", sb); !errors.Is(err, compaction.ErrConflict) {
		t.Fatalf("save over a newer state: %v, want ErrConflict", err)
	}
	// The winner can keep saving: SaveState updated its version.
	sa.Watermark = 11
	if err := a.SaveState(ctx(t), "s", sa); err != nil {
		t.Fatalf("save after own save: %v", err)
	}
	got, err := b.LoadState(ctx(t), "s")
	if err != nil || got.Watermark != 11 {
		t.Fatalf("stored state %+v, %v; want watermark 11", got, err)
	}
}

// TestLoadStateIfChanged: the conditional read answers "unchanged" (no body) while the stored
// state is the version held, the state when another writer saved since, ErrNotFound when none.
func TestLoadStateIfChanged(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	a, err := New(ctx(t), srv.config(bucket, "p"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.LoadStateIfChanged(ctx(t), "s", "abc"); !errors.Is(err, compaction.ErrNotFound) {
		t.Fatalf("no state: %v, want ErrNotFound", err)
	}
	st := &compaction.State{Watermark: 1}
	if err := a.SaveState(ctx(t), "s", st); err != nil {
		t.Fatal(err)
	}
	if got, err := a.LoadStateIfChanged(ctx(t), "s", st.Version); got != nil || err != nil {
		t.Fatalf("unchanged state: %+v, %v; want nil, nil", got, err)
	}
	other, err := a.LoadState(ctx(t), "s")
	if err != nil {
		t.Fatal(err)
	}
	other.Watermark = 2
	if err := a.SaveState(ctx(t), "s", other); err != nil {
		t.Fatal(err)
	}
	got, err := a.LoadStateIfChanged(ctx(t), "s", st.Version)
	if err != nil || got == nil || got.Watermark != 2 || got.Version != other.Version {
		t.Fatalf("changed state: %+v, %v; want watermark 2 at version %q", got, err, other.Version)
	}
}

// TestRewrittenHistoryOverStoredState: a history whose summarized prefix changed starts over
// from the raw history, and its save replaces the stored state (it was loaded, so its
// version is known) instead of conflicting with it forever.
func TestRewrittenHistoryOverStoredState(t *testing.T) {
	srv := startServer(t)
	st, err := New(ctx(t), srv.config(srv.newBucket(t), "p"))
	if err != nil {
		t.Fatal(err)
	}
	history := make([]compaction.Message, 0, 81)
	history = append(history, compaction.Message{Role: compaction.RoleSystem, Content: "You are a coding agent."})
	for i := range 40 {
		history = append(history,
			compaction.Message{Role: compaction.RoleUser, Content: fmt.Sprintf("step %d: %s", i, strings.Repeat("please look at the failing test ", 30))},
			compaction.Message{Role: compaction.RoleAssistant, Content: fmt.Sprintf("done with step %d: %s", i, strings.Repeat("edited the parser ", 30))})
	}
	cfg := compaction.DefaultConfig(int(float64(compaction.EstimateTokens(history)) / 0.85)) // Full
	compact := func(msgs []compaction.Message) (*compaction.CompactionRecord, error) {
		// A compactor per request, as the compaction API makes them.
		c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(st), compaction.WithSessionID("s"))
		if err != nil {
			t.Fatal(err)
		}
		_, rec, err := c.CompactWithRecord(ctx(t), msgs)
		return rec, err
	}
	rec, err := compact(history)
	if err != nil || rec.WatermarkAfter == 0 {
		t.Fatalf("first compaction: %+v, %v; want a summary with a watermark", rec, err)
	}
	rewritten := append([]compaction.Message(nil), history...)
	rewritten[rec.WatermarkAfter-1].Content = "a different message where the summary ends" // what the prefix hash covers
	rec, err = compact(rewritten)
	if err != nil {
		t.Fatalf("compaction of the rewritten history: %v", err)
	}
	if !strings.Contains(strings.Join(rec.Notes, " "), "prefix changed") {
		t.Errorf("notes %q do not say the history prefix changed", rec.Notes)
	}
	got, err := st.LoadState(ctx(t), "s")
	if err != nil || got.PrefixHash != rec.PrefixHash {
		t.Fatalf("stored state %+v, %v; want the rewritten history's (prefix hash %q)", got, err, rec.PrefixHash)
	}
}

// TestSessionBudgetConcurrentCharges: replicas charging one session's summarizer budget at
// once never count more calls than the limit, nor lose one they reported as charged: the
// budget's writes are conditional (ETag), and a conflict is retried on the newer state.
func TestSessionBudgetConcurrentCharges(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	now := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	const limit, replicas = 3, 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	charged := 0
	opCtx := ctx(t)
	for i := range replicas {
		// Each replica with a store of its own, charging from its own conversation.
		b, err := compaction.NewStateBudget(srv.store(t, bucket, "p"), compaction.ConversationSessionID("sess", fmt.Sprintf("c%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _, err := b.Charge(opCtx, now, limit)
			if err != nil && !errors.Is(err, compaction.ErrConflict) {
				t.Errorf("Charge: %v", err)
			}
			if ok {
				mu.Lock()
				charged++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	store := srv.store(t, bucket, "p")
	st, err := store.LoadState(ctx(t), compaction.SessionBudgetID("sess"))
	if err != nil {
		t.Fatal(err)
	}
	if charged == 0 || charged > limit || len(st.SummarizerCalls) != charged {
		t.Fatalf("%d charges reported, %d stored; want as many, between 1 and %d", charged, len(st.SummarizerCalls), limit)
	}
	b, _ := compaction.NewStateBudget(store, "sess")
	for range limit - charged {
		if ok, _, err := b.Charge(ctx(t), now, limit); !ok || err != nil {
			t.Fatalf("Charge under the limit = %v, %v", ok, err)
		}
	}
	if ok, _, err := b.Charge(ctx(t), now, limit); ok || err != nil {
		t.Fatalf("Charge over the limit = %v, %v; want refused", ok, err)
	}
}
