package compaction

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/harness9/compaction-operator/compaction/internal/prose"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// anchorType returns the anchor type a canonical name (any case) stands for.
func anchorType(name string) (AnchorType, bool) {
	for _, t := range AnchorTypes {
		if strings.EqualFold(name, string(t)) {
			return t, true
		}
	}
	return "", false
}

// jsonAliases are the keys read from a JSON reply. A JSON key cannot be confused with
// prose, so the usual spellings are accepted there, unlike in the line format.
var jsonAliases = map[string]AnchorType{
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

// ParseAnchorsAndSummary extracts the five anchors and the prose summary from a summarizer's
// output, in the format SummaryInstructions asks for, or a JSON object.
//
// The line format is read strictly, so prose is never misfiled: a section opens only on a
// line that starts (no indentation, outside a ``` fence) with "## Anchors", "## Summary" or
// "Summary:", or with an anchor's canonical name followed by a colon: "- user_intent: ...",
// "user_intent: ...", "- **user_intent**: ...", "## user_intent". An anchor's content runs
// to the next header; after a blank line only indented lines, list items or a fence
// continue it. The summary runs to the end, or to a "## Anchors" heading. Lines that belong
// to no section are kept in the summary and counted in the error.
//
// Missing anchors are filled with N/A and named in the returned error, which is
// informational: the anchors and summary are always usable.
func ParseAnchorsAndSummary(output string) ([]Anchor, string, error) {
	text := strings.TrimSpace(stripCodeFence(output))
	if text == "" {
		return fillAnchors(nil), "", fmt.Errorf("anchor parse: empty summarizer output")
	}
	p := anchorParser{found: map[AnchorType]string{}}
	if !p.parseJSON(text) {
		p.parseLines(text)
	}
	anchors := fillAnchors(p.found)
	var problems []string
	var missing []string
	for _, a := range anchors {
		if _, ok := p.found[a.Type]; !ok {
			missing = append(missing, string(a.Type))
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("missing %s (filled with N/A)", strings.Join(missing, ", ")))
	}
	if p.stray > 0 {
		unit := "lines"
		if p.json {
			unit = "fields"
		}
		problems = append(problems, fmt.Sprintf("%d %s outside any section kept in the summary", p.stray, unit))
	}
	summary := strings.TrimSpace(p.summary.String())
	if len(problems) > 0 {
		return anchors, summary, fmt.Errorf("anchor parse: %s", strings.Join(problems, "; "))
	}
	return anchors, summary, nil
}

// stripCodeFence unwraps a reply that is one fenced block (```markdown ... ```).
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

type anchorParser struct {
	found   map[AnchorType]string
	summary strings.Builder
	stray   int  // lines (or JSON fields) kept in the summary because no section holds them
	json    bool // the output was a JSON object
}

// maxAnchorNesting is how deep "anchors" objects inside the summarizer's JSON are read.
const maxAnchorNesting = 4

func (p *anchorParser) parseJSON(text string) bool {
	if !strings.HasPrefix(text, "{") {
		return false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &obj); err != nil {
		return false
	}
	p.json = true
	var visit func(map[string]json.RawMessage, int)
	visit = func(o map[string]json.RawMessage, depth int) {
		for k, v := range o {
			key := normalizeKey(k)
			if key == "summary" || key == "prose" {
				var s string
				if json.Unmarshal(v, &s) == nil {
					p.summary.WriteString(s + "\n")
				}
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
			s, ok := jsonText(v)
			t, known := jsonAliases[key]
			switch {
			case !ok:
			case known:
				setAnchor(p.found, t, s)
			case strings.TrimSpace(s) != "":
				p.summary.WriteString(k + ": " + s + "\n") // unknown field: keep it
				p.stray++
			}
		}
	}
	visit(obj, 0)
	return true
}

// jsonText reads a JSON string, or a list of strings as "- " items.
func jsonText(v json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, true
	}
	var list []string
	if json.Unmarshal(v, &list) != nil {
		return "", false
	}
	if len(list) == 1 {
		return list[0], true
	}
	var b strings.Builder
	for _, it := range list {
		if it = textcut.OneLine(it); it != "" {
			b.WriteString("- " + it + "\n")
		}
	}
	return b.String(), true
}

// header kinds a line can open.
const (
	headerNone = iota
	headerAnchors
	headerSummary
	headerAnchor
)

// parseHeader recognizes the header forms ParseAnchorsAndSummary documents. rest is the text
// after the header on the same line.
func parseHeader(line string) (kind int, t AnchorType, rest string) {
	if line == "" || line[0] == ' ' || line[0] == '\t' {
		return headerNone, "", ""
	}
	if line[0] == '#' {
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level > 4 || len(line) == level || line[level] != ' ' {
			return headerNone, "", ""
		}
		title := strings.TrimSpace(line[level:])
		title = strings.TrimSuffix(strings.TrimPrefix(title, "**"), "**")
		title = strings.TrimSpace(strings.TrimSuffix(title, ":"))
		return labelKind(title, true)
	}
	s, bullet := line, false
	if strings.HasPrefix(s, "- ") || strings.HasPrefix(s, "* ") {
		s, bullet = s[2:], true
	}
	var label string
	if inner, ok := strings.CutPrefix(s, "**"); ok {
		i := strings.Index(inner, "**")
		if i <= 0 {
			return headerNone, "", ""
		}
		label, rest = inner[:i], inner[i+2:]
		switch {
		case strings.HasSuffix(label, ":"): // **label:**
			label = label[:len(label)-1]
		case strings.HasPrefix(rest, ":"): // **label**:
			rest = rest[1:]
		case strings.TrimSpace(rest) == "" && !bullet: // **Summary** alone on its line
			if k, _, _ := labelKind(label, true); k == headerSummary || k == headerAnchors {
				return k, "", ""
			}
			return headerNone, "", ""
		default:
			return headerNone, "", ""
		}
	} else {
		i := strings.IndexByte(s, ':')
		if i <= 0 {
			return headerNone, "", ""
		}
		label, rest = s[:i], s[i+1:]
	}
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return headerNone, "", "" // "user_intent:x" or a URL-like token is text
	}
	kind, t, _ = labelKind(label, false)
	if bullet && kind != headerAnchor {
		return headerNone, "", "" // "- Summary: ..." is a list item, not the summary
	}
	return kind, t, strings.TrimSpace(rest)
}

