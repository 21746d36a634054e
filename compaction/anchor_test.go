package compaction

import (
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

func TestParseAnchorsFormats(t *testing.T) {
	cases := map[string]string{
		"documented":  "## Anchors\n- user_intent: fix the parser\n- execution_progress: reproduced\n- key_decision: use a stack\n- tried_solution: regex failed\n- next_step: run tests\n\n## Summary\nWe looked at parser.go.",
		"bold labels": "**User Intent**: fix the parser\n**Execution Progress**: reproduced\n**Key Decisions**: use a stack\n**Tried Solutions**: regex failed\n**Next Steps**: run tests\n\n**Summary**: We looked at parser.go.",
		"headings":    "### User intent\nfix the parser\n### Execution progress\nreproduced\n### Key decision\nuse a stack\n### Tried solution\nregex failed\n### Next step\nrun tests\n### Summary\nWe looked at parser.go.",
		"json":        "```json\n{\"user_intent\":\"fix the parser\",\"execution_progress\":\"reproduced\",\"key_decision\":\"use a stack\",\"tried_solution\":[\"regex failed\"],\"next_step\":\"run tests\",\"summary\":\"We looked at parser.go.\"}\n```",
		"tags":        "<user_intent>fix the parser</user_intent>\n<execution_progress>reproduced</execution_progress>\n<key_decision>use a stack</key_decision>\n<tried_solution>regex failed</tried_solution>\n<next_step>run tests</next_step>\n<summary>We looked at parser.go.</summary>",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			anchors, summary, err := ParseAnchorsAndSummary(in)
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			m := anchorMap(anchors)
			if m[AnchorUserIntent] != "fix the parser" || m[AnchorNextStep] != "run tests" || m[AnchorTriedSolution] != "regex failed" {
				t.Fatalf("anchors %q", m)
			}
			if !strings.Contains(summary, "We looked at parser.go.") {
				t.Fatalf("summary %q", summary)
			}
		})
	}
}

func TestParseAnchorsFillsMissingWithNA(t *testing.T) {
	anchors, summary, err := ParseAnchorsAndSummary("user_intent: ship it\nThe rest is prose.")
	if err == nil || !strings.Contains(err.Error(), "missing execution_progress, key_decision, tried_solution, next_step") {
		t.Fatalf("error %v", err)
	}
	if len(anchors) != 5 {
		t.Fatalf("%d anchors, want always 5", len(anchors))
	}
	m := anchorMap(anchors)
	if m[AnchorUserIntent] != "ship it\nThe rest is prose." && m[AnchorUserIntent] != "ship it" {
		t.Fatalf("intent %q", m[AnchorUserIntent])
	}
	for _, ty := range AnchorTypes[1:] {
		if m[ty] != NotAvailable {
			t.Fatalf("%s = %q, want N/A", ty, m[ty])
		}
	}
	_ = summary
	// No anchors at all: everything is summary.
	anchors, summary, err = ParseAnchorsAndSummary("Just prose about the work.")
	if err == nil || summary != "Just prose about the work." || CountAvailable(anchors) != 0 {
		t.Fatalf("prose only: %v %q %v", anchors, summary, err)
	}
	if _, _, err := ParseAnchorsAndSummary("   "); err == nil {
		t.Fatal("empty output accepted silently")
	}
}

func TestMergeAnchorsUnion(t *testing.T) {
	old := []Anchor{{AnchorUserIntent, "fix parser"}, {AnchorKeyDecision, "use stack"}, {AnchorNextStep, "old next"}}
	new := []Anchor{{AnchorUserIntent, NotAvailable}, {AnchorNextStep, "run tests"}, {AnchorTriedSolution, "regex"}}
	m := anchorMap(MergeAnchors(old, new))
	want := map[AnchorType]string{AnchorUserIntent: "fix parser", AnchorKeyDecision: "use stack", AnchorNextStep: "run tests", AnchorTriedSolution: "regex", AnchorExecutionProgress: NotAvailable}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	if len(MergeAnchors(nil, nil)) != 5 {
		t.Error("merge must always give five anchors")
	}
}

func TestFormatAnchorsParsesBack(t *testing.T) {
	in := []Anchor{{AnchorUserIntent, "a\nmultiline"}, {AnchorExecutionProgress, "b"}, {AnchorKeyDecision, "c"}, {AnchorTriedSolution, "d"}, {AnchorNextStep, "e"}}
	out, _, err := ParseAnchorsAndSummary("## Anchors\n" + FormatAnchors(in) + "\n## Summary\nS")
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("anchor %d: %q, want %q", i, out[i], in[i])
		}
	}
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
			if a.Type != AnchorTypes[i] || a.Content == "" || len(a.Content) > MaxAnchorChars {
				t.Fatalf("anchor %d malformed: %+v", i, a)
			}
		}
		merged := MergeAnchors(anchors, anchors)
		if len(merged) != 5 {
			t.Fatal("merge lost anchors")
		}
	})
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
