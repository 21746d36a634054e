package compaction

import (
	"fmt"
	"strings"
	"testing"
)

func anchorMap(as []Anchor) map[AnchorType]string {
	m := map[AnchorType]string{}
	for _, a := range as {
		m[a.Type] = a.Content
	}
	return m
}

// The forms SummaryInstructions asks for, and the variants of them models write.
func TestParseAnchorsFormats(t *testing.T) {
	cases := map[string]string{
		"documented":     "## Anchors\n- user_intent: fix the parser\n- execution_progress: reproduced\n- key_decision: use a stack\n- tried_solution: regex failed\n- next_step: run tests\n\n## Summary\nWe looked at parser.go.",
		"bullet lists":   "## Anchors\n- user_intent:\n  - fix the parser\n- execution_progress:\n  - reproduced\n- key_decision:\n  - use a stack\n- tried_solution:\n  - regex failed\n- next_step:\n  - run tests\n\n## Summary\nWe looked at parser.go.",
		"bold names":     "## Anchors\n- **user_intent**: fix the parser\n- **execution_progress**: reproduced\n**key_decision:** use a stack\n* **tried_solution**: regex failed\n**next_step**: run tests\n\n**Summary**\nWe looked at parser.go.",
		"no bullets":     "USER_INTENT: fix the parser\nEXECUTION_PROGRESS: reproduced\nKEY_DECISION: use a stack\nTRIED_SOLUTION: regex failed\nNEXT_STEP: run tests\n\nSummary: We looked at parser.go.",
		"name headings":  "## user_intent\nfix the parser\n## execution_progress\nreproduced\n## key_decision\nuse a stack\n## tried_solution\nregex failed\n## next_step\nrun tests\n# Summary\nWe looked at parser.go.",
		"fenced reply":   "```markdown\n## Anchors\n- user_intent: fix the parser\n- execution_progress: reproduced\n- key_decision: use a stack\n- tried_solution: regex failed\n- next_step: run tests\n## Summary\nWe looked at parser.go.\n```",
		"json":           "```json\n{\"user_intent\":\"fix the parser\",\"execution_progress\":\"reproduced\",\"key_decision\":\"use a stack\",\"tried_solution\":[\"regex failed\"],\"next_step\":\"run tests\",\"summary\":\"We looked at parser.go.\"}\n```",
		"json aliases":   `{"anchors": {"goal": "fix the parser", "progress": "reproduced", "decisions": "use a stack", "attempts": "regex failed", "next steps": "run tests"}, "summary": "We looked at parser.go."}`,
		"summary first":  "## Summary\nWe looked at parser.go.\n\n## Anchors\n- user_intent: fix the parser\n- execution_progress: reproduced\n- key_decision: use a stack\n- tried_solution: regex failed\n- next_step: run tests",
		"crlf endings":   "## Anchors\r\n- user_intent: fix the parser\r\n- execution_progress: reproduced\r\n- key_decision: use a stack\r\n- tried_solution: regex failed\r\n- next_step: run tests\r\n\r\n## Summary\r\nWe looked at parser.go.\r\n",
		"blank in lists": "## Anchors\n- user_intent: fix the parser\n\n- execution_progress: reproduced\n\n- key_decision: use a stack\n\n- tried_solution: regex failed\n\n- next_step: run tests\n\n## Summary\nWe looked at parser.go.",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			anchors, summary, err := ParseAnchorsAndSummary(in)
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			m := anchorMap(anchors)
			want := map[AnchorType]string{AnchorUserIntent: "fix the parser", AnchorExecutionProgress: "reproduced", AnchorKeyDecision: "use a stack", AnchorTriedSolution: "regex failed", AnchorNextStep: "run tests"}
			for typ, w := range want {
				if got := strings.TrimPrefix(m[typ], "- "); got != w {
					t.Errorf("%s = %q, want %q", typ, m[typ], w)
				}
			}
			if strings.TrimSpace(summary) != "We looked at parser.go." {
				t.Fatalf("summary %q", summary)
			}
		})
	}
}

