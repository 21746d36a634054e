package compaction_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

// TestSeenDeltaViewsMatchFullHistory replays histories turn by turn (AssistantTurns, the rule
// of compactctl eval and the demo) twice: once sending the full history every turn, once as
// compactclient.Session does (a seen delta while the last answer gave a seen history, the
// full history when there is none or the compactor says it is stale). Every turn's view and
// tier must be the same, and the seen deltas must carry the turns that compact nothing up to
// the first compaction. The histories are random ones and the repository's transcripts, each
// in a window it fills.
func TestSeenDeltaViewsMatchFullHistory(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		history := genHistory(rand.New(rand.NewPCG(seed, seed*7919)), 40)
		requireBoth(t, fmt.Sprintf("seed %d", seed), history, compaction.DefaultConfig(windowFor(history, 0.9)))
	}
	for _, name := range []string{"coding-agent-small.jsonl", "parallel-tools.jsonl", "long-session.jsonl"} {
		f, err := os.Open(filepath.Join("..", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		history, err := compaction.DecodeTranscript(f, compaction.DecodeOptions{})
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, usage := range []float64{1.5, 4} {
			requireBoth(t, fmt.Sprintf("%s at %.0f%%", name, usage*100), history, compaction.DefaultConfig(windowFor(history, usage)))
		}
	}
}

// requireBoth replays history (replaySeen) and requires seen deltas answered and refused.
func requireBoth(t *testing.T, name string, history []compaction.Message, cfg compaction.Config) {
	t.Helper()
	if deltas, stale := replaySeen(t, name, history, cfg); deltas == 0 || stale == 0 {
		t.Fatalf("%s: %d seen deltas answered, %d stale; want both (turns before the first compaction, then the turn that compacts)", name, deltas, stale)
	}
}

// replaySeen replays history's turns with the full history and with seen deltas, comparing
// them, and counts the seen deltas answered and refused (stale).
func replaySeen(t *testing.T, name string, history []compaction.Message, cfg compaction.Config) (deltas, stale int) {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	full := revalidating(t, cfg, newVersionedStore(), "s", clock, time.Minute)
	seen := revalidating(t, cfg, newVersionedStore(), "s", clock, time.Minute)
	var hash string
	seenN := 0
	for _, end := range compaction.AssistantTurns(history) {
		msgs := history[:end]
		now = now.Add(2 * time.Second)
		want, wantRec, err := full.CompactWithRecord(ctx, msgs)
		if err != nil {
			t.Fatalf("%s, %d messages, full: %v", name, end, err)
		}
		var got []compaction.Message
		var rec *compaction.CompactionRecord
		if seenN > 0 {
			p := compaction.SystemPrefixLen(msgs)
			delta := append(append([]compaction.Message(nil), msgs[:p]...), msgs[seenN:]...)
			part, drec, err := compactDelta(ctx, seen, compaction.Delta{Seen: seenN, PrefixHash: hash}, delta, false)
			switch {
			case err == nil:
				deltas++
				got, rec = append(append([]compaction.Message(nil), msgs[:seenN]...), part...), drec
			case errors.Is(err, compaction.ErrStaleWatermark):
				stale++
			default:
				t.Fatalf("%s, %d messages, seen delta: %v", name, end, err)
			}
		}
		if rec == nil {
			if got, rec, err = seen.CompactWithRecord(ctx, msgs); err != nil {
				t.Fatalf("%s, %d messages, full after the seen delta: %v", name, end, err)
			}
		}
		if rec.Tier != wantRec.Tier || rec.TokensBefore != wantRec.TokensBefore || rec.MsgsBefore != wantRec.MsgsBefore ||
			rec.HistoryTokens != wantRec.HistoryTokens || rec.UsageAfter != wantRec.UsageAfter {
			t.Fatalf("%s, %d messages: record %s %d tokens %d msgs (history %d, usage %.3f), want %s %d %d (%d, %.3f)", name, end,
				rec.Tier, rec.TokensBefore, rec.MsgsBefore, rec.HistoryTokens, rec.UsageAfter,
				wantRec.Tier, wantRec.TokensBefore, wantRec.MsgsBefore, wantRec.HistoryTokens, wantRec.UsageAfter)
		}
		if !compaction.EqualMessages(got, want) {
			t.Fatalf("%s, %d messages: the seen view differs from the full history's", name, end)
		}
		seenN, hash = rec.Seen, rec.SeenHash
		if rec.Seen > 0 && (rec.Tier != compaction.TierNone || rec.WatermarkAfter != 0 || rec.Seen != end) {
			t.Fatalf("%s, %d messages: seen %d on a %s turn at watermark %d", name, end, rec.Seen, rec.Tier, rec.WatermarkAfter)
		}
	}
	return deltas, stale
}

// TestSeenDeltaRefused covers what makes a seen delta stale (the caller sends the full
// history), with nothing changed: another seen point, a forced compaction, a stored state
// that moved, messages that do not continue the seen history; and the views that give no
// seen history at all.
func TestSeenDeltaRefused(t *testing.T) {
	ctx := context.Background()
	cfg := compaction.DefaultConfig(10000)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	store := newVersionedStore()
	c := revalidating(t, cfg, store, "s", clock, 0)
	history := []compaction.Message{sys("You are a coding agent."), user("Fix the failing parser test."), call("Running it.", "c1"), result("c1", "FAIL: parser_test.go:12")}
	_, rec, err := c.CompactWithRecord(ctx, history)
	if err != nil || rec.Seen != len(history) || rec.SeenHash == "" {
		t.Fatalf("a None turn on the raw history: seen %d (%q), %v; want %d", rec.Seen, rec.SeenHash, err, len(history))
	}
	d := compaction.Delta{Seen: rec.Seen, PrefixHash: rec.SeenHash}
	next := []compaction.Message{sys("You are a coding agent."), asst("The parser drops the last token.")}
	stale := func(what string, d compaction.Delta, msgs []compaction.Message, force bool) {
		t.Helper()
		if _, _, err := compactDelta(ctx, c, d, msgs, force); !errors.Is(err, compaction.ErrStaleWatermark) {
			t.Fatalf("%s: %v, want ErrStaleWatermark", what, err)
		}
		// The seen point is gone: the caller sends the full history, which gives it again.
		_, rec, err := c.CompactWithRecord(ctx, history)
		if err != nil || rec.Seen != len(history) {
			t.Fatalf("%s, then the full history: seen %d, %v", what, rec.Seen, err)
		}
	}
	stale("another seen point", compaction.Delta{Seen: 3, PrefixHash: d.PrefixHash}, next, false)
	stale("another hash", compaction.Delta{Seen: d.Seen, PrefixHash: "0123456789abcdef"}, next, false)
	stale("forced", d, next, true)
	stale("a result whose call the seen history answered", d, []compaction.Message{result("c1", "again")}, false)
	stale("other system messages", d, []compaction.Message{asst("no system message")}, false)
	stale("both a watermark and a seen history", compaction.Delta{Watermark: 2, PrefixHash: d.PrefixHash, Seen: d.Seen}, next, false)

	// Another compactor saves a state (its offloads at watermark 0): without trust, the
	// conditional read sees it and the seen delta is refused.
	other := revalidating(t, cfg, store, "s", clock, 0)
	if err := other.SaveEmptyState(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := compactDelta(ctx, c, d, next, false); !errors.Is(err, compaction.ErrStaleWatermark) {
		t.Fatalf("a state saved by another compactor since: %v, want ErrStaleWatermark", err)
	}
	if got := store.storedWatermark(t, "s"); got != 0 {
		t.Fatalf("stored watermark %d after refused seen deltas, want 0", got)
	}

	// A seen delta continues, and gives the next seen point.
	_, rec, _ = c.CompactWithRecord(ctx, history)
	part, rec2, err := compactDelta(ctx, c, compaction.Delta{Seen: rec.Seen, PrefixHash: rec.SeenHash}, next, false)
	if err != nil || rec2.Tier != compaction.TierNone || len(part) != 1 || !part[0].Equal(&next[1]) || rec2.Seen != len(history)+1 || rec2.SeenHash == rec.SeenHash {
		t.Fatalf("a seen delta: %v, %+v, %v", part, rec2, err)
	}

	// Views that are not the raw history give no seen point: an unanswered call (closed
	// with a synthetic result), a pinned message (its mark taken off).
	for name, msgs := range map[string][]compaction.Message{
		"unanswered call": {sys("s"), user("task"), call("Running it.", "c2")},
		"pinned":          {sys("s"), {Role: compaction.RoleUser, Content: "Never touch the vendor directory.", Pinned: true}},
	} {
		_, rec, err := revalidating(t, cfg, newVersionedStore(), "v", clock, 0).CompactWithRecord(ctx, msgs)
		if err != nil || rec.Tier != compaction.TierNone || rec.Seen != 0 {
			t.Fatalf("%s: %s, seen %d, %v; want a None turn without a seen point", name, rec.Tier, rec.Seen, err)
		}
	}
	// Neither does a compactor built for one request (without WithStateRevalidation).
	once, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(newVersionedStore()))
	if err != nil {
		t.Fatal(err)
	}
	if _, rec, err := once.CompactWithRecord(ctx, history); err != nil || rec.Seen != 0 {
		t.Fatalf("a compactor without revalidation: seen %d, %v; want none", rec.Seen, err)
	}
}
