package compaction_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
)

// measuringSummarizer wraps the extractive summarizer and keeps the largest input it saw.
type measuringSummarizer struct {
	compaction.ExtractiveSummarizer
	calls    int
	maxInput int
}

func (m *measuringSummarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	m.calls++
	if n := charsOf(req.Messages) + len(req.PreviousSummary); n > m.maxInput {
		m.maxInput = n
	}
	return m.ExtractiveSummarizer.Summarize(ctx, req)
}

// replay runs an agent loop over full: tool results pass the OffloadHook as they enter the
// history, and before every assistant message the history so far is compacted. check is
// called with every turn's view and record.
func replay(t *testing.T, c *compaction.ProgressiveCompactor, full []compaction.Message, check func(i int, view []compaction.Message, rec *compaction.CompactionRecord)) {
	t.Helper()
	ctx := context.Background()
	history := make([]compaction.Message, 0, len(full))
	for i, m := range full {
		if m.Role == compaction.RoleTool && c.Offloader() != nil {
			var err error
			if m, _, err = c.Offloader().Hook(ctx, m, c.Config().HookThreshold); err != nil {
				t.Fatal(err)
			}
		}
		history = append(history, m)
		if i+1 < len(full) && full[i+1].Role == compaction.RoleAssistant && len(history) > 1 {
			view, rec, err := c.CompactWithRecord(ctx, history)
			if err != nil {
				t.Fatalf("turn at message %d: %v", i, err)
			}
			check(i, view, rec)
		}
	}
}

// TestLongSessionCyclesThroughTiers replays sessions 50x the window: usage falls after each
// compaction and climbs again, no view exceeds the window after compaction, tool pairs stay
// intact, the watermark never moves back, the first user intent survives in the anchors, and
// the summarizer's input stays bounded by the window.
func TestLongSessionCyclesThroughTiers(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		full := genHistory(r, 900)
		window := compaction.EstimateTokens(full) / 50
		sum := &measuringSummarizer{}
		c, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(window), compaction.WithStore(newStore()), compaction.WithSessionID("long"), compaction.WithSummarizer(sum))
		if err != nil {
			t.Fatal(err)
		}
		tiers := map[compaction.Tier]int{}
		lastWM, falls := 0, 0
		prevUsage := 0.0
		replay(t, c, full, func(i int, view []compaction.Message, rec *compaction.CompactionRecord) {
			tiers[rec.Tier]++
			if rec.WatermarkAfter < lastWM || rec.WatermarkBefore != lastWM {
				t.Fatalf("seed %d message %d: watermark %d -> %d after %d", seed, i, rec.WatermarkBefore, rec.WatermarkAfter, lastWM)
			}
			lastWM = rec.WatermarkAfter
			if compaction.EstimateTokens(view) > window {
				t.Fatalf("seed %d message %d: view of %d tokens exceeds the window %d (tier %s)", seed, i, compaction.EstimateTokens(view), window, rec.Tier)
			}
			if compaction.HasOrphans(view) || compaction.Validate(view) != nil {
				t.Fatalf("seed %d message %d: broken tool pairs in the view", seed, i)
			}
			usage := float64(rec.TokensBefore) / float64(window)
			if usage < prevUsage-0.05 {
				falls++
			}
			prevUsage = usage
			if rec.HistoryTokens < rec.TokensBefore {
				t.Fatalf("history %d tokens < view %d", rec.HistoryTokens, rec.TokensBefore)
			}
		})
		if tiers[compaction.TierFull]+tiers[compaction.TierSoft] < 10 || falls < 10 {
			t.Fatalf("seed %d: no cycles: tiers %v, usage fell %d times", seed, tiers, falls)
		}
		if tiers[compaction.TierEmergency] > tiers[compaction.TierFull]/10 {
			t.Fatalf("seed %d: too many emergencies: %v", seed, tiers)
		}
		if sum.maxInput > window*4 {
			t.Fatalf("seed %d: summarizer input %d bytes exceeds the window (%d bytes)", seed, sum.maxInput, window*4)
		}
		st, _ := c.State(context.Background())
		if intent := anchorMap(st.LastAnchors)[compaction.AnchorUserIntent]; !strings.Contains(intent, "Fix the failing test in parser.go") {
			t.Fatalf("seed %d: user intent lost: %q", seed, intent)
		}
		t.Logf("seed %d: window %d tokens, history %d tokens, tiers %v, summarizer calls %d, max input %d bytes", seed, window, compaction.EstimateTokens(full), tiers, sum.calls, sum.maxInput)
	}
}

