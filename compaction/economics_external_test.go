package compaction_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// Tests of the economics of a compaction (issue 13): the target a Soft or Full compaction
// converges to, the least saving worth a compaction, the calibration of the estimate from
// the caller's reported prompt sizes, and the summarizer's accounting.

// proseText is n bytes of assistant text (lines of one sentence); it is never offloaded.
func proseText(n int) string {
	const s = "I traced the parser failure through the bracket handling code.\n"
	return strings.Repeat(s, n/len(s)+1)[:n]
}

// proseHistory is the system prompt, the task, one assistant message per head size, then
// six assistant messages of tail bytes each: with MinTailMessages 6 the head is the task
// and the sized messages, and its oldest half (splitHalf) is the task and the first
// len(head)/2 - 1 of them.
func proseHistory(head []int, tail int) []compaction.Message {
	msgs := make([]compaction.Message, 0, 2+len(head)+6)
	msgs = append(msgs, sys("You are a coding agent."), user("Fix the failing parser test."))
	for _, n := range head {
		msgs = append(msgs, asst(proseText(n)))
	}
	for range 6 {
		msgs = append(msgs, asst(proseText(tail)))
	}
	return msgs
}

// hasNoteContaining reports whether one of the record's notes contains s.
func hasNoteContaining(rec *compaction.CompactionRecord, s string) bool {
	for _, n := range rec.Notes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

func hasNote(rec *compaction.CompactionRecord, prefix string) bool {
	for _, n := range rec.Notes {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

func sameContents(a, b []compaction.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Role != b[i].Role || a[i].Content != b[i].Content || a[i].ToolCallID != b[i].ToolCallID || len(a[i].ToolCalls) != len(b[i].ToolCalls) {
			return false
		}
	}
	return true
}

// Soft summarizes only the oldest half of the head when that alone reaches the target and
// saves MinSaving: one summarizer call, the newer half kept verbatim, usage at most 50%.
func TestSoftKeptWhenItReachesTarget(t *testing.T) {
	// Oldest half: the task and three 18000-byte answers; newer half and tail are small.
	msgs := proseHistory([]int{18000, 18000, 18000, 900, 900, 900, 900}, 400)
	sum := &recordingSummarizer{output: goodSummary}
	c, st := newTestCompactor(t, windowFor(msgs, 0.75), compaction.WithSummarizer(sum))
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tier != compaction.TierSoft || sum.calls != 1 || rec.Summarized != 4 || rec.WatermarkAfter != 5 || len(sum.last.Messages) != 4 {
		t.Fatalf("tier %s, %d calls, summarized %d, watermark %d, notes %q", rec.Tier, sum.calls, rec.Summarized, rec.WatermarkAfter, rec.Notes)
	}
	if hasNote(rec, "Soft escalated") || hasNote(rec, "Soft result above the target") {
		t.Fatalf("notes %q", rec.Notes)
	}
	if rec.UsageBefore < 0.70 || rec.UsageAfter > c.Config().TargetThreshold {
		t.Fatalf("usage %.3f -> %.3f, want from Soft to at most the target", rec.UsageBefore, rec.UsageAfter)
	}
	// system, the pinned task, the compaction message, the newer half and the tail verbatim.
	if len(out) != 1+1+1+4+6 || !strings.HasPrefix(out[2].Content, compaction.CompactionHeader) {
		t.Fatalf("view %v", ids(out))
	}
	for i, m := range out[3:] {
		if m.Content != msgs[5+i].Content {
			t.Fatalf("message %d of the kept half/tail changed", 5+i)
		}
	}
	if s := storedState(t, st, "s1"); s == nil || s.Watermark != 5 {
		t.Fatal("state not saved with the new watermark")
	}
}

// Soft whose oldest half cannot bring the view to the target (a large tail), or would save
// less than MinSaving, is done as Full in the same turn: one call for the whole head, the
// record says Full and why.
func TestSoftEscalatesToFullWhenTailIsLarge(t *testing.T) {
	for _, c := range []struct {
		name  string
		head  []int
		tail  int
		usage float64
	}{
		// Of a 30000-byte view at 75%: the oldest half (3 x 1600) would save 8% of it.
		{"saves too little", []int{1600, 1600, 1600, 1600, 1600, 1600, 1600}, 3133, 0.75},
		// Of a 31200-byte view at 78%: the oldest half (3 x 4000) would save 26% of it, but
		// leave the view at 58%.
		{"stays above the target", []int{4000, 4000, 4000, 2000, 2000, 2000, 2000}, 1867, 0.78},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs := proseHistory(c.head, c.tail)
			sum := &recordingSummarizer{output: goodSummary}
			comp, _ := newTestCompactor(t, windowFor(msgs, c.usage), compaction.WithSummarizer(sum))
			out, rec, err := comp.CompactWithRecord(context.Background(), msgs)
			if err != nil {
				t.Fatal(err)
			}
			if rec.UsageBefore < 0.70 || rec.UsageBefore >= 0.80 {
				t.Fatalf("usage before %.3f is not Soft", rec.UsageBefore)
			}
			if rec.Tier != compaction.TierFull || !hasNote(rec, "Soft escalated to Full") || sum.calls != 1 || rec.Summarized != 8 || len(sum.last.Messages) != 8 {
				t.Fatalf("tier %s, notes %q, %d calls, summarized %d", rec.Tier, rec.Notes, sum.calls, rec.Summarized)
			}
			if sum.last.Tier != compaction.TierFull {
				t.Fatalf("the summarizer was asked for tier %s", sum.last.Tier)
			}
			// system, the pinned task, the compaction message, the tail.
			if len(out) != 1+1+1+6 || rec.WatermarkAfter != 9 || rec.UsageAfter > comp.Config().TargetThreshold {
				t.Fatalf("view %v, watermark %d, usage after %.3f", ids(out), rec.WatermarkAfter, rec.UsageAfter)
			}
		})
	}
}

