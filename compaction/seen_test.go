package compaction

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSeenDeltaViewsMatchFullHistory replays histories turn by turn twice: once sending the
// full history every turn, once as compactclient.Session does (a seen delta while the last
// answer gave a seen history, the full history when there is none or the compactor says
// it is stale). Every turn's view must be the same, and the seen deltas must carry the
// turns that compact nothing up to the first compaction.
func TestSeenDeltaViewsMatchFullHistory(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 6; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7919))
		history := genHistory(r, 40)
		cfg := DefaultConfig(windowFor(history, 0.9))
		now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
		clock := func() time.Time { return now }
		full := revalidating(t, cfg, newVersionedStore(), "s", clock, time.Minute)
		seen := revalidating(t, cfg, newVersionedStore(), "s", clock, time.Minute)
		var hash string
		seenN, deltas, stale := 0, 0, 0
		for end := 2; end <= len(history); end++ {
			if (history[end-1].Role == RoleAssistant && len(history[end-1].ToolCalls) > 0) || (end < len(history) && history[end].Role == RoleTool) {
				continue // an agent compacts once all the calls of a turn are answered
			}
			msgs := history[:end]
			now = now.Add(2 * time.Second)
			want, wantRec, err := full.CompactWithRecord(ctx, msgs)
			if err != nil {
				t.Fatalf("seed %d, %d messages, full: %v", seed, end, err)
			}
			var got []Message
			var rec *CompactionRecord
			if seenN > 0 {
				p := systemPrefixLen(msgs)
				delta := append(append([]Message(nil), msgs[:p]...), msgs[seenN:]...)
				part, drec, err := seen.CompactDeltaWithRecord(ctx, Delta{Seen: seenN, PrefixHash: hash}, delta, false)
				switch {
				case err == nil:
					deltas++
					got, rec = append(append([]Message(nil), msgs[:seenN]...), part...), drec
				case errors.Is(err, ErrStaleWatermark):
					stale++
				default:
					t.Fatalf("seed %d, %d messages, seen delta: %v", seed, end, err)
				}
			}
			if rec == nil {
				if got, rec, err = seen.CompactWithRecord(ctx, msgs); err != nil {
					t.Fatalf("seed %d, %d messages, full after the seen delta: %v", seed, end, err)
				}
			}
			if rec.Tier != wantRec.Tier || rec.TokensBefore != wantRec.TokensBefore || rec.MsgsBefore != wantRec.MsgsBefore ||
				rec.HistoryTokens != wantRec.HistoryTokens || rec.UsageAfter != wantRec.UsageAfter {
				t.Fatalf("seed %d, %d messages: record %s %d tokens %d msgs (history %d, usage %.3f), want %s %d %d (%d, %.3f)", seed, end,
					rec.Tier, rec.TokensBefore, rec.MsgsBefore, rec.HistoryTokens, rec.UsageAfter,
					wantRec.Tier, wantRec.TokensBefore, wantRec.MsgsBefore, wantRec.HistoryTokens, wantRec.UsageAfter)
			}
			if !EqualMessages(got, want) {
				t.Fatalf("seed %d, %d messages: the seen view differs from the full history's", seed, end)
			}
			seenN, hash = rec.Seen, rec.SeenHash
			if rec.Seen > 0 && (rec.Tier != TierNone || rec.WatermarkAfter != 0 || rec.Seen != end) {
				t.Fatalf("seed %d, %d messages: seen %d on a %s turn at watermark %d", seed, end, rec.Seen, rec.Tier, rec.WatermarkAfter)
			}
		}
		if deltas == 0 || stale == 0 {
			t.Fatalf("seed %d: %d seen deltas answered, %d stale; want both (turns before the first compaction, then the turn that compacts)", seed, deltas, stale)
		}
	}
}

