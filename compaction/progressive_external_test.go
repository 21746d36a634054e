package compaction_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
)

const goodSummary = "## Anchors\n- user_intent: fix parser\n- execution_progress: reproduced\n- key_decision: stack\n- tried_solution: regex\n- next_step: run tests\n\n## Summary\nWorked on parser.go."

// fixture: system, 10 head messages (two large results), 6 tail messages.
func fixture() []compaction.Message {
	big1 := strings.Repeat("a line of test output\n", 400) // ~8.8 KB
	big2 := strings.Repeat("another line of output\n", 300)
	return []compaction.Message{
		sys("You are a coding agent."),
		user("Fix the failing parser test."),
		call("Let me look.", "c1"), result("c1", big1),
		call("", "c2", "c3"), result("c2", strings.Repeat("def parse(tokens):\n", 150)), result("c3", big2),
		asst("I'll use a stack instead of a regex."),
		call("", "c4"), result("c4", "FAILED test_parse: Error: unbalanced"),
		user("Any progress?"),
		// tail (6)
		call("", "c5"), result("c5", "ok"),
		asst("Running tests now."),
		call("", "c6"), result("c6", "PASSED"),
		asst("Done."),
	}
}

func newTestCompactor(t *testing.T, window int, opts ...compaction.Option) (*compaction.ProgressiveCompactor, *faultstore.Store) {
	t.Helper()
	st := newStore()
	c, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(window), append([]compaction.Option{compaction.WithStore(st), compaction.WithSessionID("s1")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

func TestTierNoneReturnsInputUntouched(t *testing.T) {
	msgs := fixture()
	c, st := newTestCompactor(t, compaction.EstimateTokens(msgs)*10)
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tier != compaction.TierNone || len(out) != len(msgs) || &out[0] != &msgs[0] {
		t.Fatalf("tier %s, %d messages", rec.Tier, len(out))
	}
	if st.Puts() != 0 || st.Appends() != 0 || st.Saves() != 0 {
		t.Fatal("TierNone had side effects")
	}
}

func TestTierWarnOffloadsHeadOnly(t *testing.T) {
	msgs := fixture()
	before := snapshot(t, msgs)
	sum := &recordingSummarizer{output: goodSummary}
	c, st := newTestCompactor(t, windowFor(msgs, 0.65), compaction.WithSummarizer(sum))
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tier != compaction.TierWarn || sum.calls != 0 {
		t.Fatalf("tier %s, summarizer calls %d", rec.Tier, sum.calls)
	}
	// One batch, newest first, only as much as brings the view to the target (50%): c3's
	// result alone does, so c1's (older: a rewrite from further up) stays.
	if len(out) != len(msgs) || len(rec.Offloaded) != 1 || rec.Offloaded[0].ToolCallID != "c3" || rec.Summarized != 0 || rec.PreservedTail != 6 {
		t.Fatalf("out %d msgs, record %+v", len(out), rec)
	}
	if rec.UsageAfter > c.Config().TargetThreshold || rec.UsageBefore < c.Config().WarnThreshold {
		t.Fatalf("usage %.2f -> %.2f, want from Warn to at most the target", rec.UsageBefore, rec.UsageAfter)
	}
	c3 := -1
	for i, m := range out {
		isBig := m.ToolCallID == "c3"
		if isBig != strings.HasPrefix(m.Content, compaction.PlaceholderPrefix) {
			t.Fatalf("message %d (%s) offloaded=%v", i, m.ToolCallID, !isBig)
		}
		if isBig {
			c3 = i
		}
	}
	got, err := st.GetToolResult(context.Background(), "s1", "c3")
	if err != nil || string(got) != msgs[c3].Content {
		t.Fatal("offloaded bytes differ from the original")
	}
	ph := out[c3].Content
	for _, want := range []string{"tool_call_id: c3", "ref: " + mem.RefScheme + "s1/c3", "preview (first 10 of"} {
		if !strings.Contains(ph, want) {
			t.Fatalf("placeholder lacks %q:\n%s", want, ph)
		}
	}
	if !bytes.Equal(before, snapshot(t, msgs)) {
		t.Fatal("caller's messages were modified")
	}
	if rec.TokensAfter >= rec.TokensBefore || st.Appends() != 1 {
		t.Fatalf("tokens %d -> %d, %d records stored", rec.TokensBefore, rec.TokensAfter, st.Appends())
	}
	// Idempotent: the next turn writes nothing again.
	puts := st.Puts()
	out2, rec2, _ := c.CompactWithRecord(context.Background(), msgs)
	if st.Puts() != puts || len(rec2.Offloaded) != 0 || out2[c3].Content != out[c3].Content {
		t.Fatalf("second offload wrote again (puts %d -> %d)", puts, st.Puts())
	}
}

func TestTierSoftSummarizesOldestHalf(t *testing.T) {
	msgs := fixture()
	sum := &recordingSummarizer{output: goodSummary}
	c, _ := newTestCompactor(t, windowFor(msgs, 0.75), compaction.WithSummarizer(sum))
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	// head = msgs[1:11] (10 messages); half = 5 -> index 6 is a tool result, moved back to 4 (the c2,c3 call).
	if rec.Tier != compaction.TierSoft || sum.calls != 1 || len(sum.last.Messages) != 3 || rec.Summarized != 3 {
		t.Fatalf("tier %s calls %d span %d summarized %d", rec.Tier, sum.calls, len(sum.last.Messages), rec.Summarized)
	}
	if !strings.HasPrefix(sum.last.Messages[2].Content, compaction.PlaceholderPrefix) {
		t.Fatal("the span was summarized before its large result was offloaded")
	}
	// system, the task (pinned: the span held it), the compaction message, the rest.
	if out[0].Role != compaction.RoleSystem || out[1].Content != msgs[1].Content || !strings.HasPrefix(out[2].Content, compaction.CompactionHeader) {
		t.Fatalf("view starts %v", ids(out[:3]))
	}
	if len(out) != 1+1+1+7+6 || rec.PreservedTail != 13 || rec.PinnedMessages != 1 {
		t.Fatalf("%d messages, preserved %d, pinned %d", len(out), rec.PreservedTail, rec.PinnedMessages)
	}
	// The newer half of the head stays as messages, not summarized; its large results are
	// offloaded in the same rewrite (Warn would have, and all after the compaction message
	// is new to a provider's cache anyway).
	if out[3].ToolCalls[0].ID != "c2" || out[5].ToolCallID != "c3" || !strings.HasPrefix(out[5].Content, compaction.PlaceholderPrefix) {
		t.Fatal("the newer half of the head must stay, its large result offloaded")
	}
	if compaction.CountAvailable(rec.Anchors) != 5 || rec.SummaryText != "Worked on parser.go." {
		t.Fatalf("anchors %v summary %q", rec.Anchors, rec.SummaryText)
	}
}

func TestTierFullSummarizesWholeHead(t *testing.T) {
	msgs := fixture()
	sum := &recordingSummarizer{output: goodSummary}
	var extracted []compaction.Message
	c, st := newTestCompactor(t, windowFor(msgs, 0.85), compaction.WithSummarizer(sum),
		compaction.WithMemoryExtractor(compaction.MemoryExtractorFunc(func(_ context.Context, _ string, m []compaction.Message) error { extracted = m; return nil })),
		compaction.WithTodoInjector(compaction.TodoInjectorFunc(func(context.Context, string) (string, error) { return "- [ ] run the full suite", nil })))
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	// system, two pins (the task and the user's "Any progress?"), the compaction message, the tail.
	if rec.Tier != compaction.TierFull || rec.Summarized != 10 || len(extracted) != 10 || len(out) != 1+2+1+6 || rec.PinnedMessages != 2 {
		t.Fatalf("tier %s summarized %d extracted %d out %d pinned %d", rec.Tier, rec.Summarized, len(extracted), len(out), rec.PinnedMessages)
	}
	if out[1].Content != msgs[1].Content || out[2].Content != "Any progress?" {
		t.Fatalf("pins %v", ids(out[1:3]))
	}
	cm := out[3].Content
	for _, want := range []string{compaction.CompactionHeader, "- user_intent: fix parser", "## Summary\nWorked on parser.go.", "## Todo\n- [ ] run the full suite", "Read back by tool_call_id: c1, c3"} {
		if !strings.Contains(cm, want) {
			t.Fatalf("compaction message lacks %q:\n%s", want, cm)
		}
	}
	for i, m := range out[4:] {
		if m.Content != msgs[11+i].Content {
			t.Fatal("tail not verbatim")
		}
	}
	if rec.CompressionRatio <= 0.5 || stateJSON(t, st) == nil {
		t.Fatalf("ratio %.2f, state saved %v", rec.CompressionRatio, stateJSON(t, st) != nil)
	}
	if !strings.Contains(rec.Notification(), "⚡ Context compressed [Full]") || !strings.Contains(rec.Notification(), "5 anchors | 2 offload(") {
		t.Fatalf("notification %q", rec.Notification())
	}
}

func TestTierEmergencySkipsSummarizer(t *testing.T) {
	msgs := fixture()
	sum := &recordingSummarizer{output: goodSummary}
	c, st := newTestCompactor(t, windowFor(msgs, 0.97), compaction.WithSummarizer(sum))
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	// No summarizer call; what is dropped is offloaded (two large results) and summarized
	// by the extractive summarizer.
	if rec.Tier != compaction.TierEmergency || sum.calls != 0 || rec.Error != compaction.EmergencyError || st.Puts() != 2 ||
		rec.Summarized != 10 || !strings.Contains(rec.SummaryText, "Compacted 10 messages") {
		t.Fatalf("tier %s calls %d error %q puts %d summarized %d summary %q", rec.Tier, sum.calls, rec.Error, st.Puts(), rec.Summarized, rec.SummaryText)
	}
	if out[0].Role != compaction.RoleSystem || rec.PreservedTail != 6 || compaction.HasOrphans(out) {
		t.Fatalf("view %v preserved %d", ids(out), rec.PreservedTail)
	}
	// Force runs Emergency whatever the usage.
	c2, _ := newTestCompactor(t, compaction.EstimateTokens(msgs)*100, compaction.WithSummarizer(sum))
	_, rec2, _ := compactForce(context.Background(), c2, msgs)
	if rec2.Tier != compaction.TierEmergency || sum.calls != 0 {
		t.Fatal("Force did not take the emergency path")
	}
}

// Spec 6.1, row by row.
func TestFailOpenOffloadWrite(t *testing.T) {
	msgs := fixture()
	c, st := newTestCompactor(t, windowFor(msgs, 0.65))
	st.FailPut(errors.New("disk full"))
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if out[3].Content != msgs[3].Content || !strings.Contains(rec.Error, "offload c3: disk full") || len(rec.Offloaded) != 0 {
		t.Fatalf("error %q", rec.Error)
	}
}

func TestFailOpenMemoryExtractorIsSilent(t *testing.T) {
	msgs := fixture()
	c, _ := newTestCompactor(t, windowFor(msgs, 0.85), compaction.WithSummarizer(&recordingSummarizer{output: goodSummary}),
		compaction.WithMemoryExtractor(compaction.MemoryExtractorFunc(func(context.Context, string, []compaction.Message) error { return errors.New("ltm down") })),
		compaction.WithTodoInjector(compaction.TodoInjectorFunc(func(context.Context, string) (string, error) { return "", errors.New("todo down") })))
	_, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil || rec.Error != "" || rec.Summarized == 0 {
		t.Fatalf("err %v record error %q", err, rec.Error)
	}
}

func TestFailOpenSummarizerFallsBack(t *testing.T) {
	msgs := fixture()
	for name, sum := range map[string]*recordingSummarizer{
		"error":   {err: errors.New("503 from model")},
		"garbage": {output: "   "},
	} {
		t.Run(name, func(t *testing.T) {
			c, st := newTestCompactor(t, windowFor(msgs, 0.85), compaction.WithSummarizer(sum))
			out, rec, err := c.CompactWithRecord(context.Background(), msgs)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(rec.Error, "summarizer recording failed") || !strings.Contains(rec.Error, "fell back") {
				t.Fatalf("record error %q", rec.Error)
			}
			if rec.TokensAfter > int(float64(windowFor(msgs, 0.85))*0.60) || compaction.HasOrphans(out) || out[0].Role != compaction.RoleSystem {
				t.Fatalf("fallback view: %d tokens %v", rec.TokensAfter, ids(out))
			}
			if state := stateJSON(t, st); state != nil && strings.Contains(string(state), "lastSummary\":\"W") {
				t.Fatal("state updated after a failed summary")
			}
		})
	}
}

func TestFailOpenAnchorParse(t *testing.T) {
	msgs := fixture()
	c, _ := newTestCompactor(t, windowFor(msgs, 0.85), compaction.WithSummarizer(&recordingSummarizer{output: "user_intent: fix it\n## Summary\nprose"}))
	_, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Anchors) != 5 || !strings.Contains(rec.Error, "missing execution_progress") || rec.Summarized == 0 {
		t.Fatalf("anchors %v error %q", rec.Anchors, rec.Error)
	}
}

func TestFailOpenRecordStore(t *testing.T) {
	msgs := fixture()
	c, st := newTestCompactor(t, windowFor(msgs, 0.85))
	st.FailAppend(errors.New("bucket gone"))
	_, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil || rec.Error != "" || rec.Tier != compaction.TierFull {
		t.Fatalf("err %v record error %q", err, rec.Error)
	}
}

func TestStateLoadFailureNeverOverwritesState(t *testing.T) {
	msgs := fixture()
	c, st := newTestCompactor(t, windowFor(msgs, 0.85))
	st.FailLoad(errors.New("timeout"))
	_, rec, _ := c.CompactWithRecord(context.Background(), msgs)
	if !strings.Contains(rec.Error, "state load: timeout") || st.Saves() != 0 {
		t.Fatalf("error %q, states %d", rec.Error, st.Saves())
	}
}

func TestIncrementalStateSurvivesRestart(t *testing.T) {
	msgs := fixture()
	st := newStore()
	sum := &recordingSummarizer{output: goodSummary}
	cfg := compaction.DefaultConfig(windowFor(msgs, 0.85))
	c1, _ := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(st), compaction.WithSessionID("s1"), compaction.WithSummarizer(sum))
	_, rec1, err := c1.CompactWithRecord(context.Background(), msgs)
	if err != nil || rec1.WatermarkAfter != 11 {
		t.Fatalf("first compaction: %v, watermark %d", err, rec1.WatermarkAfter)
	}
	puts := st.Puts()
	// The agent goes on; a new compactor (a restarted process or another replica) continues
	// from storage.
	grown := append([]compaction.Message(nil), msgs...)
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("n%d", i)
		grown = append(grown, call("step", id), result(id, strings.Repeat("more output\n", 150)))
	}
	// A probe with a huge window is TierNone (no side effects) and shows the derived view.
	probe, _ := compaction.NewProgressiveCompactor(compaction.DefaultConfig(1<<30), compaction.WithStore(st), compaction.WithSessionID("s1"))
	view, _, _ := probe.CompactWithRecord(context.Background(), grown)
	if len(view) != 1+2+1+len(grown)-11 || !strings.HasPrefix(view[3].Content, compaction.CompactionHeader) {
		t.Fatalf("derived view %v", ids(view)[:3])
	}
	c2, _ := compaction.NewProgressiveCompactor(compaction.DefaultConfig(windowFor(view, 0.85)), compaction.WithStore(st), compaction.WithSessionID("s1"), compaction.WithSummarizer(sum))
	sum.output = "## Anchors\n- user_intent: N/A\n- execution_progress: tests pass\n- key_decision: N/A\n- tried_solution: N/A\n- next_step: open PR\n## Summary\nMore."
	_, rec, err := c2.CompactWithRecord(context.Background(), grown)
	if err != nil {
		t.Fatal(err)
	}
	if rec.WatermarkBefore != 11 || rec.WatermarkAfter <= 11 || rec.Tier != compaction.TierFull {
		t.Fatalf("watermark %d -> %d, tier %s", rec.WatermarkBefore, rec.WatermarkAfter, rec.Tier)
	}
	if sum.last.PreviousSummary != "Worked on parser.go." || compaction.CountAvailable(sum.last.PreviousAnchors) != 5 {
		t.Fatalf("previous state not fed to the summarizer: %q", sum.last.PreviousSummary)
	}
	if sum.last.Messages[0].Content != "Done." && sum.last.Messages[0].ToolCalls == nil {
		t.Fatalf("summarizer input starts at %v, want the first message after the watermark", ids(sum.last.Messages[:1]))
	}
	m := anchorMap(rec.Anchors)
	// The union merge keeps the older progress item beside the new one; next_step is replaced.
	if m[compaction.AnchorUserIntent] != "fix parser" || !strings.Contains(m[compaction.AnchorExecutionProgress], "tests pass") || m[compaction.AnchorNextStep] != "open PR" {
		t.Fatalf("merged anchors %v", m)
	}
	if st.Puts() != puts+0 && st.PutsByID()["c1"] > 1 {
		t.Fatal("offloads were written again after a restart")
	}
}

