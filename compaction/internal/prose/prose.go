// Package prose reads an agent's own words: its sentences, the ones that state a decision
// or a plan, and the requirement lines of a task. Marker phrases decide, found in one pass
// (markerset), so that reading every message of a long span stays cheap.
package prose

import (
	"regexp"
	"slices"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/markerset"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// maxTextBytes is the head of a message's text that is read.
const maxTextBytes = 16 << 10

// CleanAssistant is an assistant message's prose: no code blocks, no tool-call markup, no
// "THOUGHT:" label.
func CleanAssistant(content string) string {
	s := textcut.Head(content, maxTextBytes)
	if i := strings.Index(s, "<function="); i >= 0 {
		s = s[:i]
	}
	var b strings.Builder
	inFence := false
	for l := range strings.SplitSeq(s, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "```") {
			inFence = !inFence
			continue
		}
		if !inFence {
			b.WriteString(l + "\n")
		}
	}
	out := strings.TrimSpace(b.String())
	for _, label := range []string{"THOUGHT:", "DISCUSSION"} {
		out = strings.TrimSpace(strings.TrimPrefix(out, label))
	}
	return out
}

// The marker lists as sets, each found in one pass over a text.
var (
	choiceSet = markerset.New(choiceMarkers[:]...)
	reasonSet = markerset.New(reasonMarkers[:]...)
	// One pass instead of two for the test most messages fail.
	choiceOrReasonSet = markerset.New(append(choiceMarkers[:], reasonMarkers[:]...)...)
	actionSet         = markerset.New(actionMarkers[:]...)
	commitSet         = markerset.New(commitMarkers[:]...)
	placeSet          = markerset.New(placeMarkers[:]...)
	changeSet         = markerset.New(changeMarkers[:]...)
	planSet           = markerset.New(planMarkers[:]...)
)

// Markers of a decision: a choice between options, or a finding that decides the fix.
var choiceMarkers = [...]string{"instead of", " instead.", " instead:", " instead,", "rather than", "decided", "decide to", "i chose", "choose to", "opt for", "go with",
	"the fix is", "the fix should", "the fix will", "the solution is", "the best approach", "a better approach", "the right approach",
	"the root cause", "root cause is", "the issue is that", "the problem is that", "the bug is", "the cause is",
	"i'll use", "i will use", "we'll use", "we will use", "i'll keep", "we should use", "is better", "prefer",
	"we need to modify", "we need to change", "i need to modify", "i need to change", "so we need", "so i need", "better to",
	"the right way", "the correct way", "should be changed",
	"real issue", "issue is in", "problem is in", "not specific to", "happens with any", "the culprit",
	"i am using", "i'm using", "we're using", "switch to", "switched to"}

// Markers of a reason, a decision when the sentence also states an action.
var reasonMarkers = [...]string{"because", "since ", "so that", "in order to", "to avoid", "to keep", "to ensure", "to preserve", "otherwise"}
var actionMarkers = [...]string{"i'll", "i will", "we'll", "we will", "let's", "we need", "i need", "should", "must", "we can", "i can"}

// Markers of an action the assistant commits to: a decision when it names the code it
// changes ("I will add `from x import y` after `import z`").
var commitMarkers = [...]string{"i'll ", "i will ", "we'll ", "we will ", "i am going to", "i'm going to",
	"let's add ", "let's change ", "let's modify ", "let's update ", "let's implement ", "let's replace ", "let's remove ", "let's move "}

// Words that say where a change goes.
var placeMarkers = [...]string{" to ", " in ", " into ", " after ", " before ", " from "}

// Markers of a change the assistant is about to make: with the code it names, a decision
// even when the sentence introduces the edit ("Let's add the `X` class to models.py:").
var changeMarkers = [...]string{"let's add ", "let's change ", "let's modify ", "let's implement ", "let's replace ", "let's move ",
	"i'll add ", "i will add ", "i'll change ", "i will change ", "i'll replace ", "i will replace "}