// Lines that look like headers but are not in a form the prompt asks for open no section:
// they stay where they are, and text no section holds is kept in the summary and named in
// the error.
func TestParseAnchorsStrict(t *testing.T) {
	const rest = "- execution_progress: reproduced\n- key_decision: use a stack\n- tried_solution: regex failed\n"
	cases := []struct {
		name, in string
		want     map[AnchorType]string // anchors that must have exactly this content
		summary  []string              // the summary must contain these
		err      string                // the error must contain this ("" for no error)
	}{
		{
			name: "progress word inside an anchor",
			in:   "- user_intent: fix the parser\n" + rest + "- next_step: run tests\nProgress: 3 of 5 tests pass\n\n## Summary\nS.",
			want: map[AnchorType]string{AnchorNextStep: "run tests\nProgress: 3 of 5 tests pass"},
		},
		{
			name: "next steps with a dash",
			in:   "- user_intent: fix the parser\nNext steps - run tests\n" + rest + "- next_step: ship\n## Summary\nS.",
			want: map[AnchorType]string{AnchorUserIntent: "fix the parser\nNext steps - run tests", AnchorNextStep: "ship"},
		},
		{
			name: "summary heading in a code block",
			in:   "- user_intent: fix the report generator:\n```\n## Summary\n- next_step: not a header\n```\n" + rest + "- next_step: run tests\n## Summary\nS.",
			want: map[AnchorType]string{AnchorUserIntent: "fix the report generator:\n```\n## Summary\n- next_step: not a header\n```", AnchorNextStep: "run tests"},
		},
		{
			name: "summary heading in a quoted task",
			in:   "- user_intent: the user asked:\n  > ## Summary\n  > make the report shorter\n" + rest + "- next_step: run tests\n## Summary\nS.",
			want: map[AnchorType]string{AnchorUserIntent: "the user asked:\n> ## Summary\n> make the report shorter"},
		},
		{
			name: "indented summary heading",
			in:   "- user_intent: write the release notes with\n  ## Summary\n  ## Changes\n" + rest + "- next_step: run tests\n## Summary\nS.",
			want: map[AnchorType]string{AnchorUserIntent: "write the release notes with\n## Summary\n## Changes", AnchorNextStep: "run tests"},
		},
		{
			name:    "summary of changes is a heading of the text",
			in:      "- user_intent: fix it\n" + rest + "- next_step: run tests\n## Summary\nS.\n## Summary of changes\nmore",
			summary: []string{"S.\n## Summary of changes\nmore"},
		},
		{
			name:    "aliases are not headers",
			in:      "**User Intent**: fix the parser\nIntent: fix it\n<next_step>run</next_step>\n## Anchors\n- user_intent: the real intent\n" + rest + "- next_step: run tests\n## Summary\nS.",
			want:    map[AnchorType]string{AnchorUserIntent: "the real intent", AnchorNextStep: "run tests"},
			summary: []string{"**User Intent**: fix the parser", "Intent: fix it", "<next_step>run</next_step>", "S."},
			err:     "3 lines outside any section kept in the summary",
		},
		{
			name:    "prose after the anchors without a heading",
			in:      "- user_intent: fix it\n" + rest + "- next_step: run tests\n\nThe agent read parser.go\nand found the bug.",
			want:    map[AnchorType]string{AnchorNextStep: "run tests"},
			summary: []string{"The agent read parser.go\nand found the bug."},
			err:     "2 lines outside any section kept in the summary",
		},
		{
			name:    "preamble before the anchors",
			in:      "Here is the summary you asked for.\n## Anchors\n- user_intent: fix it\n" + rest + "- next_step: run tests\n## Summary\nS.",
			summary: []string{"Here is the summary you asked for.", "S."},
			err:     "1 lines outside any section kept in the summary",
		},
		{
			name: "a list item named summary",
			in:   "- user_intent: fix it\n- Summary: not the summary\n" + rest + "- next_step: run tests\n## Summary\nS.",
			want: map[AnchorType]string{AnchorUserIntent: "fix it\n- Summary: not the summary"},
		},
		{
			name: "no space after the colon",
			in:   "- user_intent: fix it\nnext_step:run\n" + rest + "- next_step: run tests\n## Summary\nS.",
			want: map[AnchorType]string{AnchorUserIntent: "fix it\nnext_step:run"},
		},
		{
			name: "indented items after blank lines",
			in:   "- user_intent:\n  - fix it\n\n  - keep the API\n" + rest + "- next_step: run tests\n## Summary\nS.",
			want: map[AnchorType]string{AnchorUserIntent: "- fix it\n\n- keep the API"},
		},
		{
			name: "the same anchor twice",
			in:   "- user_intent: fix it\n" + rest + "- next_step: run tests\n- user_intent: keep the API\n## Summary\nS.",
			want: map[AnchorType]string{AnchorUserIntent: "fix it\nkeep the API"},
		},
		{
			name: "missing anchors",
			in:   "- user_intent: fix it\n## Summary\nS.",
			err:  "missing execution_progress, key_decision, tried_solution, next_step (filled with N/A)",
		},
		{
			name:    "json with an unknown field",
			in:      `{"user_intent": "fix it", "execution_progress": "x", "key_decision": "y", "tried_solution": "z", "next_step": "w", "notes": "keep me", "summary": "S."}`,
			summary: []string{"notes: keep me", "S."},
			err:     "1 fields outside any section kept in the summary",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			anchors, summary, err := ParseAnchorsAndSummary(c.in)
			if c.err == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			m := anchorMap(anchors)
			for typ, w := range c.want {
				if m[typ] != w {
					t.Errorf("%s = %q, want %q", typ, m[typ], w)
				}
			}
			for _, s := range c.summary {
				if !strings.Contains(summary, s) {
					t.Errorf("summary %q lacks %q", summary, s)
				}
			}
			// Nothing is lost: every non-blank input line is in an anchor or the summary.
			if !strings.HasPrefix(c.in, "{") {
				all := summary + "\n" + formatAnchors(anchors)
				for l := range strings.SplitSeq(c.in, "\n") {
					if l = strings.TrimSpace(l); l != "" && !strings.Contains(all, strings.TrimPrefix(strings.TrimPrefix(l, "- "), "> ")) && !isHeaderLine(l) {
						t.Errorf("line %q lost", l)
					}
				}
			}
		})
	}
}

