package compaction_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
)

// TestSessionBudgetSharedByConversations: the conversations of one session share its
// summarizer budget (WithSummarizerBudget with the session's StateBudget), so spreading
// turns over conversations does not multiply SummarizerCallsPerHour. Each conversation
// keeps its own state (its own Full compaction); the budget counts them all together.
func TestSessionBudgetSharedByConversations(t *testing.T) {
	ctx := context.Background()
	base := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000}, 1000)
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	llm := &recordingSummarizer{output: goodSummary}
	store := newStore()
	cfg := compaction.DefaultConfig(compaction.EstimateTokens(base) * 100 / 85) // Full
	cfg.SummarizerCallsPerHour = 2
	const session = "sess-1"
	compact := func(conv string, i int) *compaction.CompactionRecord {
		t.Helper()
		budget, err := compaction.NewStateBudget(store, session)
		if err != nil {
			t.Fatal(err)
		}
		c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(store), compaction.WithSessionID(compaction.ConversationSessionID(session, conv)),
			compaction.WithSummarizer(llm), compaction.WithClock(clock), compaction.WithSummarizerBudget(budget))
		if err != nil {
			t.Fatal(err)
		}
		msgs := append([]compaction.Message(nil), base...)
		msgs[0] = sys(fmt.Sprintf("You are a coding agent (%s, turn %d).", conv, i))
		_, rec, err := c.CompactWithRecord(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Tier != compaction.TierFull || rec.Summarized == 0 {
			t.Fatalf("conversation %q turn %d: tier %s summarized %d, want a Full summary", conv, i, rec.Tier, rec.Summarized)
		}
		return rec
	}
	convs := []string{"", "a", "b", "c", "d"}
	for i, conv := range convs {
		rec := compact(conv, i)
		throttled := i >= cfg.SummarizerCallsPerHour
		if rec.SummarizerThrottled != throttled || (rec.SummarizerCalls == 1) == throttled {
			t.Fatalf("conversation %q: throttled %v with %d summarizer calls in the record, want throttled %v", conv, rec.SummarizerThrottled, rec.SummarizerCalls, throttled)
		}
		if throttled && !strings.Contains(strings.Join(rec.Notes, "; "), "summarizer budget of 2 calls per hour used up (next call allowed at 2026-12-03T10:00:00Z)") {
			t.Fatalf("conversation %q: notes %q do not say the budget is used up", conv, rec.Notes)
		}
		now = now.Add(time.Minute)
	}
	if llm.calls != cfg.SummarizerCallsPerHour {
		t.Fatalf("the LLM was called %d times over %d conversations, want the session's budget of %d", llm.calls, len(convs), cfg.SummarizerCallsPerHour)
	}
	// The count is in the session's budget object, not in the conversations' states.
	st, err := store.LoadState(ctx, compaction.SessionBudgetID(session))
	if err != nil || len(st.SummarizerCalls) != 2 {
		t.Fatalf("budget state: %+v, %v; want 2 calls", st, err)
	}
	for _, conv := range convs {
		if st, err := store.LoadState(ctx, compaction.ConversationSessionID(session, conv)); err != nil || len(st.SummarizerCalls) != 0 {
			t.Fatalf("conversation %q state: %v calls, %v; want none counted there", conv, st.SummarizerCalls, err)
		}
	}
	// An hour after the first call, one is allowed again, in any conversation.
	now = time.Date(2026, 12, 3, 10, 0, 30, 0, time.UTC)
	if rec := compact("e", 10); rec.SummarizerThrottled || llm.calls != 3 {
		t.Fatalf("an hour later: throttled %v, LLM calls %d", rec.SummarizerThrottled, llm.calls)
	}
	if rec := compact("a", 11); !rec.SummarizerThrottled || llm.calls != 3 {
		t.Fatalf("the same minute: throttled %v, LLM calls %d", rec.SummarizerThrottled, llm.calls)
	}
}

type failingBudget struct{ err error }

func (b failingBudget) Charge(context.Context, time.Time, int) (bool, time.Time, error) {
	return false, time.Time{}, b.err
}

