package compaction_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
)

// withNullContent is m as a client sends it with an explicit "content": null.
func withNullContent(t *testing.T, m compaction.Message) compaction.Message {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	fields["content"] = nil
	if b, err = json.Marshal(fields); err != nil {
		t.Fatal(err)
	}
	var out compaction.Message
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if b, err := json.Marshal(out); err != nil || !bytes.Contains(b, []byte(`"content":null`)) {
		t.Fatalf("%s does not keep its null content (%v)", b, err)
	}
	return out
}

// TestForcedCompactionWithPendingCallKeepsSessionUsable is the regression test of issue 12's
// first finding: a forced compaction whose kept tail ends with an assistant message whose
// tool call has no result yet (content null) moved the watermark one message too far, and
// every later turn failed with "orphaned tool result".
func TestForcedCompactionWithPendingCallKeepsSessionUsable(t *testing.T) {
	ctx := context.Background()
	msgs := []compaction.Message{sys("You are a coding agent."), user("Fix the failing test.")}
	for i := 1; i <= 8; i++ {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs, call("", id), result(id, strings.Repeat("y", 959)+"\n"))
	}
	pending := withNullContent(t, call("", "pending"))
	msgs = append(msgs, pending)

	st := newStore()
	c, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(128000), compaction.WithStore(st), compaction.WithSessionID("s"))
	if err != nil {
		t.Fatal(err)
	}
	view, rec, err := compactForce(ctx, c, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if rec.WatermarkAfter != 12 {
		t.Fatalf("watermark %d, want 12 (the cut lands on c6's call; the pending call is kept)", rec.WatermarkAfter)
	}
	assertProviderValid(t, view)
	last := view[len(view)-1]
	if last.Role != compaction.RoleTool || last.ToolCallID != "pending" || last.Content != compaction.InterruptedResult {
		t.Fatalf("the pending call must be closed by a synthetic result in the view, got %v", ids(view))
	}
	if len(msgs[18].ToolCalls) != 1 || len(msgs) != 19 {
		t.Fatal("the history was modified")
	}

	// The pending result arrives, the agent answers, and the next turn works (it failed with
	// "orphaned tool result" on every later turn).
	grown := append(append([]compaction.Message(nil), msgs...), result("pending", "done"), asst("ok"))
	for i := 0; i < 3; i++ {
		view, _, err := c.CompactWithRecord(ctx, grown)
		if err != nil {
			t.Fatalf("turn after the forced compaction: %v", err)
		}
		assertProviderValid(t, view)
		grown = append(grown, user("next"), asst("ok"))
	}
	// And from a fresh compactor on the same store (a restarted manager).
	c2, _ := compaction.NewProgressiveCompactor(compaction.DefaultConfig(128000), compaction.WithStore(st), compaction.WithSessionID("s"))
	if _, _, err := c2.CompactWithRecord(ctx, grown); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}

// TestUnansweredCallsClosedInEveryTier: a history with an interrupted tool call (no result,
// the user spoke next) and one whose result has not come yet gets a view providers accept in
// every tier, and the history itself is never changed.
func TestUnansweredCallsClosedInEveryTier(t *testing.T) {
	ctx := context.Background()
	msgs := []compaction.Message{sys("s"), user("task"), call("", "a"), result("a", strings.Repeat("out\n", 300)),
		call("", "lost1", "lost2"), result("lost2", "half"), user("the pod restarted, go on"),
		call("", "b"), result("b", strings.Repeat("more\n", 300)), asst("thinking"), user("ok"), call("", "now")}
	before := snapshot(t, msgs)
	for _, usage := range []float64{0.3, 0.65, 0.75, 0.85, 0.97} {
		c, _ := compaction.NewProgressiveCompactor(compaction.Config{ContextWindow: windowFor(msgs, usage), MinTailMessages: 2}, compaction.WithStore(newStore()), compaction.WithSessionID("s"))
		view, rec, err := c.CompactWithRecord(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		assertProviderValid(t, view)
		if last := view[len(view)-1]; last.ToolCallID != "now" || last.Content != compaction.InterruptedResult {
			t.Fatalf("tier %s: the open call is not closed: %v", rec.Tier, ids(view))
		}
	}
	if string(before) != string(snapshot(t, msgs)) {
		t.Fatal("the history was modified")
	}
}

// TestLateResultAfterWatermark: a call whose result comes after the watermark passed the
// call (an async tool answered after other messages) is accepted, shown as a user message,
// and never breaks the session; a result for a call nobody made is still rejected.
func TestLateResultAfterWatermark(t *testing.T) {
	ctx := context.Background()
	msgs := []compaction.Message{sys("s"), user("task"), call("", "slow"), user("meanwhile, also fix the docs")}
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs, call("", id), result(id, strings.Repeat("z", 500)))
	}
	c, _ := compaction.NewProgressiveCompactor(compaction.Config{ContextWindow: 100000, MinTailMessages: 4}, compaction.WithStore(newStore()), compaction.WithSessionID("s"))
	_, rec, err := compactForce(ctx, c, msgs)
	if err != nil || rec.WatermarkAfter <= 2 {
		t.Fatalf("forced compaction: %v, watermark %d", err, rec.WatermarkAfter)
	}
	grown := append(append([]compaction.Message(nil), msgs...), result("slow", "the slow result"))
	view, _, err := c.CompactWithRecord(ctx, grown)
	if err != nil {
		t.Fatalf("late result rejected: %v", err)
	}
	assertProviderValid(t, view)
	if last := view[len(view)-1]; last.Role != compaction.RoleUser || !strings.Contains(last.Content, "the slow result") {
		t.Fatalf("late result not shown as a user message: %v", ids(view))
	}
	_, _, err = c.CompactWithRecord(ctx, append(grown, result("nobody", "x")))
	var ve *compaction.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "orphaned tool result") {
		t.Fatalf("a result for a call never made: %v", err)
	}
}