// isHeaderLine is a line the parser consumes as a header.
func isHeaderLine(l string) bool {
	k, _, _ := parseHeader(l)
	return k != headerNone
}

func TestParseAnchorsFillsMissingWithNA(t *testing.T) {
	anchors, _, err := ParseAnchorsAndSummary("user_intent: ship it\nThe rest is prose.")
	if err == nil || !strings.Contains(err.Error(), "missing execution_progress, key_decision, tried_solution, next_step") {
		t.Fatalf("error %v", err)
	}
	if len(anchors) != 5 {
		t.Fatalf("%d anchors, want always 5", len(anchors))
	}
	m := anchorMap(anchors)
	if m[AnchorUserIntent] != "ship it\nThe rest is prose." {
		t.Fatalf("intent %q", m[AnchorUserIntent])
	}
	for _, ty := range AnchorTypes[1:] {
		if m[ty] != notAvailable {
			t.Fatalf("%s = %q, want N/A", ty, m[ty])
		}
	}
	// No anchors at all: everything is summary, no line counted as misplaced.
	anchors, summary, err := ParseAnchorsAndSummary("Just prose about the work.\nProgress: good.")
	if err == nil || strings.Contains(err.Error(), "outside") || summary != "Just prose about the work.\nProgress: good." || CountAvailable(anchors) != 0 {
		t.Fatalf("prose only: %v %q %v", anchors, summary, err)
	}
	if _, _, err := ParseAnchorsAndSummary("   "); err == nil {
		t.Fatal("empty output accepted silently")
	}
	// An anchor given as N/A is not missing.
	if _, _, err := ParseAnchorsAndSummary("- user_intent: N/A\n- execution_progress: N/A\n- key_decision: N/A\n- tried_solution: N/A\n- next_step: N/A\n## Summary\nS"); err != nil {
		t.Fatalf("explicit N/A: %v", err)
	}
}

// What formatAnchors writes parses back to the same anchors, whatever their content holds.
func TestFormatAnchorsParsesBack(t *testing.T) {
	contents := []string{
		"a\nmultiline",
		"- one item",
		"- first\n- second\n  continued\n- third",
		"fix it:\n- keep the API\n- add a test",
		"with\n\nblank lines\n\n\nin it",
		"```\n## Summary\n- next_step: not a header\n```",
		"## Summary\nuser_intent: also not a header",
		"  indented code\n\tand a tab",
		"Progress: 3 of 5 tests pass",
		"ends with a fence\n```",
		"**bold**: text",
		notAvailable,
	}
	for i, c := range contents {
		in := []Anchor{{AnchorUserIntent, c}, {AnchorExecutionProgress, "b"}, {AnchorKeyDecision, c}, {AnchorTriedSolution, "d"}, {AnchorNextStep, c}}
		want := []Anchor{{AnchorUserIntent, strings.TrimSpace(c)}, {AnchorExecutionProgress, "b"}, {AnchorKeyDecision, strings.TrimSpace(c)}, {AnchorTriedSolution, "d"}, {AnchorNextStep, strings.TrimSpace(c)}}
		out, summary, err := ParseAnchorsAndSummary("## Anchors\n" + formatAnchors(in) + "\n## Summary\nS")
		if err != nil {
			t.Fatalf("content %d: %v", i, err)
		}
		for j := range want {
			if out[j] != want[j] {
				t.Errorf("content %d, anchor %d: %q, want %q", i, j, out[j].Content, want[j].Content)
			}
		}
		if summary != "S" {
			t.Errorf("content %d: summary %q", i, summary)
		}
	}
}