// TestSessionBudgetUnavailable: a budget that cannot be read or written makes no paid call
// (spend protection), but the view is still summarized, extractively, and the record says why.
func TestSessionBudgetUnavailable(t *testing.T) {
	base := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000}, 1000)
	llm := &recordingSummarizer{output: goodSummary}
	cfg := compaction.DefaultConfig(compaction.EstimateTokens(base) * 100 / 85)
	cfg.SummarizerCallsPerHour = 5
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(newStore()), compaction.WithSessionID("s/conversations/x"),
		compaction.WithSummarizer(llm), compaction.WithSummarizerBudget(failingBudget{errors.New("storage down")}))
	if err != nil {
		t.Fatal(err)
	}
	out, rec, err := c.CompactWithRecord(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	if llm.calls != 0 || rec.SummarizerCalls != 0 {
		t.Fatalf("LLM calls %d (record %d), want none without a budget", llm.calls, rec.SummarizerCalls)
	}
	if rec.Tier != compaction.TierFull || rec.Summarized == 0 || compaction.EstimateTokens(out) >= compaction.EstimateTokens(base) {
		t.Fatalf("tier %s summarized %d: want an extractive Full summary", rec.Tier, rec.Summarized)
	}
	if !rec.SummarizerThrottled || !strings.Contains(strings.Join(rec.Notes, "; "), "summarizer budget unavailable (storage down): summarized extractively") {
		t.Fatalf("throttled %v, notes %q: want the budget's failure noted", rec.SummarizerThrottled, rec.Notes)
	}
	// Without a limit the budget is not asked.
	cfg.SummarizerCallsPerHour = 0
	c, err = compaction.NewProgressiveCompactor(cfg, compaction.WithSummarizer(llm), compaction.WithSummarizerBudget(failingBudget{errors.New("storage down")}))
	if err != nil {
		t.Fatal(err)
	}
	if _, rec, err := c.CompactWithRecord(context.Background(), base); err != nil || rec.SummarizerThrottled || llm.calls != 1 {
		t.Fatalf("no limit: throttled %v, LLM calls %d, %v", rec.SummarizerThrottled, llm.calls, err)
	}
}

// conflictStore is a StateStore whose SaveState fails with ErrConflict the first conflicts
// times (another replica saved first), or with err.
type conflictStore struct {
	*faultstore.Store
	conflicts int
	saves     int
}

func (s *conflictStore) SaveState(ctx context.Context, sid string, st *compaction.State) error {
	s.saves++
	if s.conflicts > 0 {
		s.conflicts--
		// The other replica's charge lands in between.
		other, err := s.LoadState(ctx, sid)
		if errors.Is(err, compaction.ErrNotFound) {
			other = &compaction.State{}
		}
		other.SummarizerCalls = append(other.SummarizerCalls, time.Date(2026, 12, 3, 8, 59, 0, 0, time.UTC))
		_ = s.Store.SaveState(ctx, sid, other)
		return fmt.Errorf("save: %w", compaction.ErrConflict)
	}
	return s.Store.SaveState(ctx, sid, st)
}

func TestStateBudgetCharge(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	t.Run("conflict is retried on the newer state", func(t *testing.T) {
		s := &conflictStore{Store: newStore(), conflicts: 1}
		b, err := compaction.NewStateBudget(s, "sess")
		if err != nil {
			t.Fatal(err)
		}
		ok, _, err := b.Charge(ctx, now, 2)
		if !ok || err != nil || s.saves != 2 {
			t.Fatalf("Charge = %v, %v after %d saves; want charged on the second", ok, err, s.saves)
		}
		// The other replica's call and this one: the limit of 2 is reached.
		ok, next, err := b.Charge(ctx, now, 2)
		if ok || err != nil || !next.Equal(time.Date(2026, 12, 3, 9, 59, 0, 0, time.UTC)) {
			t.Fatalf("third Charge = %v, %s, %v; want refused until 9:59", ok, next, err)
		}
	})
	t.Run("endless conflicts are an error", func(t *testing.T) {
		s := &conflictStore{Store: newStore(), conflicts: 100}
		b, _ := compaction.NewStateBudget(s, "sess")
		if ok, _, err := b.Charge(ctx, now, 1000); ok || !errors.Is(err, compaction.ErrConflict) || s.saves != compaction.StateBudgetAttempts {
			t.Fatalf("Charge = %v, %v after %d saves", ok, err, s.saves)
		}
	})
	t.Run("load failure is an error", func(t *testing.T) {
		s := newStore()
		s.FailLoad(errors.New("down"))
		b, _ := compaction.NewStateBudget(s, "sess")
		if ok, _, err := b.Charge(ctx, now, 1); ok || err == nil {
			t.Fatalf("Charge = %v, %v; want an error", ok, err)
		}
	})
	t.Run("a conversation's ID maps to its session's budget", func(t *testing.T) {
		b, err := compaction.NewStateBudget(newStore(), compaction.ConversationSessionID("sess", "x"))
		if err != nil || b.ID() != compaction.SessionBudgetID("sess") {
			t.Fatalf("ID %q, %v", b.ID(), err)
		}
		if _, err := compaction.NewStateBudget(newStore(), "../x"); err == nil {
			t.Fatal("an invalid session ID was accepted")
		}
	})
}