// TestChainedTurnsNeverBreak is the session property of issue 12: over generated histories
// replayed turn by turn (the agent appends, never rewrites), with forced compactions
// anywhere, parallel, interrupted and late tool calls, summarizer and storage failures,
// delta and full requests and restarts of the compactor, every turn answers a view a
// provider accepts, the watermark only passes what a summary covers, and the task stays
// verbatim in every view once it is pinned.
func TestChainedTurnsNeverBreak(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 15
	}
	stats := map[compaction.Tier]int{}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		runChainedSession(t, seed, stats)
	}
	for tier := compaction.TierWarn; tier <= compaction.TierEmergency; tier++ {
		if stats[tier] == 0 {
			t.Errorf("no turn reached tier %s: %v", tier, stats)
		}
	}
	t.Logf("tiers over all turns: %v", stats)
}

func runChainedSession(t *testing.T, seed uint64, stats map[compaction.Tier]int) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, seed*31))
	full := genSession(r, 60+r.IntN(120))
	cfg := compaction.DefaultConfig(compaction.EstimateTokens(full) / (4 + r.IntN(8)))
	cfg.MinTailMessages = 1 + r.IntN(8)
	cfg.OffloadThreshold = 1000 + r.IntN(6000)
	store := &flakyStore{Store: newStore(), r: r}
	sum := &flakySummarizer{r: r}
	newCompactor := func() *compaction.ProgressiveCompactor {
		c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(store), compaction.WithSessionID("chain"), compaction.WithSummarizer(sum))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newCompactor()
	task := full[1].Content
	var last *compaction.CompactionRecord
	for i := 2; i < len(full); i++ {
		if full[i].Role != compaction.RoleAssistant {
			continue
		}
		history := full[:i:i]
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d turn at %d (window %d, tail %d): "+format, append([]any{seed, i, cfg.ContextWindow, cfg.MinTailMessages}, args...)...)
		}
		if r.IntN(25) == 0 {
			c = newCompactor() // the manager restarted, or another replica answers
		}
		store.setFailing(r.IntN(8) == 0)
		sum.failing = r.IntN(5) == 0
		force := r.IntN(20) == 0
		var view []compaction.Message
		var rec *compaction.CompactionRecord
		var err error
		if last != nil && last.WatermarkAfter > 0 && r.IntN(2) == 0 {
			d := compaction.Delta{Watermark: last.WatermarkAfter, PrefixHash: last.PrefixHash}
			body := slices.Concat(history[:compaction.SystemPrefixLen(history)], history[d.Watermark:])
			view, rec, err = compactDelta(ctx, c, d, body, force)
			if err != nil {
				// The documented answer to a delta the session cannot use: send it all.
				store.setFailing(false)
				view, rec, err = compactDelta(ctx, c, compaction.Delta{}, history, force)
			}
		} else {
			view, rec, err = compactDelta(ctx, c, compaction.Delta{}, history, force)
		}
		if err != nil {
			fail("%v", err)
		}
		stats[rec.Tier]++
		assertProviderValidf(fail, view)
		if view[0].Role != compaction.RoleSystem || view[0].Content != full[0].Content {
			fail("system message lost")
		}
		if rec.WatermarkAfter > rec.WatermarkBefore && (rec.Summarized == 0 || strings.TrimSpace(rec.SummaryText) == "") {
			fail("watermark moved %d -> %d past messages no summary covers", rec.WatermarkBefore, rec.WatermarkAfter)
		}
		if rec.WatermarkAfter > 1 && !containsContent(view, task) {
			fail("the task is not in the view after the watermark passed it (pinned %d)", rec.PinnedMessages)
		}
		if rec.WatermarkAfter > 1 && rec.PinnedHash == "" {
			fail("record without the pins' hash")
		}
		last = rec
	}
}