func TestMergeAnchorsUnion(t *testing.T) {
	old := []Anchor{{AnchorUserIntent, "fix parser"}, {AnchorKeyDecision, "use stack"}, {AnchorNextStep, "old next"}, {AnchorTriedSolution, "regex"}}
	new := []Anchor{{AnchorUserIntent, notAvailable}, {AnchorNextStep, "run tests"}, {AnchorTriedSolution, "- Regex \n- recursion: stack overflow"}, {AnchorKeyDecision, "keep the API"}}
	m := anchorMap(mergeAnchors(old, new))
	want := map[AnchorType]string{
		AnchorUserIntent:        "fix parser",
		AnchorKeyDecision:       "- use stack\n- keep the API",          // union, oldest first
		AnchorNextStep:          "run tests",                            // the newest plan supersedes
		AnchorTriedSolution:     "- regex\n- recursion: stack overflow", // "Regex " is "regex" again
		AnchorExecutionProgress: notAvailable,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	if len(mergeAnchors(nil, nil)) != 5 {
		t.Error("merge must always give five anchors")
	}
	// No new plan: the old one stays.
	if got := anchorMap(mergeAnchors(old, nil))[AnchorNextStep]; got != "old next" {
		t.Errorf("next_step without a new plan = %q", got)
	}
}

func TestMergeAnchorsItems(t *testing.T) {
	cases := []struct {
		name     string
		typ      AnchorType
		old, new string
		want     string
	}{
		{"an item restated with more detail replaces the older", AnchorExecutionProgress, "- calls c1 c2\n- edited a.py", "calls c1 c2 c3", "- calls c1 c2 c3\n- edited a.py"},
		{"a shorter restatement is dropped", AnchorKeyDecision, "use a stack because nesting is unbounded", "use a stack", "use a stack because nesting is unbounded"},
		{"clipped items match their full text", AnchorKeyDecision, "- use a stack because...", "use a stack because nesting is unbounded", "use a stack because nesting is unbounded"},
		{"a harness reminder differing in a count is kept once", AnchorUserIntent, "- fix it\n- later: Please always provide EXACTLY ONE action, found 2 actions.", "- later: Please always provide EXACTLY ONE action, found 5 actions.", "- fix it\n- later: Please always provide EXACTLY ONE action, found 2 actions."},
		{"counts differ outside user_intent", AnchorTriedSolution, "pytest -> 2 failed", "pytest -> 5 failed", "- pytest -> 2 failed\n- pytest -> 5 failed"},
		{"numbered items", AnchorNextStep, "x", "1. run tests\n2. open a PR", "- run tests\n- open a PR"},
		{"nested bullets stay under their item", AnchorKeyDecision, "- use a stack\n  - because nesting is unbounded", "- keep the API", "- use a stack\n  - because nesting is unbounded\n- keep the API"},
		{"the old format's nesting is flattened", AnchorExecutionProgress, "Earlier: Earlier: Earlier: This span: 3 tool calls\nThis span: 2 tool calls", "", "- This span: 3 tool calls\n- This span: 2 tool calls"},
		{"file trails merge into one item, first", AnchorExecutionProgress, "- ran pytest\n- files edited: a.py; read: b.py, c.py", "- files edited: /repo/b.py; created: r.py; deleted: r.py\n- ran it again",
			"- files edited: a.py, /repo/b.py; created: r.py; read: c.py; deleted: r.py\n- ran pytest\n- ran it again"},
		{"tool-call counts add up", AnchorExecutionProgress, "tool calls: bash x4, str_replace_editor x1", "tool calls: str_replace_editor x3, bash x1", "tool calls: bash x5, str_replace_editor x4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := anchorMap(mergeAnchors([]Anchor{{c.typ, c.old}}, []Anchor{{c.typ, c.new}}))[c.typ]
			if got != c.want {
				t.Errorf("merged %q", got)
			}
		})
	}
}