// A Soft summary much larger than predicted leaves the view above the target: the rest of
// the head is summarized in the same turn (a second call), and the record says Full.
func TestSoftSecondPassWhenSummaryLargerThanPredicted(t *testing.T) {
	// A window of about 10000 tokens (40000 bytes), a view of 30000 bytes (75%): the oldest
	// half (the task and 3 x 5324 bytes, 40% of the window) is predicted to bring the view
	// under the target with a message of a third of it (13%); the summary comes back at the
	// cap of the compaction message (a fifth of the window, MaxSummaryChars set high), which
	// leaves the view at about 55%.
	msgs := proseHistory([]int{5324, 5324, 5324, 2000, 2000, 2000, 2000}, 1000)
	big := "## Anchors\n- user_intent: fix parser\n- execution_progress: reproduced\n- key_decision: stack\n- tried_solution: regex\n- next_step: run tests\n\n## Summary\n" + proseText(40000)
	sum := &usageSummarizer{output: big, usage: compaction.SummaryUsage{InputTokens: 100, OutputTokens: 10}}
	cfg := compaction.DefaultConfig(windowFor(msgs, 0.75))
	cfg.MaxSummaryChars = 100000
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(newStore()), compaction.WithSessionID("s1"), compaction.WithSummarizer(sum))
	if err != nil {
		t.Fatal(err)
	}
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	reqs := sum.requests()
	if rec.Tier != compaction.TierFull || !hasNote(rec, "Soft result above the target") || hasNote(rec, "Soft escalated") || len(reqs) != 2 {
		t.Fatalf("tier %s, notes %q, %d calls", rec.Tier, rec.Notes, len(reqs))
	}
	// The first call had the oldest half, the second the newer half, with the first's summary.
	if len(reqs[0].Messages) != 4 || len(reqs[1].Messages) != 4 || reqs[1].Messages[0].Content != msgs[5].Content ||
		reqs[1].PreviousSummary == "" || rec.Summarized != 8 || rec.WatermarkAfter != 9 {
		t.Fatalf("spans %d and %d, summarized %d, watermark %d", len(reqs[0].Messages), len(reqs[1].Messages), rec.Summarized, rec.WatermarkAfter)
	}
	if rec.SummarizerCalls != 2 || rec.SummarizerInputTokens != 200 || rec.SummarizerOutputTokens != 20 {
		t.Fatalf("summarizer accounting %d calls, %d in, %d out", rec.SummarizerCalls, rec.SummarizerInputTokens, rec.SummarizerOutputTokens)
	}
	if len(out) != 1+1+1+6 || rec.UsageAfter >= c.Config().EmergencyThreshold {
		t.Fatalf("view %v, usage after %.3f", ids(out), rec.UsageAfter)
	}
}