func TestInvalidHistoryChangesNothing(t *testing.T) {
	c, st := newTestCompactor(t, 10)
	bad := []compaction.Message{sys("s"), result("nope", strings.Repeat("x", 9000))}
	if _, _, err := c.CompactWithRecord(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "orphaned tool result") {
		t.Fatalf("err %v", err)
	}
	if st.Puts()+st.Appends()+st.Saves() != 0 {
		t.Fatal("invalid input had side effects")
	}
}

func TestExtractiveSummarizerEndToEnd(t *testing.T) {
	msgs := fixture()
	c, _ := newTestCompactor(t, windowFor(msgs, 0.85))
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil || rec.Error != "" {
		t.Fatalf("err %v record error %q", err, rec.Error)
	}
	m := anchorMap(rec.Anchors)
	if m[compaction.AnchorUserIntent] != "Fix the failing parser test." {
		t.Fatalf("intent %q", m[compaction.AnchorUserIntent])
	}
	if !strings.Contains(m[compaction.AnchorKeyDecision], "stack instead of a regex") || !strings.Contains(m[compaction.AnchorTriedSolution], "FAILED test_parse") {
		t.Fatalf("anchors %q", m)
	}
	if !strings.Contains(m[compaction.AnchorExecutionProgress], "bash x4") {
		t.Fatalf("progress %q", m[compaction.AnchorExecutionProgress])
	}
	if compaction.EstimateTokens(out) >= compaction.EstimateTokens(msgs) {
		t.Fatal("no compression")
	}
	// Deterministic.
	c2, _ := newTestCompactor(t, windowFor(msgs, 0.85))
	_, rec2, _ := c2.CompactWithRecord(context.Background(), msgs)
	if rec2.SummaryText != rec.SummaryText {
		t.Fatal("extractive summary is not deterministic")
	}
}
