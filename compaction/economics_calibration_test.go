package compaction_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
)

// Tests of the calibration of the token estimate from the caller's reported prompt sizes
// (issue 13): learnt, persisted, clamped, and a scale of the whole window.

// calStore serves a stored state whose calibration is cal (NaN and Inf cannot be JSON).
type calStore struct {
	*faultstore.Store
	cal float64
}

func (s *calStore) LoadState(context.Context, string) (*compaction.State, error) {
	return &compaction.State{Calibration: s.cal}, nil
}

// report runs a turn that tells the compactor the last prompt was ratio times its estimate.
func report(t *testing.T, c *compaction.ProgressiveCompactor, msgs []compaction.Message, promptTokens int) *compaction.CompactionRecord {
	t.Helper()
	_, rec, err := compactDelta(context.Background(), c, compaction.Delta{PromptTokens: promptTokens}, msgs, false)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// The factor is real/estimated tokens of the last view, bounded to [0.25, 4] per report,
// and an exponential moving average (weight 0.3) over reports.
func TestCalibrationLearntFromReports(t *testing.T) {
	msgs := fixture()
	est := compaction.EstimateTokens(msgs)
	c, _ := newTestCompactor(t, est*100) // TierNone throughout
	if rec := report(t, c, msgs, 0); rec.Calibration != 1 || rec.UsageBefore != float64(est)/float64(est*100) {
		t.Fatalf("before any report: factor %v, usage %v", rec.Calibration, rec.UsageBefore)
	}
	f := 0.0
	for i, ratio := range []float64{2, 1, 1, 10, 0.01, 1.3} {
		p := int(math.Round(ratio * float64(est)))
		sample := math.Min(math.Max(float64(p)/float64(est), 0.25), 4)
		if f == 0 {
			f = sample // the first report is taken as it is
		} else {
			f += 0.3 * (sample - f)
		}
		rec := report(t, c, msgs, p)
		if math.Abs(rec.Calibration-f) > 1e-9 || rec.PromptTokens != p {
			t.Fatalf("report %d (%.2fx): factor %v, want %v", i, ratio, rec.Calibration, f)
		}
		if outOfBounds := ratio > 4 || ratio < 0.25; outOfBounds != hasNote(rec, "reported promptTokens") {
			t.Fatalf("report %d (%.2fx): notes %q", i, ratio, rec.Notes)
		}
		if u := float64(int(math.Round(float64(rec.TokensBefore)*f))) / float64(est*100); math.Abs(rec.UsageBefore-u) > 1e-12 || math.Abs(rec.UsageAfter-u) > 1e-12 {
			t.Fatalf("report %d: usage %v -> %v, want calibrated %v", i, rec.UsageBefore, rec.UsageAfter, u)
		}
	}
}

// Real tokens 1.5 times the estimate move a view the estimate puts at 50% (None) into Soft
// (whose flow may escalate to Full), and the compaction brings the calibrated usage down to
// the target.
func TestCalibrationChangesTier(t *testing.T) {
	msgs := fixture()
	window := windowFor(msgs, 0.5)
	c, _ := newTestCompactor(t, window, compaction.WithSummarizer(&recordingSummarizer{output: goodSummary}))
	rec := report(t, c, msgs, 0)
	if rec.Tier != compaction.TierNone {
		t.Fatalf("uncalibrated tier %s at usage %.3f", rec.Tier, rec.UsageBefore)
	}
	est := rec.TokensAfter
	rec = report(t, c, msgs, est*3/2)
	if rec.Calibration != float64(est*3/2)/float64(est) || (rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull) || math.Abs(rec.UsageBefore-0.75) > 0.01 {
		t.Fatalf("factor %v, tier %s, usage %.3f", rec.Calibration, rec.Tier, rec.UsageBefore)
	}
	if rec.Summarized == 0 || rec.UsageAfter > c.Config().TargetThreshold {
		t.Fatalf("summarized %d, calibrated usage after %.3f above the target", rec.Summarized, rec.UsageAfter)
	}
	if want := float64(compaction.Calibrated(rec.TokensAfter, rec.Calibration)) / float64(window); rec.UsageAfter != want {
		t.Fatalf("usage after %v, want %v", rec.UsageAfter, want)
	}
	// The same view at the same window without the report stays None.
	c2, _ := newTestCompactor(t, window)
	if rec := report(t, c2, msgs, 0); rec.Tier != compaction.TierNone {
		t.Fatalf("tier %s without the report", rec.Tier)
	}
}

// The factor is stored with the state, read by a new compactor on the same store, and
// saved on a turn that saves nothing else only when it moved more than 10%.
func TestCalibrationPersisted(t *testing.T) {
	msgs := fixture()
	est := compaction.EstimateTokens(msgs)
	window := est * 100
	c, st := newTestCompactor(t, window)
	report(t, c, msgs, 0)
	if storedState(t, st, "s1") != nil {
		t.Fatal("a None turn without a report saved a state")
	}
	report(t, c, msgs, 2*est)
	if s := storedState(t, st, "s1"); s == nil || s.Calibration != 2 {
		t.Fatalf("learnt factor not saved: %+v", s)
	}
	// 2 -> ~2.03: under 10%, not saved.
	p := est * 21 / 10
	f := 2 + 0.3*(float64(p)/float64(est)-2)
	if rec := report(t, c, msgs, p); math.Abs(rec.Calibration-f) > 1e-9 || storedState(t, st, "s1").Calibration != 2 {
		t.Fatalf("factor %v (want %v), stored %v", rec.Calibration, f, storedState(t, st, "s1").Calibration)
	}
	// ~2.03 -> ~2.32: more than 10% from the stored 2, saved.
	f += 0.3 * (3 - f)
	rec := report(t, c, msgs, 3*est)
	if math.Abs(rec.Calibration-f) > 1e-9 || math.Abs(storedState(t, st, "s1").Calibration-f) > 1e-9 || f < 2.2 {
		t.Fatalf("factor %v (want %v), stored %v", rec.Calibration, f, storedState(t, st, "s1").Calibration)
	}
	// A restarted compactor uses the stored factor; the report of its first turn measured a
	// view it did not return, so it is not used.
	c2, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(window), compaction.WithStore(st), compaction.WithSessionID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	rec = report(t, c2, msgs, est/2)
	if math.Abs(rec.Calibration-f) > 1e-9 || rec.PromptTokens != est/2 {
		t.Fatalf("after a restart: factor %v, want %v", rec.Calibration, f)
	}
	rec = report(t, c2, msgs, est)
	if want := f + 0.3*(1-f); math.Abs(rec.Calibration-want) > 1e-9 {
		t.Fatalf("the restarted compactor's first usable report: factor %v, want %v", rec.Calibration, want)
	}
}

// A stored factor that is NaN, infinite, negative or out of bounds is clamped when loaded.
func TestCalibrationStoredStateClamped(t *testing.T) {
	msgs := fixture()
	window := compaction.EstimateTokens(msgs) * 100
	for _, c := range []struct {
		stored, want float64
	}{
		{math.NaN(), 1}, {math.Inf(1), 1}, {math.Inf(-1), 1}, {-2, 1}, {0, 1},
		{1e9, 4}, {0.01, 0.25}, {1.7, 1.7},
	} {
		t.Run(fmt.Sprint(c.stored), func(t *testing.T) {
			comp, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(window), compaction.WithStore(&calStore{Store: newStore(), cal: c.stored}), compaction.WithSessionID("s1"))
			if err != nil {
				t.Fatal(err)
			}
			rec := report(t, comp, msgs, 0)
			if rec.Calibration != c.want || math.IsNaN(rec.UsageBefore) || rec.UsageBefore != float64(compaction.Calibrated(rec.TokensBefore, c.want))/float64(window) {
				t.Fatalf("factor %v, usage %v", rec.Calibration, rec.UsageBefore)
			}
			st, _ := comp.State(context.Background())
			if got := st.Calibration; got != 0 && got != c.want || got == 0 && c.want != 1 {
				t.Fatalf("state factor %v", got)
			}
		})
	}
}

