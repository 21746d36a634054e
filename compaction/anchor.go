package compaction

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// AnchorType is one of the five kinds of information a summary must keep.
type AnchorType string

// The five anchor types of the spec, in the order they are shown.
const (
	AnchorUserIntent        AnchorType = "user_intent"
	AnchorExecutionProgress AnchorType = "execution_progress"
	AnchorKeyDecision       AnchorType = "key_decision"
	AnchorTriedSolution     AnchorType = "tried_solution"
	AnchorNextStep          AnchorType = "next_step"
)

// AnchorTypes lists the five types in their canonical order.
var AnchorTypes = [...]AnchorType{AnchorUserIntent, AnchorExecutionProgress, AnchorKeyDecision, AnchorTriedSolution, AnchorNextStep}

// NotAvailable is the content of an anchor the summary did not provide.
const NotAvailable = "N/A"

// MaxAnchorChars bounds one anchor's content so anchors stay small in context and status.
const MaxAnchorChars = 2000

// Anchor is one piece of structured, programmatically checkable summary.
type Anchor struct {
	Type    AnchorType `json:"type"`
	Content string     `json:"content"`
}

// Available reports whether the anchor carries information.
func (a Anchor) Available() bool {
	c := strings.TrimSpace(a.Content)
	return c != "" && !strings.EqualFold(c, NotAvailable)
}

var anchorAliases = map[string]AnchorType{
	"userintent": AnchorUserIntent, "intent": AnchorUserIntent, "goal": AnchorUserIntent,
	"executionprogress": AnchorExecutionProgress, "progress": AnchorExecutionProgress,
	"keydecision": AnchorKeyDecision, "keydecisions": AnchorKeyDecision, "decisions": AnchorKeyDecision,
	"triedsolution": AnchorTriedSolution, "triedsolutions": AnchorTriedSolution, "failedattempts": AnchorTriedSolution, "attempts": AnchorTriedSolution,
	"nextstep": AnchorNextStep, "nextsteps": AnchorNextStep,
}

// normalizeKey turns "User Intent", "user-intent" or "USER_INTENT" into "userintent".
func normalizeKey(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headerLine matches a line that opens an anchor or the summary, in the forms models write:
// "user_intent: x", "- **User Intent**: x", "## Next steps", "<next_step>x".
var headerLine = regexp.MustCompile(`^\s*(?:[-*>#]+\s*|\d+[.)]\s*)?(?:\*\*|__|<)?\s*([A-Za-z][A-Za-z _-]{1,30}?)\s*(?:\*\*|__)?\s*(?::|：|-\s|>|$)\s*(?:\*\*)?\s*(.*)$`)

var closingTag = regexp.MustCompile(`</\s*[A-Za-z_ -]+\s*>\s*$`)

// ParseAnchorsAndSummary extracts the five anchors and the prose summary from a summarizer's
// output. It accepts the documented "type: content" lines, markdown headings and bold
// labels, XML-style tags and a JSON object. Missing anchors are filled with N/A and named in
// the returned error, which is informational: the anchors and summary are always usable.
func ParseAnchorsAndSummary(output string) ([]Anchor, string, error) {
	text := strings.TrimSpace(stripCodeFence(output))
	if text == "" {
		return fillAnchors(nil), "", fmt.Errorf("anchor parse: empty summarizer output")
	}
	found := map[AnchorType]string{}
	summary, ok := parseJSONAnchors(text, found)
	if !ok {
		summary = parseLineAnchors(text, found)
	}
	anchors := fillAnchors(found)
	var missing []string
	for _, a := range anchors {
		if _, ok := found[a.Type]; !ok {
			missing = append(missing, string(a.Type))
		}
	}
	summary = strings.TrimSpace(summary)
	if len(missing) > 0 {
		return anchors, summary, fmt.Errorf("anchor parse: missing %s (filled with N/A)", strings.Join(missing, ", "))
	}
	return anchors, summary, nil
}

func stripCodeFence(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "```") {
		return s
	}
	t = strings.TrimPrefix(t, "```")
	if i := strings.IndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	return strings.TrimSuffix(strings.TrimSpace(t), "```")
}

// maxAnchorNesting is how deep "anchors" objects inside the summarizer's JSON are read.
const maxAnchorNesting = 4

