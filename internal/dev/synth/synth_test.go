package synth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

var optionSets = []Options{
	{},
	{ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true, BigResultEvery: 7},
	{ParallelCalls: true, BigResultEvery: 3},
	{UserInterjections: true, TextOnlyTurns: true, AvgBytes: 600},
	{ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true, BigResultEvery: 1, AvgBytes: 8000},
}

// checkStructure is stricter than compaction.Validate: tool results come right after the
// assistant message that made the calls, in call order, and the story has its frame.
func checkStructure(t *testing.T, name string, msgs []compaction.Message) {
	t.Helper()
	if err := compaction.Validate(msgs); err != nil {
		t.Fatalf("%s: Validate: %v", name, err)
	}
	if len(msgs) < 5 {
		t.Fatalf("%s: %d messages, want at least 5", name, len(msgs))
	}
	if msgs[0].Role != compaction.RoleSystem || msgs[1].Role != compaction.RoleUser {
		t.Fatalf("%s: history must start with system, user; got %s, %s", name, msgs[0].Role, msgs[1].Role)
	}
	last := msgs[len(msgs)-1]
	if last.Role != compaction.RoleAssistant || len(last.ToolCalls) != 0 || last.Content == "" {
		t.Fatalf("%s: history must end with a final answer, got %+v", name, last)
	}
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == compaction.RoleTool {
			t.Fatalf("%s: message %d: tool result not directly after its assistant turn", name, i)
		}
		for j, tc := range m.ToolCalls {
			if !json.Valid([]byte(tc.Function.Arguments)) {
				t.Fatalf("%s: message %d call %d: arguments are not JSON: %s", name, i, j, tc.Function.Arguments)
			}
			if tc.Type != "function" || tc.Function.Name == "" {
				t.Fatalf("%s: message %d call %d: bad call %+v", name, i, j, tc)
			}
			k := i + 1 + j
			if k >= len(msgs) || msgs[k].Role != compaction.RoleTool || msgs[k].ToolCallID != tc.ID {
				t.Fatalf("%s: message %d call %d (%s): result is not at index %d", name, i, j, tc.ID, k)
			}
			if msgs[k].Content == "" {
				t.Fatalf("%s: message %d: empty tool result", name, k)
			}
		}
		i += len(m.ToolCalls)
	}
}

func TestValidForManySeedsAndSizes(t *testing.T) {
	sizes := []int{0, 1, 5, 9, 24, 40, 150}
	for oi, base := range optionSets {
		for seed := int64(0); seed < 20; seed++ {
			for _, n := range sizes {
				o := base
				o.Seed, o.Messages = seed, n
				checkStructure(t, fmt.Sprintf("opts%d/seed%d/n%d", oi, seed, n), Generate(o))
			}
		}
		for seed := int64(0); seed < 2; seed++ {
			o := base
			o.Seed, o.Messages = seed*7919+1, 1200
			checkStructure(t, fmt.Sprintf("opts%d/seed%d/n1200", oi, o.Seed), Generate(o))
		}
	}
}

func TestDeterministic(t *testing.T) {
	for _, base := range optionSets {
		o := base
		o.Seed, o.Messages = 42, 300
		a, b := Generate(o), Generate(o)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("same options gave different histories: %+v", o)
		}
		var ja, jb bytes.Buffer
		if err := compaction.EncodeJSONL(&ja, a); err != nil {
			t.Fatal(err)
		}
		if err := compaction.EncodeJSONL(&jb, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ja.Bytes(), jb.Bytes()) {
			t.Fatal("same options gave different JSONL")
		}
		o.Seed = 43
		if reflect.DeepEqual(a, Generate(o)) {
			t.Fatalf("seeds 42 and 43 gave the same history")
		}
	}
}