// Full is not done when even the whole head would save less than MinSaving (the view is
// mostly its tail): no summarizer call, the view is the input, nothing is stored.
func TestFullDeferredWhenSavingTooSmall(t *testing.T) {
	for _, c := range []struct {
		name  string
		usage float64
		notes []string
	}{
		{"Full", 0.85, []string{"summarization deferred"}},
		{"Soft escalates then defers", 0.75, []string{"Soft escalated to Full", "summarization deferred"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The head (task + 7 x 400 bytes) is under a tenth of the view; the tail 6 x 5200.
			msgs := proseHistory([]int{400, 400, 400, 400, 400, 400, 400}, 5200)
			before := snapshot(t, msgs)
			sum := &recordingSummarizer{output: goodSummary}
			comp, st := newTestCompactor(t, windowFor(msgs, c.usage), compaction.WithSummarizer(sum))
			out, rec, err := comp.CompactWithRecord(context.Background(), msgs)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Tier != compaction.TierFull || sum.calls != 0 || rec.SummarizerCalls != 0 || rec.Summarized != 0 || rec.WatermarkAfter != 0 {
				t.Fatalf("tier %s, %d calls, summarized %d, watermark %d", rec.Tier, sum.calls, rec.Summarized, rec.WatermarkAfter)
			}
			for _, n := range c.notes {
				if !hasNote(rec, n) {
					t.Fatalf("notes %q lack %q", rec.Notes, n)
				}
			}
			if !sameContents(out, msgs) || rec.TokensAfter != rec.TokensBefore {
				t.Fatalf("the view changed: %v", ids(out))
			}
			if st.Saves() != 0 || st.Puts() != 0 {
				t.Fatalf("a deferred compaction stored %d states, %d results", st.Saves(), st.Puts())
			}
			if string(before) != string(snapshot(t, msgs)) {
				t.Fatal("the history was modified")
			}
		})
	}
}

// warnHistory: the task, four tool results (sizes given, oldest first) in the head, and a
// tail of six small messages.
func warnHistory(sizes ...int) []compaction.Message {
	msgs := []compaction.Message{sys("You are a coding agent."), user("Fix the failing parser test.")}
	for i, n := range sizes {
		id := fmt.Sprintf("c%d", i+1)
		msgs = append(msgs, call("", id), result(id, strings.Repeat("a line of test output\n", n/22+1)[:n]))
	}
	return append(msgs, asst("Running tests now."), call("", "t1"), result("t1", "ok"), asst("Still running."), call("", "t2"), result("t2", "PASSED"))
}

func offloadedIDs(rec *compaction.CompactionRecord) []string {
	out := make([]string, 0, len(rec.Offloaded))
	for _, o := range rec.Offloaded {
		out = append(out, o.ToolCallID)
	}
	return out
}

// Warn offloads the head's results newest first, only as many as bring the view to the
// target: the oldest (and largest) result stays when newer ones suffice.
func TestWarnBatchesNewestFirst(t *testing.T) {
	for _, c := range []struct {
		usage float64
		want  []string
	}{
		// View ~44 KB; each 6000-byte result saves ~5.5 KB, the 12000-byte one ~11.5 KB.
		{0.62, []string{"c3", "c4"}},       // goal ~8.5 KB: the two newest
		{0.69, []string{"c2", "c3", "c4"}}, // goal ~12 KB: the three newest
	} {
		t.Run(fmt.Sprint(c.usage), func(t *testing.T) {
			msgs := warnHistory(20000, 12000, 6000, 6000)
			comp, st := newTestCompactor(t, windowFor(msgs, c.usage))
			out, rec, err := comp.CompactWithRecord(context.Background(), msgs)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Tier != compaction.TierWarn || fmt.Sprint(offloadedIDs(rec)) != fmt.Sprint(c.want) || st.Puts() != len(c.want) {
				t.Fatalf("tier %s, offloaded %v (puts %d), notes %q", rec.Tier, offloadedIDs(rec), st.Puts(), rec.Notes)
			}
			if rec.UsageAfter > comp.Config().TargetThreshold {
				t.Fatalf("usage after %.3f above the target", rec.UsageAfter)
			}
			if saved := 1 - float64(rec.TokensAfter)/float64(rec.TokensBefore); saved < comp.Config().MinSaving {
				t.Fatalf("saved %.3f of the view", saved)
			}
			for _, m := range out {
				if m.Role != compaction.RoleTool {
					continue
				}
				want := strings.Contains(fmt.Sprint(c.want), m.ToolCallID)
				if strings.HasPrefix(m.Content, compaction.PlaceholderPrefix) != want {
					t.Fatalf("%s offloaded=%v, want %v", m.ToolCallID, !want, want)
				}
			}
		})
	}
}