// DecisionSentences picks sentences that state a choice (and its reason), not boilerplate
// such as "Let's run the test:" or "Now let's look at the file".
func DecisionSentences(text string) []string {
	lower := strings.ToLower(text)
	if !choiceOrReasonSet.In(lower) && (!strings.Contains(text, "`") || !commitSet.In(lower)) {
		return nil // most messages state no decision: skip splitting them into sentences
	}
	var out []string
	last := -2 // the index of the sentence the last item ends with
	for i, s := range SplitSentences(text) {
		ls := strings.ToLower(s)
		// A change named with its code and where it goes: "let's add the `X` class to
		// models.py:" commits to it; "let's add the `X` class:" narrates the next call.
		change := changeSet.In(ls) && strings.Count(s, "`") >= 2 && placeSet.In(ls)
		if strings.HasSuffix(ls, "?") || strings.HasSuffix(ls, ":") && !choiceSet.In(ls) && !change {
			continue // a question, or narration of the next call ("Let's run the test:")
		}
		if choiceSet.In(ls) || reasonSet.In(ls) && actionSet.In(ls) ||
			commitSet.In(ls) && strings.Count(s, "`") >= 2 {
			it := textcut.OneLine(TrimListMarker(s))
			// Two decision sentences in a row state one finding ("So it's not specific to
			// X. It happens with any Y."): one item, when it stays short.
			if last == i-1 && len(out) > 0 && len(out[len(out)-1])+1+len(it) <= decisionChars {
				out[len(out)-1] += " " + it
			} else {
				out = append(out, textcut.Clip(it, decisionChars))
			}
			last = i
		}
	}
	return out
}

var planMarkers = [...]string{"let's", "let me", "i'll", "i will", "we'll", "we will", "next", "now i", "now we", "need to", "going to", "plan", "then ", "try ", "should "}

// StatedPlan is the last one or two sentences of text that say what comes next.
func StatedPlan(text string) string {
	if text == "" {
		return ""
	}
	ss := SplitSentences(text)
	var plan []string
	for i := len(ss) - 1; i >= 0 && len(plan) < 2; i-- {
		if l := strings.ToLower(ss[i]); planSet.In(l) && !strings.Contains(l, "let me know") {
			plan = append(plan, strings.TrimSuffix(textcut.OneLine(TrimListMarker(ss[i])), ":"))
		}
	}
	if len(plan) == 0 {
		return ""
	}
	slices.Reverse(plan)
	for i, p := range plan[:len(plan)-1] {
		if !strings.HasSuffix(p, ".") && !strings.HasSuffix(p, "!") {
			plan[i] = p + "."
		}
	}
	return textcut.Clip(strings.Join(plan, " "), 320)
}

// countAny is how many of subs occur in s.
func countAny(s string, subs []string) int {
	n := 0
	for _, m := range subs {
		if strings.Contains(s, m) {
			n++
		}
	}
	return n
}

func TrimListMarker(s string) string {
	if loc := bulletPrefix.FindStringIndex(s); loc != nil {
		return strings.TrimSpace(s[loc[1]:])
	}
	return s
}

func SplitSentences(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || ((s[i] == '.' || s[i] == '!' || s[i] == '?') && (i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\n')) {
			if t := strings.TrimSpace(s[start : i+1]); len(t) > 12 {
				out = append(out, t)
			}
			start = i + 1
		}
	}
	if t := strings.TrimSpace(s[start:]); len(t) > 12 {
		out = append(out, t)
	}
	return out
}

// Words that make a line of the task a requirement.
var requirementMarkers = [...]string{"must", "should", "shall", "never", "do not", "don't", "required", "requirement", "expected", "expect ",
	"ensure", "make sure", "need to", "needs to", "have to", "has to", "only ", "keep ", "avoid", "without ", "your task", "goal",
	"missing", "wrong", "instead of", "not allowed", "submit", "behavio"}