func TestPrefixChangeStartsOver(t *testing.T) {
	msgs := fixture()
	c, st := newTestCompactor(t, windowFor(msgs, 0.85))
	ctx := context.Background()
	if _, rec, _ := c.CompactWithRecord(ctx, msgs); rec.WatermarkAfter == 0 {
		t.Fatal("no watermark after Full")
	}
	// The agent reset its history: same system prompt, a different conversation.
	other := []compaction.Message{msgs[0], user("A new task."), asst("ok"), user("go"), asst("working"), user("more"), asst("done"), user("next"), asst("sure"), user("again"), asst("yes"), user("one more"), asst("fine")}
	view, rec, err := c.CompactWithRecord(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if rec.WatermarkBefore != 0 || len(rec.Notes) != 1 || !strings.Contains(rec.Notes[0], "history prefix changed") {
		t.Fatalf("reset not reported: %+v", rec)
	}
	if len(view) != len(other) || strings.HasPrefix(view[1].Content, compaction.CompactionHeader) {
		t.Fatal("the old summary leaked into a reset history")
	}
	state, _ := c.State(ctx)
	if state.Watermark != 0 || state.LastSummary != "" {
		t.Fatalf("state not reset: %+v", state)
	}
	if !strings.Contains(string(stateJSON(t, st)), `"watermark":0`) {
		t.Fatal("reset state not persisted")
	}
}

func TestDeltaRequest(t *testing.T) {
	msgs := fixture()
	full, _ := newTestCompactor(t, windowFor(msgs, 0.85))
	delta, _ := newTestCompactor(t, windowFor(msgs, 0.85))
	ctx := context.Background()
	_, rec1, _ := full.CompactWithRecord(ctx, msgs)
	_, drec1, _ := compactDelta(ctx, delta, compaction.Delta{}, msgs, false)
	if rec1.PrefixHash == "" || drec1.PrefixHash != rec1.PrefixHash || drec1.WatermarkAfter != rec1.WatermarkAfter {
		t.Fatalf("zero delta differs from a full request: %q vs %q", drec1.PrefixHash, rec1.PrefixHash)
	}
	grown := append(append([]compaction.Message(nil), msgs...), user("next step please"), call("", "z1"), result("z1", "done"))
	wantView, _, err := full.CompactWithRecord(ctx, grown)
	if err != nil {
		t.Fatal(err)
	}
	d := compaction.Delta{Watermark: drec1.WatermarkAfter, PrefixHash: drec1.PrefixHash}
	body := append([]compaction.Message{grown[0]}, grown[d.Watermark:]...)
	d.PromptTokens = 4321
	gotView, drec, err := compactDelta(ctx, delta, d, body, false)
	if err != nil {
		t.Fatal(err)
	}
	if drec.PromptTokens != 4321 || rec1.PromptTokens != 0 {
		t.Errorf("promptTokens recorded %d (and %d without usage), want 4321 and 0", drec.PromptTokens, rec1.PromptTokens)
	}
	if string(snapshot(t, gotView)) != string(snapshot(t, wantView)) || drec.HistoryTokens != -1 {
		t.Fatal("a delta request must give the view a full request gives")
	}
	// Stale watermark: a clear error, nothing changed.
	before, _ := delta.State(ctx)
	_, _, err = compactDelta(ctx, delta, compaction.Delta{Watermark: 3, PrefixHash: "nope"}, body, false)
	if !errors.Is(err, compaction.ErrStaleWatermark) || !strings.Contains(err.Error(), "session has 11") {
		t.Fatalf("stale watermark: %v", err)
	}
	after, _ := delta.State(ctx)
	if after.Watermark != before.Watermark || after.PrefixHash != before.PrefixHash {
		t.Fatal("a stale request changed the state")
	}
}

func TestEmergencySummarizesWhatItDrops(t *testing.T) {
	msgs := fixture()
	c, _ := newTestCompactor(t, windowFor(msgs, 0.97))
	ctx := context.Background()
	_, rec, _ := c.CompactWithRecord(ctx, msgs)
	if rec.Tier != compaction.TierEmergency || rec.WatermarkAfter != 11 {
		t.Fatalf("tier %s watermark %d", rec.Tier, rec.WatermarkAfter)
	}
	grown := append(append([]compaction.Message(nil), msgs...), user("and now?"))
	view, rec2, _ := c.CompactWithRecord(ctx, grown)
	// The task is pinned, the dropped messages are summarized: nothing is gone without a trace.
	if rec2.Tier == compaction.TierEmergency || view[1].Content != msgs[1].Content || !strings.Contains(view[3].Content, "- user_intent: ") ||
		!strings.Contains(view[3].Content, "Compacted 10 messages") || strings.Contains(view[3].Content, "no summary") {
		t.Fatalf("next turn: tier %s, view %v", rec2.Tier, ids(view))
	}
}

// TestRawHistoryModeIsTheSpecBehaviour shows what the watermark fixes: computing usage on the
// full history, a session past the window is force-truncated on every later turn.
func TestRawHistoryModeIsTheSpecBehaviour(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 99))
	full := genHistory(r, 300)
	cfg := compaction.DefaultConfig(compaction.EstimateTokens(full) / 10)
	cfg.RawHistory = true
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(newStore()), compaction.WithSessionID("raw"))
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[compaction.Tier]int{}
	replay(t, c, full, func(_ int, _ []compaction.Message, rec *compaction.CompactionRecord) {
		tiers[rec.Tier]++
		if rec.WatermarkAfter != 0 {
			t.Fatal("raw-history mode set a watermark")
		}
	})
	if tiers[compaction.TierEmergency] < tiers[compaction.TierNone] {
		t.Fatalf("expected the raw-history session to live in Emergency: %v", tiers)
	}
}

// conflictingStates is a state store whose saves always lose to another writer.
type conflictingStates struct{ *faultstore.Store }

func (conflictingStates) SaveState(context.Context, string, *compaction.State) error {
	return fmt.Errorf("save: %w", compaction.ErrConflict)
}

func TestStateConflictRecordsNothing(t *testing.T) {
	msgs := fixture()
	st := newStore()
	c, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(windowFor(msgs, 0.85)),
		compaction.WithToolResultStore(st), compaction.WithRecordStore(st), compaction.WithStateStore(conflictingStates{st}), compaction.WithSessionID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	_, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if !errors.Is(err, compaction.ErrStateConflict) || rec != nil {
		t.Fatalf("compaction whose state save conflicts: rec %v, err %v; want ErrStateConflict", rec, err)
	}
	if st.Appends() != 0 {
		t.Fatalf("%d records appended for a compaction that lost its state save", st.Appends())
	}
}