// assertProviderValid fails unless view is what OpenAI and Anthropic accept: valid, every
// tool call answered right after its assistant message, no orphaned result, no pin mark.
func assertProviderValid(t *testing.T, view []compaction.Message) {
	t.Helper()
	assertProviderValidf(func(format string, args ...any) { t.Helper(); t.Fatalf(format, args...) }, view)
}

func assertProviderValidf(fail func(string, ...any), view []compaction.Message) {
	if err := compaction.Validate(view); err != nil {
		fail("view invalid: %v (%v)", err, ids(view))
	}
	if compaction.HasOrphans(view) || !compaction.ViewClosed(view) {
		fail("view has an unanswered call or a misplaced result: %v", ids(view))
	}
}

func containsContent(view []compaction.Message, content string) bool {
	for i := range view {
		if view[i].Content == content {
			return true
		}
	}
	return false
}

// genSession is genHistory with what real sessions also do: interrupted tool calls (the
// next message is the user's), results that arrive after other messages, repeated harness
// reminders, and messages the agent marks pinned.
func genSession(r *rand.Rand, turns int) []compaction.Message {
	msgs := []compaction.Message{sys("You are a coding agent."), user("Fix the failing test in parser.go; keep the public API unchanged.")}
	id := 0
	next := func() string { id++; return fmt.Sprintf("call_%d", id) }
	var pendingLate []string
	for t := 0; t < turns; t++ {
		switch k := r.IntN(20); {
		case k < 11:
			n := 1
			if r.IntN(3) == 0 {
				n = 2 + r.IntN(3)
			}
			ids := make([]string, n)
			for i := range ids {
				ids[i] = next()
			}
			msgs = append(msgs, call(strings.Repeat("thinking ", r.IntN(40)), ids...))
			for _, cid := range ids {
				size := 50 + r.IntN(3000)
				if r.IntN(5) == 0 {
					size = 5000 + r.IntN(30000)
				}
				msgs = append(msgs, result(cid, lines(r, size)))
			}
		case k < 12: // interrupted: no result ever, or one that comes later
			cid := next()
			msgs = append(msgs, call("", cid), user("The tool run was interrupted; continue."))
			if r.IntN(2) == 0 {
				pendingLate = append(pendingLate, cid)
			}
		case k < 13 && len(pendingLate) > 0:
			msgs = append(msgs, result(pendingLate[0], "late output"))
			pendingLate = pendingLate[1:]
			msgs = append(msgs, asst("Noted the late output."))
		case k < 15:
			msgs = append(msgs, asst(strings.Repeat("I'll try another approach. ", 1+r.IntN(30))))
		case k < 16:
			m := user(fmt.Sprintf("Constraint %d: do not touch the lexer.", r.IntN(3)))
			m.Pinned = r.IntN(2) == 0
			msgs = append(msgs, m)
		default:
			msgs = append(msgs, user(strings.Repeat("please also check the docs ", 1+r.IntN(10))))
		}
	}
	return msgs
}

// flakyStore fails state loads and saves and offload writes while failing is set.
type flakyStore struct {
	*faultstore.Store
	mu      sync.Mutex // the offloader writes from several goroutines
	r       *rand.Rand
	failing bool
}

func (s *flakyStore) fail() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing && s.r.IntN(2) == 0
}

func (s *flakyStore) setFailing(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = v
}

var errInjected = errors.New("injected storage failure")

func (s *flakyStore) PutToolResult(ctx context.Context, sid, id, content string) (string, error) {
	if s.fail() {
		return "", errInjected
	}
	return s.Store.PutToolResult(ctx, sid, id, content)
}

func (s *flakyStore) LoadState(ctx context.Context, sid string) (*compaction.State, error) {
	if s.fail() {
		return nil, errInjected
	}
	return s.Store.LoadState(ctx, sid)
}

func (s *flakyStore) SaveState(ctx context.Context, sid string, st *compaction.State) error {
	if s.fail() {
		return errInjected
	}
	return s.Store.SaveState(ctx, sid, st)
}

// flakySummarizer is the extractive summarizer that fails while failing is set.
type flakySummarizer struct {
	r       *rand.Rand
	failing bool
}

func (s *flakySummarizer) Name() string { return "flaky" }

func (s *flakySummarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	if s.failing {
		return "", errors.New("injected summarizer failure")
	}
	return compaction.ExtractiveSummarizer{}.Summarize(ctx, req)
}