func TestMessageCount(t *testing.T) {
	for _, n := range []int{5, 12, 40, 100, 400, 1000} {
		for seed := int64(0); seed < 10; seed++ {
			got := len(Generate(Options{Seed: seed, Messages: n, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true, BigResultEvery: 10}))
			if got < n || got > n+5 {
				t.Errorf("seed %d: Messages %d gave %d messages, want %d..%d", seed, n, got, n, n+5)
			}
		}
	}
	if got := len(Generate(Options{Seed: 1})); got < DefaultMessages || got > DefaultMessages+5 {
		t.Errorf("default gave %d messages, want about %d", got, DefaultMessages)
	}
}

func TestSizeTargets(t *testing.T) {
	cases := []Options{
		{Messages: 1000, AvgBytes: 2000, BigResultEvery: 10, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true},
		{Messages: 1000, AvgBytes: 2000},
		{Messages: 400, AvgBytes: 1200, BigResultEvery: 0, ParallelCalls: true},
		{Messages: 300, AvgBytes: 4000, BigResultEvery: 6},
		{Messages: 10000, AvgBytes: 2000, BigResultEvery: 10, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true},
	}
	for _, o := range cases {
		seeds := int64(3)
		if o.Messages > 5000 {
			seeds = 1
		}
		for seed := int64(1); seed <= seeds; seed++ {
			o.Seed = seed
			msgs := Generate(o)
			avg := float64(Bytes(msgs)) / float64(len(msgs))
			if avg < 0.8*float64(o.AvgBytes) || avg > 1.2*float64(o.AvgBytes) {
				t.Errorf("%+v: average %.0f bytes, want %d +-20%%", o, avg, o.AvgBytes)
			}
		}
	}
	// The default average is about 2 KB.
	msgs := Generate(Options{Seed: 9, Messages: 500})
	if avg := Bytes(msgs) / len(msgs); avg < 1600 || avg > 2400 {
		t.Errorf("default average %d bytes, want about %d", avg, DefaultAvgBytes)
	}
}

func TestBigResults(t *testing.T) {
	for _, every := range []int{1, 3, 10} {
		for seed := int64(0); seed < 5; seed++ {
			msgs := Generate(Options{Seed: seed, Messages: 300, BigResultEvery: every, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true})
			n := 0
			for i, m := range msgs {
				if m.Role != compaction.RoleTool {
					continue
				}
				n++
				if n%every == 0 && (len(m.Content) < MinBigResultBytes || len(m.Content) > MaxBigResultBytes) {
					t.Fatalf("every=%d seed=%d: tool result #%d (message %d) is %d bytes, want %d..%d", every, seed, n, i, len(m.Content), MinBigResultBytes, MaxBigResultBytes)
				}
			}
			if n < 2*every {
				t.Fatalf("every=%d: only %d tool results", every, n)
			}
		}
	}
	// Without BigResultEvery, no result is that large... at most a handful of long ones.
	msgs := Generate(Options{Seed: 3, Messages: 400})
	for i, m := range msgs {
		if len(m.Content) > 30000 {
			t.Fatalf("message %d is %d bytes with BigResultEvery=0", i, len(m.Content))
		}
	}
}

func countShapes(msgs []compaction.Message) (parallel, interjections, textOnly int) {
	for i, m := range msgs {
		switch {
		case len(m.ToolCalls) > 1:
			parallel++
		case m.Role == compaction.RoleUser && i > 1 && msgs[i-1].Role == compaction.RoleTool:
			interjections++
		case m.Role == compaction.RoleAssistant && len(m.ToolCalls) == 0 && i < len(msgs)-1:
			textOnly++
		}
	}
	return
}

func TestOptionsShapeTheHistory(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		on := Generate(Options{Seed: seed, Messages: 120, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true})
		p, u, x := countShapes(on)
		if p == 0 || u == 0 || x == 0 {
			t.Errorf("seed %d, all on: parallel=%d interjections=%d text-only=%d, want all > 0", seed, p, u, x)
		}
		off := Generate(Options{Seed: seed, Messages: 120})
		p, u, x = countShapes(off)
		if p != 0 || u != 0 || x != 0 {
			t.Errorf("seed %d, all off: parallel=%d interjections=%d text-only=%d, want 0", seed, p, u, x)
		}
		for i, m := range off {
			if i > 1 && m.Role == compaction.RoleUser {
				t.Errorf("seed %d: user message %d with interjections and text-only turns off", seed, i)
			}
		}
		// Parallel results are answered by consecutive tool messages (checkStructure).
		checkStructure(t, "parallel", on)
	}
}