// TestSeenDeltaRefused covers what makes a seen delta stale (the caller sends the full
// history), with nothing changed: another seen point, a forced compaction, a stored state
// that moved, messages that do not continue the seen history; and the views that give no
// seen history at all.
func TestSeenDeltaRefused(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig(10000)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	store := newVersionedStore()
	c := revalidating(t, cfg, store, "s", clock, 0)
	history := []Message{sys("You are a coding agent."), user("Fix the failing parser test."), call("Running it.", "c1"), result("c1", "FAIL: parser_test.go:12")}
	_, rec, err := c.CompactWithRecord(ctx, history)
	if err != nil || rec.Seen != len(history) || rec.SeenHash == "" {
		t.Fatalf("a None turn on the raw history: seen %d (%q), %v; want %d", rec.Seen, rec.SeenHash, err, len(history))
	}
	d := Delta{Seen: rec.Seen, PrefixHash: rec.SeenHash}
	next := []Message{sys("You are a coding agent."), asst("The parser drops the last token.")}
	stale := func(what string, d Delta, msgs []Message, force bool) {
		t.Helper()
		if _, _, err := c.CompactDeltaWithRecord(ctx, d, msgs, force); !errors.Is(err, ErrStaleWatermark) {
			t.Fatalf("%s: %v, want ErrStaleWatermark", what, err)
		}
		// The seen point is gone: the caller sends the full history, which gives it again.
		_, rec, err := c.CompactWithRecord(ctx, history)
		if err != nil || rec.Seen != len(history) {
			t.Fatalf("%s, then the full history: seen %d, %v", what, rec.Seen, err)
		}
	}
	stale("another seen point", Delta{Seen: 3, PrefixHash: d.PrefixHash}, next, false)
	stale("another hash", Delta{Seen: d.Seen, PrefixHash: "0123456789abcdef"}, next, false)
	stale("forced", d, next, true)
	stale("a result whose call the seen history answered", d, []Message{result("c1", "again")}, false)
	stale("other system messages", d, []Message{asst("no system message")}, false)
	stale("both a watermark and a seen history", Delta{Watermark: 2, PrefixHash: d.PrefixHash, Seen: d.Seen}, next, false)

	// Another compactor saves a state (its offloads at watermark 0): without trust, the
	// conditional read sees it and the seen delta is refused.
	other := revalidating(t, cfg, store, "s", clock, 0)
	other.state = &State{}
	other.stateLoaded = true
	if err := other.saveState(ctx, &CompactionRecord{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CompactDeltaWithRecord(ctx, d, next, false); !errors.Is(err, ErrStaleWatermark) {
		t.Fatalf("a state saved by another compactor since: %v, want ErrStaleWatermark", err)
	}
	if got := store.storedWatermark(t, "s"); got != 0 {
		t.Fatalf("stored watermark %d after refused seen deltas, want 0", got)
	}

	// A seen delta continues, and gives the next seen point.
	_, rec, _ = c.CompactWithRecord(ctx, history)
	part, rec2, err := c.CompactDeltaWithRecord(ctx, Delta{Seen: rec.Seen, PrefixHash: rec.SeenHash}, next, false)
	if err != nil || rec2.Tier != TierNone || len(part) != 1 || !part[0].Equal(&next[1]) || rec2.Seen != len(history)+1 || rec2.SeenHash == rec.SeenHash {
		t.Fatalf("a seen delta: %v, %+v, %v", part, rec2, err)
	}

	// Views that are not the raw history give no seen point: an unanswered call (closed
	// with a synthetic result), a pinned message (its mark taken off).
	for name, msgs := range map[string][]Message{
		"unanswered call": {sys("s"), user("task"), call("Running it.", "c2")},
		"pinned":          {sys("s"), {Role: RoleUser, Content: "Never touch the vendor directory.", Pinned: true}},
	} {
		_, rec, err := revalidating(t, cfg, newVersionedStore(), "v", clock, 0).CompactWithRecord(ctx, msgs)
		if err != nil || rec.Tier != TierNone || rec.Seen != 0 {
			t.Fatalf("%s: %s, seen %d, %v; want a None turn without a seen point", name, rec.Tier, rec.Seen, err)
		}
	}
	// Neither does a compactor built for one request (without WithStateRevalidation).
	once, err := NewProgressiveCompactor(cfg, WithStore(newVersionedStore()))
	if err != nil {
		t.Fatal(err)
	}
	if _, rec, err := once.CompactWithRecord(ctx, history); err != nil || rec.Seen != 0 {
		t.Fatalf("a compactor without revalidation: seen %d, %v; want none", rec.Seen, err)
	}
}