var upperMarkers = [...]string{"MUST", "NEVER", "DO NOT", "DON'T", "IMPORTANT", "CRITICAL", "EXACTLY", "ONLY", "NOT"}

// Headings under which every line is a requirement.
var requirementSections = [...]string{"expect", "requirement", "acceptance", "goal", "must", "critical", "important", "constraint",
	"boundar", "task", "definition of done", "to do", "todo", "submission"}

// RequirementScore scores a line of the task under section as a requirement: its heading,
// its requirement words, its emphasis and the API names it mentions.
func RequirementScore(section, body string) int {
	score := 0
	if markerset.ContainsAny(section, requirementSections[:]) {
		score += 3
	}
	score += 2 * min(2, countAny(strings.ToLower(body), requirementMarkers[:]))
	if markerset.ContainsAny(body, upperMarkers[:]) {
		score++
	}
	if identRE.MatchString(body) {
		score++
	}
	return score
}

// StartsLikeProse rejects example output: interpreter prompts, tables, diffs, stack frames.
func StartsLikeProse(s string) bool {
	for _, p := range []string{">>>", "$ ", "mysql>", "In [", "...", "File \"", "at "} {
		if strings.HasPrefix(s, p) {
			return false
		}
	}
	r := s[0]
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '`' || r == '"' || r == '\'' || r == '(' || r == '*'
}

// PickDecisions keeps n of the decisions (newest first, as read), the strong ones first,
// then the newest others, in their order.
func PickDecisions(ds []string, n int) []string {
	if len(ds) <= n {
		return ds
	}
	keep := make([]bool, len(ds))
	k := 0
	for i := range ds {
		if k < n && StrongDecision(ds[i]) {
			keep[i] = true
			k++
		}
	}
	for i := range ds {
		if k < n && !keep[i] {
			keep[i] = true
			k++
		}
	}
	out := ds[:0:0]
	for i := range ds {
		if keep[i] {
			out = append(out, ds[i])
		}
	}
	return out
}

// strongDecisionMarkers mark a decision that holds beyond the step it was taken in: a
// change of approach, the located cause, the fix chosen, a change committed to.
var strongDecisionMarkers = [...]string{" instead.", " instead,", " instead:", " instead;", "instead of using", "rather than", "decided", "decide to", "i chose", "go with", "opt for", "switch to",
	"the fix is", "the fix should", "the fix will", "the solution is", "the best approach", "a better approach", "the right approach",
	"root cause", "real issue", "real problem", "not specific to", "happens with",
	"the culprit", "the right way", "the correct way", "i will add", "i'll add", "let's add", "we need to add", "i need to add"}

// StrongDecision reports whether a key_decision item is a strong one.
func StrongDecision(it string) bool {
	l := strings.ToLower(it)
	for _, m := range strongDecisionMarkers {
		if strings.Contains(l, m) {
			return true
		}
	}
	return false
}

// bulletPrefix matches a list item's marker: "- ", "* ", "• " or "1. ".
var bulletPrefix = regexp.MustCompile(`^(?:[-*•]|\d{1,3}[.)])(?:\s+|$)`)

// identRE finds the names of code a requirement mentions: `quoted`, snake_case, calls(),
// camelCase.
var identRE = regexp.MustCompile("`|\\b[a-z][a-z0-9]*_[a-z0-9_]+\\b|\\b\\w+\\(\\)|\\b[a-z]+[A-Z]\\w*|\\b[A-Z][a-z]+[A-Z]\\w*")

// decisionChars bounds a key_decision item: one or two sentences.
const decisionChars = 200

// ListMarkerLen is the length of the list item marker s starts with ("- ", "* ", "• ",
// "1. "), or 0.
func ListMarkerLen(s string) int {
	if loc := bulletPrefix.FindStringIndex(s); loc != nil {
		return loc[1]
	}
	return 0
}