func parseJSONAnchors(text string, found map[AnchorType]string) (string, bool) {
	if !strings.HasPrefix(text, "{") {
		return "", false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &obj); err != nil {
		return "", false
	}
	var summary string
	var visit func(map[string]json.RawMessage, int)
	visit = func(o map[string]json.RawMessage, depth int) {
		for k, v := range o {
			key := normalizeKey(k)
			if key == "summary" || key == "prose" {
				_ = json.Unmarshal(v, &summary)
				continue
			}
			if key == "anchors" {
				// Models nest anchors once, maybe twice; each level decodes the rest again,
				// so a bound keeps hostile nesting from costing quadratic time.
				var inner map[string]json.RawMessage
				if depth < maxAnchorNesting && json.Unmarshal(v, &inner) == nil {
					visit(inner, depth+1)
				}
				continue
			}
			t, ok := anchorAliases[key]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(v, &s) != nil {
				var list []string
				if json.Unmarshal(v, &list) != nil {
					continue
				}
				s = strings.Join(list, "; ")
			}
			setAnchor(found, t, s)
		}
	}
	visit(obj, 0)
	return summary, true
}

func parseLineAnchors(text string, found map[AnchorType]string) string {
	var summary strings.Builder
	var cur AnchorType
	inSummary := false
	seenSection := false
	var curText strings.Builder
	flush := func() {
		if cur != "" {
			setAnchor(found, cur, curText.String())
		}
		cur = ""
		curText.Reset()
	}
	for _, line := range strings.Split(text, "\n") {
		if m := headerLine.FindStringSubmatch(line); m != nil {
			key := normalizeKey(m[1])
			rest := strings.TrimSpace(closingTag.ReplaceAllString(m[2], ""))
			if t, ok := anchorAliases[key]; ok {
				flush()
				cur, inSummary, seenSection = t, false, true
				curText.WriteString(rest)
				continue
			}
			if key == "summary" || key == "prosesummary" {
				flush()
				inSummary, seenSection = true, true
				if rest != "" {
					summary.WriteString(rest + "\n")
				}
				continue
			}
			if key == "anchors" {
				flush()
				inSummary, seenSection = false, true
				continue
			}
		}
		clean := strings.TrimSpace(closingTag.ReplaceAllString(line, ""))
		switch {
		case cur != "":
			if clean != "" {
				if curText.Len() > 0 {
					curText.WriteByte('\n')
				}
				curText.WriteString(clean)
			}
		case inSummary || !seenSection:
			summary.WriteString(line + "\n")
		}
	}
	flush()
	return summary.String()
}

func setAnchor(found map[AnchorType]string, t AnchorType, content string) {
	content = strings.TrimSpace(content)
	if content == "" {
		content = NotAvailable
	}
	if prev, ok := found[t]; ok && prev != NotAvailable && content != NotAvailable {
		content = prev + "\n" + content // the same anchor twice: keep both
	} else if ok && content == NotAvailable {
		return
	}
	found[t] = truncateUTF8(content, MaxAnchorChars)
}

// fillAnchors returns the five anchors in canonical order, N/A where found has none.
func fillAnchors(found map[AnchorType]string) []Anchor {
	out := make([]Anchor, 0, len(AnchorTypes))
	for _, t := range AnchorTypes {
		c, ok := found[t]
		if !ok || strings.TrimSpace(c) == "" {
			c = NotAvailable
		}
		out = append(out, Anchor{Type: t, Content: c})
	}
	return out
}

// MergeAnchors is the spec's union merge: for each type the new anchor wins when it carries
// information, otherwise the old one is kept. The result always holds all five types.
func MergeAnchors(old, new []Anchor) []Anchor {
	found := map[AnchorType]string{}
	for _, a := range old {
		if a.Available() {
			found[a.Type] = a.Content
		}
	}
	for _, a := range new {
		if a.Available() {
			found[a.Type] = a.Content
		}
	}
	return fillAnchors(found)
}

// FormatAnchors renders anchors in the documented "type: content" form the parser reads.
func FormatAnchors(anchors []Anchor) string {
	var b strings.Builder
	for _, a := range anchors {
		b.WriteString("- ")
		b.WriteString(string(a.Type))
		b.WriteString(": ")
		b.WriteString(strings.ReplaceAll(strings.TrimSpace(a.Content), "\n", "\n  "))
		b.WriteByte('\n')
	}
	return b.String()
}

// CountAvailable is the number of anchors that carry information.
func CountAvailable(anchors []Anchor) int {
	n := 0
	for _, a := range anchors {
		if a.Available() {
			n++
		}
	}
	return n
}