// Warn offloads nothing unless together the offloads save MinSaving of the view.
func TestWarnDeferredWhenSavingTooSmall(t *testing.T) {
	for _, c := range []struct {
		name string
		msgs []compaction.Message
	}{
		// Only results under the offload threshold.
		{"small results", warnHistory(3000, 3500, 3900, 2000)},
		// One offloadable result saving ~4.5 KB of a ~45 KB view (10%).
		{"large share of prose", append(warnHistory(5000), asst(proseText(40000)))},
	} {
		t.Run(c.name, func(t *testing.T) {
			comp, st := newTestCompactor(t, windowFor(c.msgs, 0.65))
			out, rec, err := comp.CompactWithRecord(context.Background(), c.msgs)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Tier != compaction.TierWarn || !hasNote(rec, "offload deferred") || len(rec.Offloaded) != 0 || st.Puts() != 0 {
				t.Fatalf("tier %s, offloaded %v, notes %q", rec.Tier, offloadedIDs(rec), rec.Notes)
			}
			if !sameContents(out, c.msgs) || st.Saves() != 0 {
				t.Fatalf("the view changed or a state was stored (%d)", st.Saves())
			}
		})
	}
}

// A result offloaded once is shown as its placeholder in every later view, whatever the
// tier, after a restart too; with RawHistory every turn starts from the raw history.
func TestKnownOffloadsShownInEveryTier(t *testing.T) {
	ctx := context.Background()
	msgs := warnHistory(20000, 12000, 6000, 6000)
	window := windowFor(msgs, 0.62)
	isPlaceholder := func(view []compaction.Message, id string) bool {
		for _, m := range view {
			if m.Role == compaction.RoleTool && m.ToolCallID == id {
				return strings.HasPrefix(m.Content, compaction.PlaceholderPrefix)
			}
		}
		t.Fatalf("%s not in the view", id)
		return false
	}
	c, st := newTestCompactor(t, window)
	_, rec, err := c.CompactWithRecord(ctx, msgs)
	if err != nil || rec.Tier != compaction.TierWarn || fmt.Sprint(offloadedIDs(rec)) != "[c3 c4]" {
		t.Fatalf("setup: %v, tier %s, offloaded %v", err, rec.Tier, offloadedIDs(rec))
	}
	// The same history again: the placeholders bring it under Warn (None), still shown.
	out, rec, _ := c.CompactWithRecord(ctx, msgs)
	if rec.Tier != compaction.TierNone || !isPlaceholder(out, "c3") || !isPlaceholder(out, "c4") || isPlaceholder(out, "c2") {
		t.Fatalf("None: tier %s, view %v", rec.Tier, ids(out))
	}
	// Grown with small results back into Warn, where nothing new is worth offloading.
	grown := append(append([]compaction.Message(nil), msgs...), asst(proseText(6000)), asst(proseText(6000)), asst("ok"), asst("ok"), asst("ok"), asst("ok"), asst("ok"))
	out, rec, _ = c.CompactWithRecord(ctx, grown)
	if rec.Tier != compaction.TierWarn || !isPlaceholder(out, "c3") || !isPlaceholder(out, "c4") {
		t.Fatalf("Warn: tier %s, offloaded %v, view %v", rec.Tier, offloadedIDs(rec), ids(out))
	}
	// A new compactor on the same store knows them from the stored state.
	c2, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(window), compaction.WithStore(st), compaction.WithSessionID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	out, rec, _ = c2.CompactWithRecord(ctx, msgs)
	if rec.Tier != compaction.TierNone || !isPlaceholder(out, "c3") || !isPlaceholder(out, "c4") {
		t.Fatalf("after a restart: tier %s, view %v", rec.Tier, ids(out))
	}
	// RawHistory: every turn starts from the raw history, known offloads are not applied
	// (a None turn on the same store shows the raw results).
	cfg := compaction.DefaultConfig(window * 10)
	cfg.RawHistory = true
	raw, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(st), compaction.WithSessionID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	out, rec, _ = raw.CompactWithRecord(ctx, msgs)
	if rec.Tier != compaction.TierNone || isPlaceholder(out, "c3") || isPlaceholder(out, "c4") || !sameContents(out, msgs) {
		t.Fatalf("RawHistory: tier %s, view %v", rec.Tier, ids(out))
	}
}

