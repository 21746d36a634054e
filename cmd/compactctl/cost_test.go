package main

import (
	"encoding/json"
	"flag"
	"math"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// text returns a string of n bytes: n/4 estimated tokens when n is a multiple of 4.
func text(tag string, n int) string {
	return (tag + strings.Repeat(".", n))[:n]
}

func TestSameMessageComparesWhatIsSent(t *testing.T) {
	base := compaction.Message{
		Role: compaction.RoleAssistant, Content: "reading the file", Name: "agent",
		ContentParts: json.RawMessage(`[{"type":"text","text":"x"}]`),
		ToolCalls: []compaction.ToolCall{{ID: "c1", Type: "function", Function: compaction.FunctionCall{Name: "bash", Arguments: `{"cmd":"ls"}`},
			Extra: map[string]json.RawMessage{"index": json.RawMessage(`0`)}}},
		Extra: map[string]json.RawMessage{"reasoning": json.RawMessage(`"because"`)},
	}
	clone := func() compaction.Message {
		m := base.Clone()
		m.ToolCalls = append([]compaction.ToolCall(nil), base.ToolCalls...)
		return m
	}
	if m := clone(); !sameMessage(&base, &m) {
		t.Fatal("a clone differs from its original")
	}
	// The local pin mark is never sent: it does not break the cache.
	if m := clone(); func() bool { m.Pinned = true; return !sameMessage(&base, &m) }() {
		t.Error("Pinned broke the equality")
	}
	for name, change := range map[string]func(*compaction.Message){
		"role":           func(m *compaction.Message) { m.Role = compaction.RoleUser },
		"content":        func(m *compaction.Message) { m.Content += " " },
		"content parts":  func(m *compaction.Message) { m.ContentParts = json.RawMessage(`[]`) },
		"tool call id":   func(m *compaction.Message) { m.ToolCalls[0].ID = "c2" },
		"tool call type": func(m *compaction.Message) { m.ToolCalls[0].Type = "custom" },
		"tool call name": func(m *compaction.Message) { m.ToolCalls[0].Function.Name = "sh" },
		"tool call args": func(m *compaction.Message) { m.ToolCalls[0].Function.Arguments = `{"cmd":"ls -l"}` },
		"tool call extra": func(m *compaction.Message) {
			m.ToolCalls[0].Extra = map[string]json.RawMessage{"index": json.RawMessage(`1`)}
		},
		"one more tool call": func(m *compaction.Message) { m.ToolCalls = append(m.ToolCalls, m.ToolCalls[0]) },
		"tool_call_id":       func(m *compaction.Message) { m.ToolCallID = "c1" },
		"name":               func(m *compaction.Message) { m.Name = "" },
		"extra value": func(m *compaction.Message) {
			m.Extra = map[string]json.RawMessage{"reasoning": json.RawMessage(`"why"`)}
		},
		"extra key": func(m *compaction.Message) {
			m.Extra = map[string]json.RawMessage{"other": json.RawMessage(`"because"`)}
		},
		"no extra": func(m *compaction.Message) { m.Extra = nil },
	} {
		m := clone()
		change(&m)
		if sameMessage(&base, &m) || sameMessage(&m, &base) {
			t.Errorf("%s: a changed message compares equal", name)
		}
	}
}

func TestCommonPrefix(t *testing.T) {
	m := func(role compaction.Role, s string) compaction.Message {
		return compaction.Message{Role: role, Content: s}
	}
	sys, task, a1, r1, a2 := m(compaction.RoleSystem, "sys"), m(compaction.RoleUser, "task"), m(compaction.RoleAssistant, "a1"),
		m(compaction.RoleTool, "r1"), m(compaction.RoleAssistant, "a2")
	for _, tc := range []struct {
		name              string
		view, prev, reply []compaction.Message
		want              int
	}{
		{"empty cache", []compaction.Message{sys, task}, nil, nil, 0},
		{"grown view", []compaction.Message{sys, task, a1, r1}, []compaction.Message{sys, task}, []compaction.Message{a1}, 3},
		{"reply differs", []compaction.Message{sys, task, a2}, []compaction.Message{sys, task}, []compaction.Message{a1}, 2},
		{"no reply", []compaction.Message{sys, task, a1}, []compaction.Message{sys, task}, nil, 2},
		{"first message differs", []compaction.Message{task, sys}, []compaction.Message{sys, task}, nil, 0},
		{"rewritten middle", []compaction.Message{sys, m(compaction.RoleUser, "summary"), r1}, []compaction.Message{sys, task, a1}, []compaction.Message{a2}, 1},
		{"shorter view", []compaction.Message{sys}, []compaction.Message{sys, task}, []compaction.Message{a1}, 1},
		{"equal to cache", []compaction.Message{sys, task, a1}, []compaction.Message{sys, task}, []compaction.Message{a1}, 3},
		{"reply only", []compaction.Message{a1, a2}, nil, []compaction.Message{a1, a2}, 2},
	} {
		if got := commonPrefix(tc.view, tc.prev, tc.reply); got != tc.want {
			t.Errorf("%s: common prefix %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestReplyAfter(t *testing.T) {
	a := compaction.Message{Role: compaction.RoleAssistant, Content: "a"}
	r := compaction.Message{Role: compaction.RoleTool, ToolCallID: "c", Content: "r"}
	u := compaction.Message{Role: compaction.RoleUser, Content: "u"}
	for _, tc := range []struct {
		in   []compaction.Message
		want int
	}{{nil, 0}, {[]compaction.Message{a}, 1}, {[]compaction.Message{a, r, a}, 1}, {[]compaction.Message{a, a, u}, 2}, {[]compaction.Message{u, a}, 0}} {
		if got := replyAfter(tc.in); len(got) != tc.want {
			t.Errorf("replyAfter(%v) = %d messages, want %d", tc.in, len(got), tc.want)
		}
	}
}

func TestPriceArithmetic(t *testing.T) {
	p := prices{Fresh: defaultPriceFresh, CacheRead: defaultPriceCacheRead, CacheWrite: defaultPriceCacheWrite}
	// 600 cached at 0.1 and 400 written at 1.25.
	if got := p.viewCost(1000, 600); math.Abs(got-560) > 1e-9 {
		t.Errorf("viewCost(1000, 600) = %v, want 560", got)
	}
	if got := p.viewCost(1000, 0); got != 1250 {
		t.Errorf("viewCost(1000, 0) = %v, want 1250", got)
	}
	if got := p.summarizerCost(300, 40); got != 340 {
		t.Errorf("summarizerCost(300, 40) = %v, want 340", got)
	}
	other := prices{Fresh: 3, CacheRead: 0.5, CacheWrite: 2}
	if got := other.viewCost(10, 4) + other.summarizerCost(1, 1); got != 0.5*4+2*6+3*2 {
		t.Errorf("other prices: %v", got)
	}
	if errs := p.check(); len(errs) != 0 {
		t.Errorf("default prices rejected: %v", errs)
	}
	for _, bad := range []prices{
		{Fresh: -1, CacheRead: 0.1, CacheWrite: 1.25},
		{Fresh: 1, CacheRead: math.NaN(), CacheWrite: 1.25},
		{Fresh: 1, CacheRead: 0.1, CacheWrite: math.Inf(1)},
		{Fresh: 1, CacheRead: 0.1, CacheWrite: 0},
	} {
		if errs := bad.check(); len(errs) == 0 {
			t.Errorf("prices %+v accepted", bad)
		}
	}
}

// TestCostTrackerHandComputed replays three turns by hand, every message a multiple of four
// bytes so the estimates are exact, and checks every figure against a hand computation.
func TestCostTrackerHandComputed(t *testing.T) {
	sys := compaction.Message{Role: compaction.RoleSystem, Content: text("sys", 400)}               // 100 tokens
	task := compaction.Message{Role: compaction.RoleUser, Content: text("task", 400)}               // 100
	a1 := compaction.Message{Role: compaction.RoleAssistant, Content: text("a1", 200)}              // 50
	r1 := compaction.Message{Role: compaction.RoleTool, ToolCallID: "c1", Content: text("r1", 800)} // 200
	a2 := compaction.Message{Role: compaction.RoleAssistant, Content: text("a2", 200)}              // 50
	r2 := compaction.Message{Role: compaction.RoleTool, ToolCallID: "c2", Content: text("r2", 800)} // 200
	summary := compaction.Message{Role: compaction.RoleUser, Content: text("summary", 80)}          // 20

	history := []compaction.Message{sys, task, a1, r1, a2, r2, {Role: compaction.RoleAssistant, Content: "a3.."}}
	tr := newCostTracker(prices{Fresh: 1, CacheRead: 0.1, CacheWrite: 1.25})

	// Turn 1: nothing cached.
	tc := tr.turn(history[:2], history[:2], &compaction.CompactionRecord{Tier: compaction.TierNone})
	if tc.InputTokens != 200 || tc.CachedTokens != 0 || tc.RawTokens != 200 || tc.RawCachedTokens != 0 || tc.Cost != 250 || tc.RawCost != 250 || tc.ChangedView {
		t.Fatalf("turn 1: %+v", tc)
	}
	// Turn 2, no compaction: the previous view and its reply a1 are cached (250 tokens), the
	// tool result r1 the agent added after the reply is not (the provider never saw it).
	tc = tr.turn(history[:4], history[:4], &compaction.CompactionRecord{Tier: compaction.TierWarn, TokensBefore: 450, TokensAfter: 450, MsgsBefore: 4, MsgsAfter: 4})
	if tc.InputTokens != 450 || tc.CachedTokens != 250 || tc.RawTokens != 450 || tc.RawCachedTokens != 250 || tc.ChangedView {
		t.Fatalf("turn 2: %+v; want 450 input, 250 cached (not 200: the reply is cached; not 450: the tool result is not)", tc)
	}
	if want := 0.1*250 + 1.25*200; tc.Cost != want {
		t.Errorf("turn 2: cost %v, want %v", tc.Cost, want)
	}
	// Turn 3: a compaction replaced the task, a1 and r1 by a summary; only the system
	// message stays cached. The raw history keeps its prefix: turn 2's view and a2.
	view := []compaction.Message{sys, summary, a2, r2}
	rec := &compaction.CompactionRecord{Tier: compaction.TierFull, TokensBefore: 700, TokensAfter: 370, MsgsBefore: 6, MsgsAfter: 4, Summarized: 3,
		SummarizerCalls: 1, SummarizerInputTokens: 300, SummarizerOutputTokens: 40}
	tc = tr.turn(view, history[:6], rec)
	if tc.InputTokens != 370 || tc.CachedTokens != 100 || tc.RawTokens != 700 || tc.RawCachedTokens != 500 || !tc.ChangedView ||
		tc.SummarizerCalls != 1 || tc.SummarizerInputTokens != 300 || tc.SummarizerOutputTokens != 40 {
		t.Fatalf("turn 3: %+v", tc)
	}
	if want := 0.1*100 + 1.25*270 + 340; math.Abs(tc.Cost-want) > 1e-9 {
		t.Errorf("turn 3: cost %v, want %v", tc.Cost, want)
	}

	got := tr.totals
	want := costTotals{
		Prices: got.Prices, InputTokens: 1020, CachedTokens: 350, PeakTokens: 450,
		RawInputTokens: 1350, RawCachedTokens: 750, RawPeakTokens: 700,
		SummarizerCalls: 1, SummarizerInputTokens: 300, SummarizerOutputTokens: 40,
		// 0.1*350 + 1.25*670 + 340 and 0.1*750 + 1.25*600.
		Cost: 1212.5, RawCost: 825,
	}
	want.CacheHit, want.RawCacheHit, want.CostVsRaw = 350.0/1020, 750.0/1350, 1212.5/825
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"cost", got.Cost, want.Cost}, {"raw cost", got.RawCost, want.RawCost}, {"cost vs raw", got.CostVsRaw, want.CostVsRaw},
		{"cache hit", got.CacheHit, want.CacheHit}, {"raw cache hit", got.RawCacheHit, want.RawCacheHit},
	} {
		if math.Abs(f.got-f.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
		}
	}
	got.Cost, got.RawCost, got.CostVsRaw, got.CacheHit, got.RawCacheHit = 0, 0, 0, 0, 0
	want.Cost, want.RawCost, want.CostVsRaw, want.CacheHit, want.RawCacheHit = 0, 0, 0, 0, 0
	if got != want {
		t.Errorf("totals\n got %+v\nwant %+v", got, want)
	}
	if s := costText(&tr.totals); !strings.Contains(s, "34.3% of 1.0K input tokens cached, raw history 55.6% of 1.4K") || !strings.Contains(s, "cost vs raw:      1.47") {
		t.Errorf("cost text:\n%s", s)
	}
}

// The same views as the raw history give exactly the raw figures: cost vs raw 1.
func TestCostTrackerUncompactedIsRaw(t *testing.T) {
	msgs := genTranscript(genOptions{rounds: 30, resultLen: 1001})
	tr := newCostTracker(prices{Fresh: 1, CacheRead: 0.1, CacheWrite: 1.25})
	for i := range msgs {
		if msgs[i].Role == compaction.RoleAssistant && i > 1 {
			tr.turn(msgs[:i:i], msgs[:i:i], &compaction.CompactionRecord{})
		}
	}
	s := tr.totals
	if s.InputTokens != s.RawInputTokens || s.CachedTokens != s.RawCachedTokens || s.CostVsRaw != 1 || s.CacheHit != s.RawCacheHit || s.CacheHit <= 0.5 {
		t.Fatalf("uncompacted views: %+v", s)
	}
	if tr2 := newCostTracker(s.Prices); tr2.totals.CostVsRaw != 0 || costText(&tr2.totals) != "  prompt cache:     n/a (no turn)\n" {
		t.Errorf("no turn: %+v", tr2.totals)
	}
}

func TestPriceFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	p := addPriceFlags(fs)
	if *p != (prices{Fresh: 1, CacheRead: 0.1, CacheWrite: 1.25}) {
		t.Fatalf("defaults %+v", *p)
	}
	if err := fs.Parse([]string{"--price-fresh", "3", "--price-cache-read", "0.3", "--price-cache-write", "3.75"}); err != nil {
		t.Fatal(err)
	}
	if *p != (prices{Fresh: 3, CacheRead: 0.3, CacheWrite: 3.75}) {
		t.Fatalf("parsed %+v", *p)
	}
}
