package compaction_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

// TestSummarizerBudgetStopsResetAmplification is issue 14's weakness 7 as an attack: an
// agent rewrites an early message on every request, so each one starts over from the raw
// history at Full and would cost a summarizer call. With SummarizerCallsPerHour the session
// makes that many calls in an hour, then is summarized extractively (and says so), and
// gets its budget back an hour after its first call; the count survives a new compactor on
// the same store (a server builds one per request).
func TestSummarizerBudgetStopsResetAmplification(t *testing.T) {
	ctx := context.Background()
	base := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000}, 1000)
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	llm := &recordingSummarizer{output: goodSummary}
	store := newStore()
	cfg := compaction.DefaultConfig(compaction.EstimateTokens(base) * 100 / 85) // Full
	cfg.SummarizerCallsPerHour = 3
	compact := func(i int) *compaction.CompactionRecord {
		t.Helper()
		// A new compactor per request, as the API builds them.
		c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(store), compaction.WithSessionID("attacked"), compaction.WithSummarizer(llm), compaction.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		msgs := append([]compaction.Message(nil), base...)
		msgs[0] = sys(fmt.Sprintf("You are a coding agent (rewrite %d).", i)) // resets the session
		_, rec, err := c.CompactWithRecord(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Tier != compaction.TierFull || rec.Summarized == 0 {
			t.Fatalf("request %d: tier %s summarized %d, want a Full summary", i, rec.Tier, rec.Summarized)
		}
		return rec
	}
	for i := range 10 {
		rec := compact(i)
		throttled := i >= cfg.SummarizerCallsPerHour
		if rec.SummarizerThrottled != throttled || (rec.SummarizerCalls == 1) == throttled {
			t.Fatalf("request %d: throttled %v with %d summarizer calls in the record, want throttled %v", i, rec.SummarizerThrottled, rec.SummarizerCalls, throttled)
		}
		if throttled && !strings.Contains(strings.Join(rec.Notes, "; "), "summarizer budget of 3 calls per hour used up") {
			t.Fatalf("request %d: notes %q do not say the budget is used up", i, rec.Notes)
		}
		now = now.Add(time.Minute)
	}
	if llm.calls != cfg.SummarizerCallsPerHour {
		t.Fatalf("the LLM was called %d times for 10 resets, want the budget's %d", llm.calls, cfg.SummarizerCallsPerHour)
	}
	// An hour after the first call, one call is allowed again.
	now = time.Date(2026, 12, 3, 10, 0, 30, 0, time.UTC)
	if rec := compact(10); rec.SummarizerThrottled || llm.calls != cfg.SummarizerCallsPerHour+1 {
		t.Fatalf("an hour later: throttled %v, LLM calls %d", rec.SummarizerThrottled, llm.calls)
	}
	if rec := compact(11); !rec.SummarizerThrottled || llm.calls != cfg.SummarizerCallsPerHour+1 {
		t.Fatalf("the same minute: throttled %v, LLM calls %d, want throttled (9:01, 9:02 and 10:00 in the hour)", rec.SummarizerThrottled, llm.calls)
	}
	now = time.Date(2026, 12, 3, 10, 1, 30, 0, time.UTC)
	if rec := compact(12); rec.SummarizerThrottled || llm.calls != cfg.SummarizerCallsPerHour+2 {
		t.Fatalf("an hour after the second call: throttled %v, LLM calls %d", rec.SummarizerThrottled, llm.calls)
	}
}

// TestSummarizerBudgetIgnoresTheExtractiveSummarizer: the extractive summarizer costs
// nothing, so it is never throttled, and a limit of 0 means none.
func TestSummarizerBudgetIgnoresTheExtractiveSummarizer(t *testing.T) {
	msgs := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000}, 1000)
	for _, tc := range []struct {
		name  string
		limit int
		s     compaction.Summarizer
	}{{"extractive with a limit", 1, compaction.ExtractiveSummarizer{}}, {"llm without a limit", 0, &recordingSummarizer{output: goodSummary}}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := compaction.DefaultConfig(compaction.EstimateTokens(msgs) * 100 / 85)
			cfg.SummarizerCallsPerHour = tc.limit
			store := newStore()
			for i := range 4 {
				c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(store), compaction.WithSessionID("s"), compaction.WithSummarizer(tc.s))
				if err != nil {
					t.Fatal(err)
				}
				in := append([]compaction.Message(nil), msgs...)
				in[0] = sys(fmt.Sprintf("agent %d", i))
				_, rec, err := c.CompactWithRecord(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				if rec.SummarizerThrottled || rec.SummarizerCalls != 1 {
					t.Fatalf("request %d: throttled %v, %d calls", i, rec.SummarizerThrottled, rec.SummarizerCalls)
				}
			}
		})
	}
}

// namedExtractive is the extractive summarizer behind a wrapper, as a server times it.
type namedExtractive struct {
	compaction.ExtractiveSummarizer
}

// TestSummarizerBudgetIgnoresAWrappedExtractiveSummarizer: a wrapped extractive summarizer
// is still free, so the budget does not count or throttle it.
func TestSummarizerBudgetIgnoresAWrappedExtractiveSummarizer(t *testing.T) {
	msgs := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000}, 1000)
	cfg := compaction.DefaultConfig(compaction.EstimateTokens(msgs) * 100 / 85)
	cfg.SummarizerCallsPerHour = 1
	store := newStore()
	for i := range 3 {
		c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(store), compaction.WithSessionID("s"), compaction.WithSummarizer(namedExtractive{}))
		if err != nil {
			t.Fatal(err)
		}
		in := append([]compaction.Message(nil), msgs...)
		in[0] = sys(fmt.Sprintf("agent %d", i))
		_, rec, err := c.CompactWithRecord(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if rec.SummarizerThrottled {
			t.Fatalf("request %d: the wrapped extractive summarizer was throttled", i)
		}
	}
}