// TestRawHistoryWarnSameViewEveryTurn: with Config.RawHistory (the seed spec's replay,
// where Warn offloads the head's large results on every turn and the offloads are
// idempotent), the same history sent again gets the same view, with nothing written again.
// (Regression: at b476863 warn() counted a result already offloaded as saving nothing,
// which is right only when shown() has applied its placeholder, and shown() does not under
// RawHistory: each call offloaded the next older result, and the fourth, all of them known,
// deferred and returned the raw history at 0.62. Fixed in c870a66.)
func TestRawHistoryWarnSameViewEveryTurn(t *testing.T) {
	ctx := context.Background()
	msgs := warnHistory(20000, 12000, 6000, 6000)
	cfg := compaction.DefaultConfig(windowFor(msgs, 0.62))
	cfg.RawHistory = true
	st := newStore()
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(st), compaction.WithSessionID("raw"))
	if err != nil {
		t.Fatal(err)
	}
	first, rec, err := c.CompactWithRecord(ctx, msgs)
	if err != nil || rec.Tier != compaction.TierWarn || len(rec.Offloaded) == 0 || rec.UsageAfter > cfg.TargetThreshold {
		t.Fatalf("first turn: %v, tier %s, offloaded %v, usage after %.2f", err, rec.Tier, offloadedIDs(rec), rec.UsageAfter)
	}
	puts := st.Puts()
	for turn := 2; turn <= 4; turn++ {
		out, rec, err := c.CompactWithRecord(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Offloaded) != 0 || !sameContents(out, first) {
			t.Errorf("turn %d on the same history: tier %s, usage %.2f -> %.2f, offloaded %v, notes %q: the view differs from the first turn's",
				turn, rec.Tier, rec.UsageBefore, rec.UsageAfter, offloadedIDs(rec), rec.Notes)
		}
	}
	if st.Puts() != puts {
		t.Errorf("%d results written again", st.Puts()-puts)
	}
}

// The record's NextTier and TokensToNextTier are computed on the returned view's
// calibrated tokens.
func TestRecordNextTier(t *testing.T) {
	msgs := fixture()
	est := compaction.EstimateTokens(msgs)
	window := est * 4 // 25%
	c, _ := newTestCompactor(t, window)
	rec := report(t, c, msgs, 0)
	if rec.NextTier != compaction.TierWarn || rec.TokensToNextTier != int(math.Ceil(0.6*float64(window)))-est {
		t.Fatalf("next %s in %d (estimate %d, window %d)", rec.NextTier, rec.TokensToNextTier, est, window)
	}
	rec = report(t, c, msgs, 2*est) // 50% once calibrated
	if rec.NextTier != compaction.TierWarn || rec.TokensToNextTier != int(math.Ceil(0.6*float64(window)))-2*est {
		t.Fatalf("calibrated: next %s in %d", rec.NextTier, rec.TokensToNextTier)
	}
	// After a compaction: the next tier from the compacted view.
	sum := &recordingSummarizer{output: goodSummary}
	c2, _ := newTestCompactor(t, windowFor(msgs, 0.85), compaction.WithSummarizer(sum))
	rec = report(t, c2, msgs, 0)
	if tier, left := c2.Config().NextTier(rec.TokensAfter); rec.Tier != compaction.TierFull || rec.NextTier != tier || rec.TokensToNextTier != left || left <= 0 {
		t.Fatalf("after Full: next %s in %d, want %s in %d", rec.NextTier, rec.TokensToNextTier, tier, left)
	}
}