// labelKind is the header a label names: an anchor's canonical name, "Summary" or, for a
// heading, "Anchors".
func labelKind(label string, heading bool) (int, AnchorType, string) {
	if t, ok := anchorType(label); ok {
		return headerAnchor, t, ""
	}
	switch {
	case strings.EqualFold(label, "summary"):
		return headerSummary, "", ""
	case strings.EqualFold(label, "anchors") && heading:
		return headerAnchors, "", ""
	}
	return headerNone, "", ""
}

// isFence reports whether a line opens or closes a code fence. Only unindented fences count:
// the indented content formatAnchors writes can hold any text, an unbalanced fence too.
func isFence(line string) bool {
	return strings.HasPrefix(line, "```") || strings.HasPrefix(line, "~~~")
}

// Line-parser states.
const (
	sectionNone    = iota // before any header, or a stretch no section holds
	sectionAnchors        // after "## Anchors", before the first anchor
	sectionAnchor
	sectionSummary
)

func (p *anchorParser) parseLines(text string) {
	state := sectionNone
	var cur AnchorType
	var curLines []string
	blanks := 0 // blank lines seen inside the current anchor
	inFence, sawHeader := false, false
	flush := func() {
		if state == sectionAnchor {
			setAnchor(p.found, cur, strings.Join(curLines, "\n"))
		}
		cur, curLines, blanks = "", curLines[:0], 0
	}
	for raw := range strings.SplitSeq(text, "\n") {
		line := strings.TrimRightFunc(raw, unicode.IsSpace)
		if !inFence {
			kind, t, rest := parseHeader(line)
			if state == sectionSummary && kind != headerAnchors {
				// Inside the summary only "## Anchors" opens a section: the prose can say
				// "Summary:" or "next_step: ..." without being misfiled.
				kind = headerNone
			}
			if kind != headerNone {
				flush()
				sawHeader = true
				switch kind {
				case headerAnchors:
					state = sectionAnchors
				case headerSummary:
					state = sectionSummary
					if rest != "" {
						p.summary.WriteString(rest + "\n")
					}
				case headerAnchor:
					state, cur = sectionAnchor, t
					if rest != "" {
						curLines = append(curLines, rest)
					}
				}
				continue
			}
		}
		fence := isFence(line)
		if state == sectionAnchor {
			switch {
			case line == "":
				blanks++
				continue
			case blanks > 0 && !inFence && !fence && line[0] != ' ' && line[0] != '\t' && prose.ListMarkerLen(line) == 0:
				// A blank line then unindented text that is not a list item: the anchor
				// has ended, and this text belongs to no section.
				flush()
				state = sectionNone
			default:
				for ; blanks > 0; blanks-- {
					curLines = append(curLines, "")
				}
				curLines = append(curLines, stripIndent(line))
				if fence {
					inFence = !inFence
				}
				continue
			}
		}
		if fence {
			inFence = !inFence
		}
		switch state {
		case sectionSummary:
			p.summary.WriteString(line + "\n")
		default:
			if line != "" {
				p.stray++
			}
			// Lines outside any section keep their place relative to the summary.
			p.summary.WriteString(line + "\n")
		}
	}
	flush()
	if !sawHeader {
		p.stray = 0 // no structure at all: the whole reply is the summary
	}
}

// stripIndent removes the indentation formatAnchors adds to continuation lines (two
// spaces, or a tab), and no more, so indented code inside an anchor keeps its shape.
func stripIndent(line string) string {
	switch {
	case strings.HasPrefix(line, "  "):
		return line[2:]
	case strings.HasPrefix(line, " "), strings.HasPrefix(line, "\t"):
		return line[1:]
	}
	return line
}

func setAnchor(found map[AnchorType]string, t AnchorType, content string) {
	content = strings.TrimSpace(content)
	if content == "" {
		content = notAvailable
	}
	if prev, ok := found[t]; ok && prev != notAvailable && content != notAvailable {
		content = prev + "\n" + content // the same anchor twice: keep both
	} else if ok && content == notAvailable {
		return
	}
	found[t] = strings.TrimSpace(textcut.Head(content, anchorMaxChars(t)))
}

// fillAnchors returns the five anchors in canonical order, N/A where found has none.
func fillAnchors(found map[AnchorType]string) []Anchor {
	out := make([]Anchor, 0, len(AnchorTypes))
	for _, t := range AnchorTypes {
		c, ok := found[t]
		if !ok || strings.TrimSpace(c) == "" {
			c = notAvailable
		}
		out = append(out, Anchor{Type: t, Content: c})
	}
	return out
}