// TestCalibrationIsAWindowScale: a session whose real tokens are twice the estimate is
// compacted as the same session in a window half as large without calibration: the same
// tier and span, and a compaction message of the same size. The shares of the window the
// engine budgets (the target, the compaction message's cap for its anchors and prose, the
// predicted message, the pin budget, Emergency's budget) are shares of the real window.
// (Regression: at b476863 the message cap, ContextWindow*4/5 bytes, and predictSaving's
// guess, ContextWindow*4/10, ignored the factor, so with a factor f the message could take
// f/5 of the real window: here 4443 bytes against 3137, and a Full compaction that ended
// at 75% usage. Fixed in c870a66.)
func TestCalibrationIsAWindowScale(t *testing.T) {
	ctx := context.Background()
	msgs := proseHistory([]int{700, 700, 700, 700, 700, 700, 700}, 250)
	var anchors strings.Builder
	anchors.WriteString("## Anchors\n")
	for _, typ := range compaction.AnchorTypes {
		fmt.Fprintf(&anchors, "- %s:\n", typ)
		for i := range 20 {
			fmt.Fprintf(&anchors, "  - %s item %02d: the parser keeps a stack of open brackets\n", typ, i)
		}
	}
	output := anchors.String() + "\n## Summary\n" + proseText(20000)
	compact := func(window, factor int) (*compaction.CompactionRecord, *compaction.State) {
		c, _ := newTestCompactor(t, window, compaction.WithSummarizer(&recordingSummarizer{output: output}))
		rec := report(t, c, msgs, 0)
		if factor > 1 {
			if rec.Tier != compaction.TierNone {
				t.Fatalf("setup: tier %s before the report", rec.Tier)
			}
			rec = report(t, c, msgs, factor*rec.TokensAfter)
		}
		st, err := c.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rec, st
	}
	// The estimate puts the view at 42% of 4000 tokens, the report at 84%; the same view
	// without a factor is at 84% of 2000.
	if u := float64(compaction.EstimateTokens(msgs)) / 4000; u < 0.40 || u > 0.45 {
		t.Fatalf("setup: estimated usage %.3f", u)
	}
	calib, calibState := compact(4000, 2)
	small, smallState := compact(2000, 1)
	if calib.Calibration != 2 || calib.Tier != compaction.TierFull || small.Tier != calib.Tier || calib.WatermarkAfter != small.WatermarkAfter || calib.Summarized == 0 {
		t.Fatalf("factor %v: tier %s, watermark %d; without: tier %s, watermark %d", calib.Calibration, calib.Tier, calib.WatermarkAfter, small.Tier, small.WatermarkAfter)
	}
	a, b := len(calibState.CompactionMessage), len(smallState.CompactionMessage)
	if math.Abs(float64(a-b)) > 0.02*float64(b) || math.Abs(calib.UsageAfter-small.UsageAfter) > 0.02 {
		t.Errorf("compaction message %d bytes with the factor, %d without; usage after %.3f and %.3f", a, b, calib.UsageAfter, small.UsageAfter)
	}
}
