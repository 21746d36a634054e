package prose

import (
	"fmt"
	"slices"
	"testing"

	"github.com/harness9/compaction-operator/compaction/internal/markerset/markersettest"
)

func TestDecisionSentences(t *testing.T) {
	cases := []struct {
		text string
		want []string
	}{
		{"Let's run the test:", nil},
		{"Now let's look at the file. First, I'll create a script to reproduce the bug.", nil},
		{"I'll use a stack instead of a regex.", []string{"I'll use a stack instead of a regex."}},
		{"I will add `from django.conf import settings` after `import pytz`.", []string{"I will add `from django.conf import settings` after `import pytz`."}},
		{"We need to keep the old signature because other services import it.", []string{"We need to keep the old signature because other services import it."}},
		{"I think the real issue is in L003. Let me check.", []string{"I think the real issue is in L003."}},
		{"Why does it fail instead of passing?", nil},
	}
	for _, c := range cases {
		if got := DecisionSentences(c.text); !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.text, got, c.want)
		}
	}
}

// PickDecisions keeps n decisions, the strong ones first, then the first-read (newest)
// others, in the order read.
func TestPickDecisions(t *testing.T) {
	ds := []string{"w1 looks fine", "s1 the root cause is the lexer", "w2 many imports", "s2 switch to a stack", "w3 ran it", "s3 decided to keep the API"}
	for _, c := range []struct {
		n    int
		want []string
	}{
		{6, ds},
		{9, ds},
		{4, []string{ds[0], ds[1], ds[3], ds[5]}},
		{3, []string{ds[1], ds[3], ds[5]}},
		{2, []string{ds[1], ds[3]}},
		{0, []string{}},
	} {
		got := PickDecisions(append([]string(nil), ds...), c.n)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("PickDecisions(n=%d) = %q, want %q", c.n, got, c.want)
		}
	}
	weak := []string{"a", "b", "c", "d"}
	if got := PickDecisions(weak, 2); fmt.Sprint(got) != "[a b]" || fmt.Sprint(weak) != "[a b c d]" {
		t.Errorf("without strong ones: %q (input %q)", got, weak)
	}
}

// TestMarkerSet: each marker table finds a marker exactly when ContainsAny does.
func TestMarkerSet(t *testing.T) {
	for _, set := range [][]string{choiceMarkers[:], reasonMarkers[:], actionMarkers[:], commitMarkers[:], placeMarkers[:],
		changeMarkers[:], planMarkers[:]} {
		markersettest.Check(t, set, false)
	}
}

func TestSplitSentences(t *testing.T) {
	cases := []struct {
		text string
		want []string
	}{
		{"First sentence here. Second one is here! Third? ok.", []string{"First sentence here.", "Second one is here!"}},
		{"version 1.2.3 is out now\nnext line is long enough", []string{"version 1.2.3 is out now", "next line is long enough"}},
		{"no end mark but long enough", []string{"no end mark but long enough"}},
		{"short.", nil},
	}
	for _, c := range cases {
		if got := SplitSentences(c.text); !slices.Equal(got, c.want) {
			t.Errorf("SplitSentences(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestStatedPlan(t *testing.T) {
	cases := []struct{ text, want string }{
		{"", ""},
		{"The test passes now. Next I'll update the docs. Let me know if that helps.", "Next I'll update the docs."},
		{"Now we rerun it. Then we check the log.", "Now we rerun it. Then we check the log."},
		{"Found it. Let's run the full suite:", "Let's run the full suite"},
		{"All done here, nothing else.", ""},
	}
	for _, c := range cases {
		if got := StatedPlan(c.text); got != c.want {
			t.Errorf("StatedPlan(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestListMarker(t *testing.T) {
	cases := []struct {
		s       string
		n       int
		trimmed string
	}{
		{"- item", 2, "item"},
		{"* item", 2, "item"},
		{"• item", 4, "item"},
		{"12. item", 4, "item"},
		{"3) item", 3, "item"},
		{"-", 1, ""},
		{"-x", 0, "-x"},
		{"1234. item", 0, "1234. item"},
	}
	for _, c := range cases {
		if got := ListMarkerLen(c.s); got != c.n {
			t.Errorf("ListMarkerLen(%q) = %d, want %d", c.s, got, c.n)
		}
		if got := TrimListMarker(c.s); got != c.trimmed {
			t.Errorf("TrimListMarker(%q) = %q, want %q", c.s, got, c.trimmed)
		}
	}
}

func TestCleanAssistant(t *testing.T) {
	in := "THOUGHT: I'll fix it.\n```python\nx = 1\n```\nThen test.\n<function=bash>ls</function>"
	if got, want := CleanAssistant(in), "I'll fix it.\nThen test."; got != want {
		t.Errorf("CleanAssistant = %q, want %q", got, want)
	}
}

func TestRequirementScore(t *testing.T) {
	cases := []struct {
		section, body string
		want          int
	}{
		{"expected behavior", "The parser keeps comments", 3},
		{"", "You must not change the public API of `Parser`", 3},
		{"", "It MUST keep the old_name alias", 6}, // must, keep, MUST, old_name
		{"", "The weather is nice today", 0},
	}
	for _, c := range cases {
		if got := RequirementScore(c.section, c.body); got != c.want {
			t.Errorf("RequirementScore(%q, %q) = %d, want %d", c.section, c.body, got, c.want)
		}
	}
}