// Merged lists are bounded: the oldest and the newest items survive with one elision
// marker between them, whatever the number of merges, within maxAnchorChars.
func TestMergeAnchorsBoundedNeverNests(t *testing.T) {
	var anchors []Anchor
	for i := range 300 {
		new := []Anchor{
			{AnchorUserIntent, fmt.Sprintf("later: instruction %c%c from the user", 'a'+i%26, 'a'+i/26)},
			{AnchorExecutionProgress, fmt.Sprintf("- files edited: src/f%d.py; read: docs/r%d.md\n- tool calls: bash x2\n- pytest tests/t%d.py -> exit 1: %d failed, %d passed", i, i, i, i%7, i)},
			{AnchorKeyDecision, fmt.Sprintf("decision %d: use approach %d instead of %d because of reason %d", i, i, i+1, i)},
			{AnchorTriedSolution, strings.Repeat(fmt.Sprintf("attempt %d failed with ValueError: bad input ", i), 1+i%20)},
			{AnchorNextStep, fmt.Sprintf("step %d", i)},
		}
		if i == 0 {
			new[0].Content = "- Fix the failing parser test.\n- Expected: nested brackets parse"
		}
		anchors = mergeAnchors(anchors, new)
		for _, a := range anchors {
			if len(a.Content) > anchorMaxChars(a.Type) {
				t.Fatalf("merge %d: %s is %d bytes", i, a.Type, len(a.Content))
			}
			if n := strings.Count(a.Content, "elided ...]"); n > 1 {
				t.Fatalf("merge %d: %s has %d elision markers: %q", i, a.Type, n, a.Content)
			}
			if strings.Contains(a.Content, "Earlier:") {
				t.Fatalf("nested: %q", a.Content)
			}
		}
	}
	m := anchorMap(anchors)
	intent := m[AnchorUserIntent]
	if !strings.HasPrefix(intent, "- Fix the failing parser test.\n- Expected: nested brackets parse\n") || !strings.Contains(intent, "instruction nl from the user") {
		t.Errorf("user_intent lost the task or the newest instruction: %q", intent)
	}
	progress := m[AnchorExecutionProgress]
	first, _, _ := strings.Cut(progress, "\n")
	if !strings.HasPrefix(first, "- files edited: src/f0.py, src/f1.py, src/f2.py, +") || !strings.Contains(first, "src/f299.py") {
		t.Errorf("file trail: %q", first)
	}
	if !strings.Contains(progress, "tool calls: bash x600") || !strings.Contains(progress, "tests/t0.py") || !strings.Contains(progress, "tests/t299.py") {
		t.Errorf("progress lost its counts, oldest or newest entries: %q", progress)
	}
	decisions := m[AnchorKeyDecision]
	if !strings.Contains(decisions, "decision 0:") || !strings.Contains(decisions, "decision 299:") || !strings.Contains(decisions, "items elided ...]") {
		t.Errorf("key_decision: %q", decisions)
	}
	if m[AnchorNextStep] != "step 299" {
		t.Errorf("next_step %q", m[AnchorNextStep])
	}
	// Merging a merge result with itself changes nothing.
	again := mergeAnchors(anchors, anchors)
	for i := range anchors {
		if anchors[i].Type != AnchorExecutionProgress && again[i] != anchors[i] {
			t.Errorf("%s changed by merging it with itself:\n%q\n%q", anchors[i].Type, anchors[i].Content, again[i].Content)
		}
	}
}

func TestParseAnchorsNestingIsBounded(t *testing.T) {
	// Anchors one level down are read; anchors deeper than the bound are not.
	shallow := `{"anchors": {"USER_INTENT": "fix the tests"}}`
	anchors, _, _ := ParseAnchorsAndSummary(shallow)
	if got := anchorContent(anchors, AnchorUserIntent); got != "fix the tests" {
		t.Errorf("one level down: %q", got)
	}
	deep := strings.Repeat(`{"anchors": `, maxAnchorNesting+2) + `{"USER_INTENT": "too deep"}` + strings.Repeat(`}`, maxAnchorNesting+2)
	anchors, _, _ = ParseAnchorsAndSummary(deep)
	if got := anchorContent(anchors, AnchorUserIntent); got == "too deep" {
		t.Errorf("anchors %d levels down were read", maxAnchorNesting+2)
	}
}

func anchorContent(anchors []Anchor, typ AnchorType) string {
	for _, a := range anchors {
		if a.Type == typ {
			return a.Content
		}
	}
	return ""
}

func FuzzParseAnchors(f *testing.F) {
	f.Add("## Anchors\n- user_intent: x\n## Summary\ny")
	f.Add("{\"user_intent\": [\"a\", 1]}")
	f.Add("<next_step>do</next_step>\n**Summary**")
	f.Add("\xff\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		anchors, _, _ := ParseAnchorsAndSummary(s)
		if len(anchors) != 5 {
			t.Fatalf("%d anchors", len(anchors))
		}
		for i, a := range anchors {
			if a.Type != AnchorTypes[i] || a.Content == "" || len(a.Content) > anchorMaxChars(a.Type) {
				t.Fatalf("anchor %d malformed: %+v", i, a)
			}
		}
		// What formatAnchors writes parses back exactly.
		back, _, err := ParseAnchorsAndSummary("## Anchors\n" + formatAnchors(anchors) + "\n## Summary\nS")
		for i := range anchors {
			if back[i] != anchors[i] {
				t.Fatalf("anchor %d does not parse back (%v):\n%q\n%q", i, err, anchors[i].Content, back[i].Content)
			}
		}
		merged := mergeAnchors(anchors, anchors)
		if len(merged) != 5 {
			t.Fatal("merge lost anchors")
		}
		for _, a := range mergeAnchors(merged, anchors) {
			if a.Content == "" || len(a.Content) > anchorMaxChars(a.Type) || strings.Count(a.Content, "elided ...]") > 1 {
				t.Fatalf("merged %s malformed: %q", a.Type, a.Content)
			}
		}
	})
}