// usageSummarizer returns output and reports usage on every call, keeping the requests.
type usageSummarizer struct {
	mu     sync.Mutex
	reqs   []compaction.SummaryRequest
	output string
	usage  compaction.SummaryUsage
}

func (u *usageSummarizer) Name() string { return "usage" }

func (u *usageSummarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	res, err := u.SummarizeResult(ctx, req)
	return res.Text, err
}

func (u *usageSummarizer) SummarizeResult(_ context.Context, req compaction.SummaryRequest) (compaction.SummaryResult, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reqs = append(u.reqs, req)
	return compaction.SummaryResult{Text: u.output, Usage: u.usage}, nil
}

func (u *usageSummarizer) requests() []compaction.SummaryRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]compaction.SummaryRequest(nil), u.reqs...)
}

// The record counts the summarizer's calls and tokens: as a ResultSummarizer reports them,
// estimated from the prompt and the answer otherwise (or for the side it did not report);
// Emergency's extractive summary makes no call and is not counted.
func TestSummarizerAccounting(t *testing.T) {
	estimatedIn := func(req compaction.SummaryRequest) int {
		return (len(compaction.SummaryInstructions) + len(compaction.BuildSummaryPrompt(req, 0))) / 4
	}
	for _, c := range []struct {
		name    string
		usage   *compaction.SummaryUsage // nil: a summarizer without usage
		usageAt float64
		calls   int
		in, out func(req compaction.SummaryRequest) int
	}{
		{"reported", &compaction.SummaryUsage{InputTokens: 1234, OutputTokens: 56}, 0.85, 1,
			func(compaction.SummaryRequest) int { return 1234 }, func(compaction.SummaryRequest) int { return 56 }},
		{"reported zero: estimated", &compaction.SummaryUsage{}, 0.85, 1,
			estimatedIn, func(compaction.SummaryRequest) int { return len(goodSummary) / 4 }},
		{"input only", &compaction.SummaryUsage{InputTokens: 700}, 0.85, 1,
			func(compaction.SummaryRequest) int { return 700 }, func(compaction.SummaryRequest) int { return len(goodSummary) / 4 }},
		{"no usage: estimated", nil, 0.85, 1,
			estimatedIn, func(compaction.SummaryRequest) int { return len(goodSummary) / 4 }},
		{"Soft", &compaction.SummaryUsage{InputTokens: 10, OutputTokens: 5}, 0.75, 1,
			func(compaction.SummaryRequest) int { return 10 }, func(compaction.SummaryRequest) int { return 5 }},
		{"Emergency", &compaction.SummaryUsage{InputTokens: 10, OutputTokens: 5}, 0.97, 0, nil, nil},
		{"Warn", &compaction.SummaryUsage{InputTokens: 10, OutputTokens: 5}, 0.65, 0, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs := fixture()
			var s compaction.Summarizer
			var last func() compaction.SummaryRequest
			if c.usage != nil {
				us := &usageSummarizer{output: goodSummary, usage: *c.usage}
				s, last = us, func() compaction.SummaryRequest { r := us.requests(); return r[len(r)-1] }
			} else {
				rs := &recordingSummarizer{output: goodSummary}
				s, last = rs, func() compaction.SummaryRequest { return rs.last }
			}
			comp, _ := newTestCompactor(t, windowFor(msgs, c.usageAt), compaction.WithSummarizer(s))
			_, rec, err := comp.CompactWithRecord(context.Background(), msgs)
			if err != nil {
				t.Fatal(err)
			}
			if rec.SummarizerCalls != c.calls {
				t.Fatalf("tier %s: %d calls counted, want %d", rec.Tier, rec.SummarizerCalls, c.calls)
			}
			if c.calls == 0 {
				if rec.SummarizerInputTokens != 0 || rec.SummarizerOutputTokens != 0 {
					t.Fatalf("tier %s counted %d/%d tokens", rec.Tier, rec.SummarizerInputTokens, rec.SummarizerOutputTokens)
				}
				return
			}
			req := last()
			if rec.SummarizerInputTokens != c.in(req) || rec.SummarizerOutputTokens != c.out(req) {
				t.Fatalf("tokens %d in, %d out; want %d, %d", rec.SummarizerInputTokens, rec.SummarizerOutputTokens, c.in(req), c.out(req))
			}
		})
	}
	// A forced compaction is Emergency too: nothing counted, however the summarizer reports.
	comp, _ := newTestCompactor(t, 1<<20, compaction.WithSummarizer(&usageSummarizer{output: goodSummary, usage: compaction.SummaryUsage{InputTokens: 9, OutputTokens: 9}}))
	_, rec, err := compactForce(context.Background(), comp, fixture())
	if err != nil || rec.Tier != compaction.TierEmergency || rec.Summarized == 0 || rec.SummarizerCalls != 0 || rec.SummarizerInputTokens != 0 {
		t.Fatalf("forced: %v, tier %s, summarized %d, %d calls", err, rec.Tier, rec.Summarized, rec.SummarizerCalls)
	}
	// The default extractive summarizer is counted in Full as what an LLM would be sent.
	comp, _ = newTestCompactor(t, windowFor(fixture(), 0.85))
	_, rec, _ = comp.CompactWithRecord(context.Background(), fixture())
	if rec.Tier != compaction.TierFull || rec.SummarizerCalls != 1 || rec.SummarizerInputTokens <= len(compaction.SummaryInstructions)/4 || rec.SummarizerOutputTokens <= 0 {
		t.Fatalf("extractive: tier %s, %d calls, %d in, %d out", rec.Tier, rec.SummarizerCalls, rec.SummarizerInputTokens, rec.SummarizerOutputTokens)
	}
}