func TestReadsLikeACodingAgent(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		msgs := Generate(Options{Seed: seed, Messages: 80, ParallelCalls: seed%2 == 0})
		var all strings.Builder
		cmds := map[string]bool{}
		for _, m := range msgs {
			all.WriteString(m.Content)
			all.WriteByte('\n')
			for _, tc := range m.ToolCalls {
				var a struct{ Command string }
				_ = json.Unmarshal([]byte(tc.Function.Arguments), &a)
				cmds[tc.Function.Name+":"+strings.Fields(a.Command + " x")[0]] = true
			}
		}
		text := all.String()
		for _, want := range []string{"FAILED", "\nE       ", " passed in ", "I'll", " instead", "def ", "Root cause", "root cause"} {
			if !strings.Contains(text, want) && (want != "Root cause" || !strings.Contains(text, "ran out of steps")) {
				t.Errorf("seed %d: history never mentions %q", seed, want)
			}
		}
		for _, want := range []string{"bash:grep", "bash:python", "str_replace_editor:str_replace"} {
			if !cmds[want] {
				t.Errorf("seed %d: no %s call (calls: %v)", seed, want, cmds)
			}
		}
	}
}

func TestJSONLRoundTrip(t *testing.T) {
	msgs := Generate(Options{Seed: 5, Messages: 200, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true, BigResultEvery: 8})
	var buf bytes.Buffer
	if err := compaction.EncodeJSONL(&buf, msgs); err != nil {
		t.Fatal(err)
	}
	back, err := compaction.DecodeTranscript(&buf, compaction.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(msgs, back) {
		t.Fatal("JSONL round trip changed the history")
	}
}

func TestCompactsAtEveryTier(t *testing.T) {
	msgs := Generate(Options{Seed: 11, Messages: 150, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true, BigResultEvery: 6})
	tokens := compaction.EstimateTokens(msgs)
	for tier, usage := range map[compaction.Tier]float64{compaction.TierNone: 0.3, compaction.TierWarn: 0.65, compaction.TierSoft: 0.75, compaction.TierFull: 0.9, compaction.TierEmergency: 0.97} {
		cfg := compaction.DefaultConfig(int(float64(tokens) / usage))
		c, err := compaction.NewProgressiveCompactor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, rec, err := c.CompactWithRecord(t.Context(), msgs)
		if err != nil {
			t.Fatal(err)
		}
		// The usage selects the tier; a Soft whose half of the head cannot reach the target
		// runs as Full in the same turn.
		selected := cfg.DetermineTier(rec.TokensBefore)
		if selected != tier || (rec.Tier != tier && (tier != compaction.TierSoft || rec.Tier != compaction.TierFull)) {
			t.Fatalf("usage %.2f: tier %s (selected %s), want %s", usage, rec.Tier, selected, tier)
		}
		if err := compaction.Validate(out); err != nil {
			t.Fatalf("tier %s: compacted view invalid: %v", tier, err)
		}
		if tier >= compaction.TierSoft && rec.Summarized == 0 && tier != compaction.TierEmergency {
			t.Fatalf("tier %s summarized nothing: %+v", tier, rec)
		}
	}
}

// Every fact GenerateWithFacts reports is planted: its text is in a message before the final
// answer (where a compacted view can hold it), IDs are unique, and the history is Generate's.
func TestFactsArePlanted(t *testing.T) {
	categories := map[string]bool{FactTask: true, FactConstraint: true, FactArtifact: true, FactDecision: true, FactError: true, FactNext: true}
	seen := map[string]int{}
	for oi, base := range optionSets {
		for seed := int64(0); seed < 12; seed++ {
			for _, n := range []int{5, 24, 60, 200} {
				o := base
				o.Seed, o.Messages = seed, n
				name := fmt.Sprintf("opts%d/seed%d/n%d", oi, seed, n)
				msgs, facts := GenerateWithFacts(o)
				if !reflect.DeepEqual(msgs, Generate(o)) {
					t.Fatalf("%s: GenerateWithFacts and Generate differ", name)
				}
				before := msgs[:len(msgs)-1] // the final answer is after the last turn
				ids := map[string]bool{}
				for _, f := range facts {
					if ids[f.ID] || f.ID == "" {
						t.Fatalf("%s: fact ID %q empty or repeated", name, f.ID)
					}
					ids[f.ID] = true
					if !categories[f.Category] {
						t.Fatalf("%s: fact %s has category %q", name, f.ID, f.Category)
					}
					if strings.TrimSpace(f.Text) == "" || !historyShows(before, f.Text) {
						t.Fatalf("%s: fact %s (%s) %q is not in the history before the final answer", name, f.ID, f.Category, f.Text)
					}
					seen[f.Category]++
				}
				if !ids["task"] || !ids["task-constraint"] {
					t.Fatalf("%s: no task or task constraint among %+v", name, facts)
				}
				if n >= 60 && (!ids["state"] || countCategory(facts, FactArtifact) == 0) {
					t.Errorf("%s: %d messages and no state or edited file among %+v", name, len(msgs), facts)
				}
			}
		}
	}
	// Seed 21 cuts the log of the wrong fix's test run to the big-result limit, losing the
	// failure: it must not be planted.
	msgs, facts := GenerateWithFacts(Options{Seed: 21, Messages: 200, BigResultEvery: 10, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true})
	for _, f := range facts {
		if !historyShows(msgs[:len(msgs)-1], f.Text) {
			t.Errorf("seed 21: fact %s %q is not in the history", f.ID, f.Text)
		}
	}
	// Over all those histories every kind of fact shows up, interjections included.
	for c := range categories {
		if seen[c] == 0 {
			t.Errorf("no %s fact in any generated history (%v)", c, seen)
		}
	}
	if seen[FactConstraint] <= seen[FactTask] {
		t.Errorf("%d constraints for %d tasks: no interjection was planted as a constraint", seen[FactConstraint], seen[FactTask])
	}
}

// The facts name what the story is about: the wrong fix's failure, the change of approach
// and the edited module are those of the bug the history fixes first.
func TestFactsNameTheFirstBug(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		msgs, facts := GenerateWithFacts(Options{Seed: seed, Messages: 80})
		byID := map[string]Fact{}
		for _, f := range facts {
			byID[f.ID] = f
		}
		var decision Fact
		for _, f := range facts {
			if f.Category == FactDecision && strings.HasPrefix(f.ID, "instead-") && f.ID != "instead-python-m-pytest" {
				decision = f
				break
			}
		}
		if decision.ID == "" {
			continue // this seed's first fix was right away the good one
		}
		fn := strings.TrimPrefix(decision.ID, "instead-")
		if _, ok := byID["wrong-fix-error-"+fn]; !ok {
			t.Errorf("seed %d: a change of approach for %s without the failure that caused it: %+v", seed, fn, facts)
		}
		// The decision is stated by the assistant, right after the failing run.
		found := false
		for _, m := range msgs {
			if m.Role == compaction.RoleAssistant && strings.Contains(m.Content, decision.Text) && strings.Contains(m.Content, "That didn't work") {
				found = true
			}
		}
		if !found {
			t.Errorf("seed %d: no assistant message says %q after a failed fix", seed, decision.Text)
		}
	}
}

func historyShows(msgs []compaction.Message, text string) bool {
	for _, m := range msgs {
		if strings.Contains(m.Content, text) {
			return true
		}
		for _, tc := range m.ToolCalls {
			if strings.Contains(tc.Function.Name, text) || strings.Contains(tc.Function.Arguments, text) {
				return true
			}
		}
	}
	return false
}

func countCategory(facts []Fact, category string) int {
	n := 0
	for _, f := range facts {
		if f.Category == category {
			n++
		}
	}
	return n
}