// The reply format SummaryInstructions shows is one the parser reads without complaint, and
// asks for what the extractive summarizer writes: a file trail, outcomes, error lines.
func TestSummaryInstructionsFormatParses(t *testing.T) {
	start := strings.Index(SummaryInstructions, "## Anchors")
	end := strings.Index(SummaryInstructions, "\nRules:")
	if start < 0 || end < start {
		t.Fatal("SummaryInstructions shows no reply format")
	}
	anchors, summary, err := ParseAnchorsAndSummary(SummaryInstructions[start:end])
	if err != nil || CountAvailable(anchors) != 5 || summary == "" {
		t.Fatalf("the documented format does not parse: %v, %d anchors, summary %q", err, CountAvailable(anchors), summary)
	}
	progress := splitItems(anchorContent(anchors, AnchorExecutionProgress)).items
	if len(progress) != 2 || !strings.HasPrefix(progress[0], "files edited: ") {
		t.Errorf("execution_progress items %q", progress)
	}
	for _, want := range []string{"exact error line", "with its reason", "exit codes", "later instruction or constraint"} {
		if !strings.Contains(SummaryInstructions, want) {
			t.Errorf("SummaryInstructions does not ask for %q", want)
		}
	}
}

func TestBuildSummaryPromptBounded(t *testing.T) {
	msgs := make([]Message, 0, 200)
	for i := range 200 {
		msgs = append(msgs, user(fmt.Sprintf("message %d %s", i, strings.Repeat("x", 500))))
	}
	req := SummaryRequest{Messages: msgs, PreviousAnchors: []Anchor{{AnchorUserIntent, "fix it"}}, MaxSummaryChars: 1000}
	p := BuildSummaryPrompt(req, 20000)
	if len(p) > 20000 {
		t.Errorf("prompt %d bytes, over 20000", len(p))
	}
	for _, want := range []string{"Previous anchors:\n- user_intent: fix it\n", "message 0 ", "message 199 ", "messages elided", "list only what this excerpt adds", "Keep the summary under 1000 characters."} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
}

// sameItem reports whether got is item, or item clipped ("..." after a prefix of it).
func sameItem(got, item string) bool {
	if got == item {
		return true
	}
	p, clipped := strings.CutSuffix(got, "...")
	return clipped && len(p) >= 8 && strings.HasPrefix(item, p)
}

// decisionItems are n key_decision items, each about 60 bytes and numbered.
func decisionItems(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "- %s %02d: use the token stream for nested brackets\n", prefix, i)
	}
	return b.String()
}

// formatAnchorsWithin: the anchors as they are when they fit; otherwise each available
// anchor shrunk in proportion, keeping its first and last items, N/A untouched, still
// parsing back, within max plus the rendering's own bytes (headers and indentation).
func TestFormatAnchorsWithin(t *testing.T) {
	anchors := []Anchor{
		{AnchorUserIntent, decisionItems("intent", 30)},
		{AnchorExecutionProgress, decisionItems("step", 30)},
		{AnchorKeyDecision, decisionItems("decision", 30)},
		{AnchorTriedSolution, notAvailable},
		{AnchorNextStep, decisionItems("next", 30)},
	}
	full := formatAnchors(anchors)
	if got := formatAnchorsWithin(anchors, len(full)); got != full {
		t.Fatal("anchors that fit were changed")
	}
	for _, max := range []int{len(full) * 2 / 3, len(full) / 3, len(full) / 5} {
		out := formatAnchorsWithin(anchors, max)
		parsed, _, err := ParseAnchorsAndSummary("## Anchors\n" + out + "\n## Summary\nS")
		if err != nil {
			t.Fatalf("max %d: %v", max, err)
		}
		content, lines := 0, strings.Count(out, "\n")
		for i, a := range parsed {
			content += len(a.Content)
			if a.Type != anchors[i].Type {
				t.Fatalf("max %d: anchor %d is %s", max, i, a.Type)
			}
			if !anchors[i].Available() {
				if a.Content != notAvailable {
					t.Errorf("max %d: N/A anchor became %q", max, a.Content)
				}
				continue
			}
			items := splitItems(anchors[i].Content).items
			got := splitItems(a.Content)
			if len(got.items) == 0 || !sameItem(got.items[0], items[0]) || !sameItem(got.items[len(got.items)-1], items[len(items)-1]) {
				t.Errorf("max %d: %s lost its first or last item: %q", max, a.Type, a.Content)
			}
			if len(a.Content) >= len(anchors[i].Content) || got.elided == 0 {
				t.Errorf("max %d: %s not shrunk with an elision marker: %q", max, a.Type, a.Content)
			}
		}
		if content > max || len(out) > max+lines*3+len(anchors)*len("- execution_progress:") {
			t.Errorf("max %d: %d bytes of content, %d rendered (%d lines)", max, content, len(out), lines)
		}
	}
}