// TestFullLargerThanPredictedIsKeptWithANote: Full is decided on predictSaving, which
// guesses the new compaction message before the call (max(old, min(old + span/10,
// window/3 + 500)) after a first one). When the summarizer's answer is larger (here an LLM
// summary of MaxSummaryChars, 6000 bytes, replacing a 400-byte message, for an 8000-byte
// span: predicted 1200 bytes) the result is kept, since the call is paid and dropping it
// would only have the next turn pay for another, and the record says so.
func TestFullLargerThanPredictedIsKeptWithANote(t *testing.T) {
	ctx := context.Background()
	// First Full (10000-token window): the head summarized into a small message.
	msgs := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000}, 1000)
	sum := &recordingSummarizer{output: goodSummary}
	c, _ := newTestCompactor(t, 10000, compaction.WithSummarizer(sum))
	_, rec, err := c.CompactWithRecord(ctx, msgs)
	if err != nil || rec.Tier != compaction.TierFull || rec.WatermarkAfter != 9 {
		t.Fatalf("setup: %v, tier %s, watermark %d", err, rec.Tier, rec.WatermarkAfter)
	}
	// The agent goes on: two answers, then a tail of large ones. The span of the next Full
	// is the old tail and the two answers (8000 bytes), predicted to save 16% of the view.
	grown := append(append([]compaction.Message(nil), msgs...), asst(proseText(1000)), asst(proseText(1000)))
	for range 6 {
		grown = append(grown, asst(proseText(4500)))
	}
	sum.output = "## Anchors\n- user_intent: fix parser\n- execution_progress: reproduced\n- key_decision: stack\n- tried_solution: regex\n- next_step: run tests\n\n## Summary\n" + proseText(6000)
	_, rec, err = c.CompactWithRecord(ctx, grown)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tier != compaction.TierFull || rec.WatermarkAfter != 17 {
		t.Fatalf("setup: tier %s, watermark %d, notes %q", rec.Tier, rec.WatermarkAfter, rec.Notes)
	}
	saved := 1 - float64(rec.TokensAfter)/float64(rec.TokensBefore)
	if saved >= c.Config().MinSaving || saved <= 0 {
		t.Fatalf("setup: Full saved %.3f of the view (%d -> %d tokens), want a small positive saving under MinSaving %.2f",
			saved, rec.TokensBefore, rec.TokensAfter, c.Config().MinSaving)
	}
	if !hasNoteContaining(rec, "under the 15% minimum: the summary was larger than predicted") {
		t.Errorf("Full saved %.3f of the view, under MinSaving, and the record does not say why: notes %q", saved, rec.Notes)
	}
}