// withoutPinned drops the user_intent items a pin shows word for word (the start of one,
// when the item was clipped), keeps the others and every other anchor, and never changes
// its input.
func TestWithoutPinned(t *testing.T) {
	task := "Fix the failing parser test in parser.go; keep the public API."
	instr := "Please also update the docs for the parser module."
	pin := func(s string, shortened bool) Pin {
		p := Pin{Kind: PinKindInstruction, Message: user(s), Bytes: len(s)}
		if shortened {
			p.Bytes = len(s) + 5000
		}
		return p
	}
	pins := []Pin{pin(task, false), pin(instr, false)}
	cases := []struct {
		name   string
		intent string
		pins   []Pin
		want   string
	}{
		{"pinned items go", "- " + task + "\n- later: " + instr + "\n- never touch the lexer's token table", pins, "never touch the lexer's token table"},
		{"all pinned", "- " + task + "\n- later: " + instr, pins, "(the task and the user's instructions are pinned above)"},
		{"a clipped item is the pin's start", "- Fix the failing parser test in parser...\n- keep going", pins, "keep going"},
		{"a short item is kept", "- Fix the failing\n- keep going", pins, "- Fix the failing\n- keep going"},
		{"a shortened pin does not count", "- " + task + "\n- keep going", []Pin{pin(task, true)}, "- " + task + "\n- keep going"},
		{"the elision marker stays", "- " + task + "\n- [... 3 items elided ...]\n- keep going", pins, "- keep going\n- [... 3 items elided ...]"},
		{"no pins", "- " + task, nil, "- " + task},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []Anchor{{AnchorUserIntent, c.intent}, {AnchorKeyDecision, "- " + task}, {AnchorNextStep, instr}}
			before := fmt.Sprint(in)
			out := withoutPinned(in, c.pins)
			if fmt.Sprint(in) != before {
				t.Fatal("the input anchors were changed")
			}
			if out[0].Content != c.want {
				t.Errorf("user_intent %q, want %q", out[0].Content, c.want)
			}
			if out[1] != in[1] || out[2] != in[2] {
				t.Errorf("other anchors changed: %q", out[1:])
			}
		})
	}
}

// restates: one decision held whole in another, both at least 40 bytes; the merge keeps
// the shorter statement once, only in key_decision.
func TestRestatesAndMerge(t *testing.T) {
	const short = "the root cause is the lexer's unbalanced bracket handling"
	const long = "currently working on parser.go; " + short + " in tokenize()"
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{long, short, true},
		{short, long, true},
		{short, short, true},
		{long, "the lexer", false}, // too short to mean something alone
		{strings.Repeat("x", 39), strings.Repeat("x", 39) + " and more words after it", false},
		{strings.Repeat("x", 40), strings.Repeat("x", 40) + " and more words after it", true},
		{long, "the root cause is the parser's recursion depth limit here", false},
	} {
		if got := restates(c.a, c.b); got != c.want {
			t.Errorf("restates(%q, %q) = %v", c.a, c.b, got)
		}
	}
	for _, order := range [][2]string{{long, short}, {short, long}} {
		merged := anchorMap(mergeAnchors([]Anchor{{AnchorKeyDecision, "- use a stack\n- " + order[0]}}, []Anchor{{AnchorKeyDecision, "- " + order[1]}}))
		if got := merged[AnchorKeyDecision]; got != "- use a stack\n- "+short {
			t.Errorf("merged %q then %q: %q", order[0][:10], order[1][:10], got)
		}
	}
	// Other anchors keep both.
	merged := anchorMap(mergeAnchors([]Anchor{{AnchorExecutionProgress, long}}, []Anchor{{AnchorExecutionProgress, short}}))
	if got := merged[AnchorExecutionProgress]; got != "- "+long+"\n- "+short {
		t.Errorf("execution_progress: %q", got)
	}
}

// shedWeakDecisions drops, oldest first, the non-strong decisions after the head, never
// the newest three, until the list fits; it stops when only strong ones are left.
func TestShedWeakDecisions(t *testing.T) {
	items := []string{
		"h1 an early observation", "h2 an early observation", "h3 an early observation", // head
		"w1 the test output looks long",
		"s1 we decided to use a stack",
		"w2 the file has many imports",
		"w3 the docs mention brackets",
		"s2 the root cause is the lexer",
		"n1 ran the tests again", "n2 looked at the diff", "n3 checked the linter", // newest
	}
	size := 40 // the elision marker
	for _, it := range items {
		size += len(it) + 4
	}
	for _, c := range []struct {
		name   string
		max    int
		want   []string
		elided int
	}{
		{"fits", size, items, 0},
		{"two weak go", size - len(items[3]) - len(items[5]) - 8, []string{items[0], items[1], items[2], items[4], items[6], items[7], items[8], items[9], items[10]}, 2},
		{"all weak but the newest go", 10, []string{items[0], items[1], items[2], items[4], items[7], items[8], items[9], items[10]}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := append([]string(nil), items...)
			got, elided, tail := shedWeakDecisions(nil, in, 5, 3, 12, c.max)
			if fmt.Sprint(got) != fmt.Sprint(c.want) || elided != 5+c.elided || tail > 12 {
				t.Errorf("got %q, elided %d, tail %d", got, elided, tail)
			}
			if fmt.Sprint(in) != fmt.Sprint(items) {
				t.Error("the input was changed")
			}
		})
	}
	// Through the merge: over maxDecisionChars, a strong decision from the middle survives
	// where the weak ones around it are elided.
	var old strings.Builder
	for i := range 40 {
		if i == 20 {
			old.WriteString("- we decided to keep the public API and use a stack instead of a regex for nested brackets\n")
			continue
		}
		fmt.Fprintf(&old, "- observation %02d: the parser output %s\n", i, strings.Repeat("looks plausible ", 8))
	}
	got := anchorMap(mergeAnchors([]Anchor{{AnchorKeyDecision, old.String()}}, []Anchor{{AnchorKeyDecision, "the next run passed"}}))[AnchorKeyDecision]
	if len(got) > maxDecisionChars || !strings.Contains(got, "we decided to keep the public API") || !strings.Contains(got, "observation 00") ||
		!strings.Contains(got, "the next run passed") || strings.Contains(got, "observation 21") || !strings.Contains(got, "elided ...]") {
		t.Errorf("merged key_decision (%d bytes): %q", len(got), got)
	}
}

// TestFormatAnchorsWithinKeepsNewestOfShortList: formatAnchorsWithin keeps each shrunk
// anchor's oldest and newest items also when the list has no more items than its head
// bound (anchorBounds: next_step 6, user_intent 12, the others 3). (Regression: at b476863
// boundItems took h = min(head, len(items)) = all of them and t = 0, then gave bytes back
// by lowering h, from the newest end: the view lost the end of the current plan and the
// user's latest instructions. Fixed in c870a66 for formatAnchorsWithin.)
func TestFormatAnchorsWithinKeepsNewestOfShortList(t *testing.T) {
	anchors := []Anchor{
		{AnchorUserIntent, decisionItems("instruction", 10)},
		{AnchorExecutionProgress, decisionItems("step", 30)},
		{AnchorKeyDecision, decisionItems("decision", 30)},
		{AnchorTriedSolution, notAvailable},
		{AnchorNextStep, decisionItems("next", 6)},
	}
	out := formatAnchorsWithin(anchors, len(formatAnchors(anchors))/3)
	parsed, _, err := ParseAnchorsAndSummary("## Anchors\n" + out + "\n## Summary\nS")
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range parsed {
		if !anchors[i].Available() {
			continue
		}
		items := splitItems(anchors[i].Content).items
		got := splitItems(a.Content).items
		if len(got) == 0 || !sameItem(got[0], items[0]) || !sameItem(got[len(got)-1], items[len(items)-1]) {
			t.Errorf("%s (%d items) lost its first or newest item: %q", a.Type, len(items), a.Content)
		}
	}
}

// TestFormatAnchorsWithinNeverClipsElisionMarker: when a list must be clipped (a small
// window), the elision marker stays whole. (Regression: at b476863 boundItems clipped it
// with the items, into an item such as "[... 2..." that no reader, nor splitItems,
// recognizes. Fixed in c870a66.)
func TestFormatAnchorsWithinNeverClipsElisionMarker(t *testing.T) {
	anchors := []Anchor{{AnchorKeyDecision, decisionItems("decision", 30)}}
	out := formatAnchorsWithin(anchors, len(formatAnchors(anchors))/25)
	parsed, _, _ := ParseAnchorsAndSummary("## Anchors\n" + out + "\n## Summary\nS")
	l := splitItems(anchorContent(parsed, AnchorKeyDecision))
	for _, it := range l.items {
		if strings.HasPrefix(it, "[...") {
			t.Errorf("a clipped elision marker shown as an item: %q (in %q)", it, out)
		}
	}
	if l.elided == 0 {
		t.Errorf("no elision marker left: %q", out)
	}
}
