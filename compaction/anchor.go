package compaction

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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

// MaxDecisionChars bounds key_decision and tried_solution, which keep more, shorter items
// than the others: the decisions and failed attempts of a long session are spread over it,
// each is a sentence or an error line, and an agent that forgets them repeats them.
const MaxDecisionChars = 3000

// AnchorMaxChars is the bound of an anchor of type t.
func AnchorMaxChars(t AnchorType) int {
	if t == AnchorKeyDecision || t == AnchorTriedSolution {
		return MaxDecisionChars
	}
	return MaxAnchorChars
}

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
		if it = oneLine(it); it != "" {
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
// the indented content FormatAnchors writes can hold any text, an unbalanced fence too.
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
			case blanks > 0 && !inFence && !fence && line[0] != ' ' && line[0] != '\t' && !bulletPrefix.MatchString(line):
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

// stripIndent removes the indentation FormatAnchors adds to continuation lines (two
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
		content = NotAvailable
	}
	if prev, ok := found[t]; ok && prev != NotAvailable && content != NotAvailable {
		content = prev + "\n" + content // the same anchor twice: keep both
	} else if ok && content == NotAvailable {
		return
	}
	found[t] = strings.TrimSpace(truncateUTF8(content, AnchorMaxChars(t)))
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

// FormatAnchors renders anchors in the "- type: content" form the parser reads back
// exactly: a content that is a list of "- " items goes on the lines below its header, and
// every continuation line is indented by two spaces, so no line of content can be taken
// for a header.
func FormatAnchors(anchors []Anchor) string {
	var b strings.Builder
	for _, a := range anchors {
		c := strings.TrimSpace(a.Content)
		b.WriteString("- ")
		b.WriteString(string(a.Type))
		b.WriteByte(':')
		if !strings.HasPrefix(c, "- ") {
			var line string
			line, c, _ = strings.Cut(c, "\n")
			if line = strings.TrimRightFunc(line, unicode.IsSpace); line != "" {
				b.WriteString(" " + line)
			}
		}
		if c != "" {
			for line := range strings.SplitSeq(c, "\n") {
				b.WriteByte('\n')
				if line = strings.TrimRightFunc(line, unicode.IsSpace); line != "" {
					b.WriteString("  " + line)
				}
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// FormatAnchorsWithin is FormatAnchors in at most about max bytes: when the anchors do not
// fit, every anchor gives up bytes in proportion to its size, the middle of its list first
// (its oldest and newest items are kept, as the merge keeps them). A small window cannot
// afford the anchors a long session gathers; the stored anchors keep them all.
func FormatAnchorsWithin(anchors []Anchor, max int) string {
	full := FormatAnchors(anchors)
	if len(full) <= max {
		return full
	}
	scale := float64(max) / float64(len(full))
	out := make([]Anchor, len(anchors))
	for i, a := range anchors {
		out[i] = a
		if !a.Available() {
			continue
		}
		limit := int(float64(len(a.Content)) * scale)
		if len(a.Content) <= limit {
			continue
		}
		l := splitItems(a.Content)
		// All the items are candidates, split between the oldest and the newest, so the
		// newest give way from the middle, not the end.
		head, _ := anchorBounds(a.Type)
		head = min(head, (len(l.items)+1)/2)
		out[i].Content = boundItems(nil, l.items, l.elided, head, len(l.items)-head, limit)
	}
	return FormatAnchors(out)
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

// MergeAnchors merges new anchors into old ones. Each anchor's content is a list of items
// (its "- " bullets, or its lines); the result holds all five types, each the de-duplicated
// union of old and new items, oldest first, bounded to its oldest and newest items with an
// elision marker in between, within MaxAnchorChars. It never nests: merging a merge result
// again gives a flat list. Where they apply:
//   - user_intent keeps more of its oldest items, the task, than the other anchors do;
//   - an item a newer one restates with more detail (the older is a prefix of the newer)
//     is replaced by it;
//   - execution_progress's trail of files ("files edited: ...; created: ...; read: ...")
//     and its tool-call counts ("tool calls: bash x4, ...") merge into one item each;
//   - next_step is the newest plan when the new anchors have one: a plan supersedes the
//     one before it.
func MergeAnchors(old, new []Anchor) []Anchor {
	found := make(map[AnchorType]string, len(AnchorTypes))
	for _, t := range AnchorTypes {
		oldList := listsOf(old, t)
		newList := listsOf(new, t)
		if t == AnchorNextStep && len(newList.items) > 0 {
			oldList = itemList{marker: -1}
		}
		if len(oldList.items)+len(newList.items) == 0 {
			continue
		}
		found[t] = mergeItems(t, oldList, newList)
	}
	return fillAnchors(found)
}

// itemList is an anchor's items, with the number of items an earlier merge elided and where.
type itemList struct {
	items  []string
	elided int
	marker int // the index of the first item after the elision marker; -1 for none
}

// listsOf is the items of the available anchors of type t in anchors.
func listsOf(anchors []Anchor, t AnchorType) itemList {
	l := itemList{marker: -1}
	for _, a := range anchors {
		if a.Type == t && a.Available() {
			its := splitItems(a.Content)
			if its.marker >= 0 && l.marker < 0 {
				l.marker = len(l.items) + its.marker
			}
			l.items, l.elided = append(l.items, its.items...), l.elided+its.elided
		}
	}
	return l
}

// Bounds of a merged anchor: how many of its oldest and newest items are kept.
func anchorBounds(t AnchorType) (head, tail int) {
	switch t {
	case AnchorUserIntent:
		return 12, 8 // the task's items first, then the latest instructions
	case AnchorNextStep:
		return 6, 2
	case AnchorKeyDecision:
		return 3, 12
	case AnchorTriedSolution:
		return 3, 12
	default:
		return 3, 10
	}
}

// maxMergeItems bounds the items one side of a merge contributes before de-duplication
// (which compares every pair): the middle ones are elided anyway.
const maxMergeItems = 200

// mergeItems de-duplicates old then new items and renders the bounded list.
func mergeItems(t AnchorType, old, new itemList) string {
	old = capItems(old)
	new = capItems(new)
	var trail *fileTrail
	var counts *callCounts
	kept := make([]string, 0, len(old.items)+len(new.items))
	keys := make([]string, 0, cap(kept))
	add := func(it string) {
		if t == AnchorExecutionProgress {
			if ft, ok := parseTrail(it); ok {
				if trail == nil {
					trail = &fileTrail{}
				}
				trail.merge(ft)
				return
			}
			if cc, ok := parseCounts(it); ok {
				if counts == nil {
					counts = &callCounts{}
				}
				counts.merge(cc)
				return
			}
		}
		k := itemKey(t, it)
		if k == "" {
			return
		}
		for i, prev := range keys {
			switch {
			case prev == k:
				return
			case extends(k, prev): // the new item restates the kept one with more detail
				kept[i], keys[i] = it, k
				return
			case extends(prev, k):
				return
			case t == AnchorKeyDecision && restates(k, prev):
				// "Currently working on X; the root cause is R" and "The root cause is R" are
				// one decision: the shorter statement stays, where it was first seen.
				if len(k) < len(prev) {
					kept[i], keys[i] = it, k
				}
				return
			}
		}
		kept, keys = append(kept, it), append(keys, k)
	}
	headLimit := -1 // items after an earlier elision are newer than the elided ones
	for i, it := range old.items {
		if i == old.marker {
			headLimit = len(kept)
		}
		add(it)
	}
	for _, it := range new.items {
		add(it)
	}
	var fixed []string // items shown first and never elided
	if trail != nil {
		fixed = append(fixed, trail.String())
	}
	if counts != nil {
		fixed = append(fixed, counts.String())
	}
	head, tail := anchorBounds(t)
	if headLimit >= 0 {
		head = min(head, headLimit)
	}
	elided := max(old.elided, new.elided)
	if t == AnchorKeyDecision {
		kept, elided, tail = thinDecisions(kept, elided, head, tail)
		kept, elided, tail = shedWeakDecisions(fixed, kept, elided, head, tail, AnchorMaxChars(t))
	}
	// A marker in the new anchors is most likely the old one copied (a model restating the
	// previous anchors): the larger count, not the sum.
	return boundItems(fixed, kept, elided, head, tail, AnchorMaxChars(t))
}

// maxStrongDecisions is how many decisions from the middle of a long session key_decision
// keeps besides its oldest and newest items.
const maxStrongDecisions = 14

// thinDecisions keeps, of the decisions between the oldest head and the newest tail ones,
// the newest maxStrongDecisions that commit to an approach or locate the problem (see
// strongDecision) instead of eliding them all: a decision taken in the middle of a long
// session still holds at its end, a passing observation does not. The kept ones are shown
// after the elision marker, in order, as part of the tail.
func thinDecisions(items []string, elided, head, tail int) ([]string, int, int) {
	if len(items) <= head+tail {
		return items, elided, tail
	}
	middle := items[head : len(items)-tail]
	keep := make([]bool, len(middle))
	n := 0
	for i := len(middle) - 1; i >= 0 && n < maxStrongDecisions; i-- {
		if strongDecision(middle[i]) {
			keep[i] = true
			n++
		}
	}
	out := make([]string, 0, head+n+tail)
	out = append(out, items[:head]...)
	for i, it := range middle {
		if keep[i] {
			out = append(out, it)
		} else {
			elided++
		}
	}
	out = append(out, items[len(items)-tail:]...)
	return out, elided, tail + n
}

// shedWeakDecisions makes room within max bytes by eliding, oldest first, the decisions
// after the head that are not strong (an observation, a style note), except the newest
// keepNewestDecisions: otherwise the byte bound would cut the strong ones thinDecisions kept.
func shedWeakDecisions(fixed, items []string, elided, head, tail, max int) ([]string, int, int) {
	size := func(list []string) int {
		n := len(renderItems(fixed)) + 40 // the elision marker
		for _, it := range list {
			n += len(it) + 4
		}
		return n
	}
	h := min(head, len(items))
	for size(items) > max {
		cut := -1
		for i := h; i < len(items)-keepNewestDecisions; i++ {
			if !strongDecision(items[i]) {
				cut = i
				break
			}
		}
		if cut < 0 {
			break
		}
		items = append(items[:cut:cut], items[cut+1:]...)
		elided++
		if tail > 0 && len(items)-h < tail {
			tail--
		}
	}
	return items, elided, tail
}

// keepNewestDecisions is how many of the newest decisions are kept whatever they say.
const keepNewestDecisions = 3

// strongDecisionMarkers mark a decision that holds beyond the step it was taken in: a
// change of approach, the located cause, the fix chosen, a change committed to.
var strongDecisionMarkers = [...]string{" instead.", " instead,", " instead:", " instead;", "instead of using", "rather than", "decided", "decide to", "i chose", "go with", "opt for", "switch to",
	"the fix is", "the fix should", "the fix will", "the solution is", "the best approach", "a better approach", "the right approach",
	"root cause", "real issue", "real problem", "not specific to", "happens with",
	"the culprit", "the right way", "the correct way", "i will add", "i'll add", "let's add", "we need to add", "i need to add"}

// strongDecision reports whether a key_decision item is a strong one.
func strongDecision(it string) bool {
	l := strings.ToLower(it)
	for _, m := range strongDecisionMarkers {
		if strings.Contains(l, m) {
			return true
		}
	}
	return false
}

// capItems keeps the first and last maxMergeItems/2 items, counting the others as elided.
func capItems(l itemList) itemList {
	if len(l.items) <= maxMergeItems {
		return l
	}
	half := maxMergeItems / 2
	out := append(append([]string(nil), l.items[:half]...), l.items[len(l.items)-half:]...)
	marker := half
	if l.marker >= 0 && l.marker < half {
		marker = l.marker
	}
	return itemList{items: out, elided: l.elided + len(l.items) - maxMergeItems, marker: marker}
}

// extends reports whether item key k restates shorter key prev with more words after it.
func extends(k, prev string) bool {
	if len(k) <= len(prev) || !strings.HasPrefix(k, prev) {
		return false
	}
	c := k[len(prev)]
	return c == ' ' || c == ',' || c == ';' || c == ':' || c == '(' || c == '-'
}

// minRestatedKey is the shortest decision whose appearance inside another makes them one.
const minRestatedKey = 40

// restates reports whether one decision key holds the other whole (both long enough to mean
// something on their own).
func restates(a, b string) bool {
	if len(a) < minRestatedKey || len(b) < minRestatedKey {
		return false
	}
	return strings.Contains(a, b) || strings.Contains(b, a)
}

// itemKey is what two items are compared by: case and white space do not matter, nor
// trailing punctuation or a "..." left by clipping; in user_intent neither do numbers, so a
// harness reminder that differs only in a count ("found 2 actions") is kept once, nor
// the "later: " that marks an instruction given after the task.
func itemKey(t AnchorType, it string) string {
	k := foldKey(it, t == AnchorUserIntent)
	k = strings.TrimRight(k, ".,;: ")
	if t == AnchorTriedSolution {
		// The same error reached by another command, or with other counts or a "(full
		// result: ID)" note, is the same failed attempt.
		if i := strings.LastIndex(k, " -> "); i >= 0 {
			k = k[i+len(" -> "):]
		}
		if i := strings.LastIndex(k, " ("); i > 0 && strings.HasSuffix(k, ")") {
			k = k[:i]
		}
	}
	if t == AnchorUserIntent {
		k = strings.TrimPrefix(k, "later: ") // an instruction repeated later is the same one
	}
	return k
}

// foldKey is strings.ToLower(strings.Join(strings.Fields(it), " ")) in one pass, with each
// run of digits written as one "#" when digits is set: keys are made for every item of
// every merge, and the three passes cost more than the rest of a merge.
func foldKey(it string, digits bool) string {
	var b strings.Builder
	b.Grow(len(it))
	space, inDigits := false, false
	for _, r := range it {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			inDigits = false
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if digits && r >= '0' && r <= '9' {
			if !inDigits {
				b.WriteByte('#')
			}
			inDigits = true
			continue
		}
		inDigits = false
		if r < utf8.RuneSelf {
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			}
			b.WriteByte(byte(r))
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// elisionMarker is the item that stands for the items a merge left out.
func elisionMarker(n int) string {
	if n == 1 {
		return "[... 1 item elided ...]"
	}
	return fmt.Sprintf("[... %d items elided ...]", n)
}

var elisionItem = regexp.MustCompile(`^\[\.\.\. (\d{1,9}) items? elided \.\.\.\]$`)

// bulletPrefix matches a list item's marker: "- ", "* ", "• " or "1. ".
var bulletPrefix = regexp.MustCompile(`^(?:[-*•]|\d{1,3}[.)])(?:\s+|$)`)

// splitItems reads an anchor's content as a list: each "- " bullet with the lines under it
// is one item, or, in a content with no bullets, each line. Elision markers are counted,
// not returned.
func splitItems(content string) itemList {
	l := itemList{marker: -1}
	lines := strings.Split(strings.TrimSpace(content), "\n")
	bulleted := false
	for _, line := range lines {
		if bulletPrefix.MatchString(line) || (strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "  ") && bulletPrefix.MatchString(line[1:])) {
			bulleted = true
			break
		}
	}
	cur := -1
	for _, line := range lines {
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " \t"))
		if loc := bulletPrefix.FindStringIndex(t); bulleted && loc != nil && indent <= 1 {
			t = strings.TrimSpace(t[loc[1]:])
			if t == "" {
				continue
			}
		} else if bulleted && cur >= 0 {
			l.items[cur] += "\n" + t // a line under a bullet continues it
			continue
		}
		for {
			// The old extractive format nested "Earlier: " once per compaction.
			rest, ok := strings.CutPrefix(t, "Earlier: ")
			if !ok {
				break
			}
			t = rest
		}
		if m := elisionItem.FindStringSubmatch(t); m != nil {
			n, _ := strconv.Atoi(m[1])
			l.elided += n
			if l.marker < 0 {
				l.marker = len(l.items)
			}
			cur = -1
			continue
		}
		l.items = append(l.items, t)
		cur = len(l.items) - 1
	}
	return l
}

// renderItems writes items as the anchor content the parser and splitItems read back: a
// single one-line item as it is, otherwise "- " bullets with continuation lines indented.
func renderItems(items []string) string {
	if len(items) == 1 && !strings.Contains(items[0], "\n") {
		return items[0]
	}
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("- " + strings.ReplaceAll(it, "\n", "\n  "))
	}
	return b.String()
}

// boundItems renders fixed items, then the first head and the last tail items with an
// elision marker for the rest, within max bytes: newest items give way first (down to two),
// then oldest ones (down to one), then every item is clipped.
func boundItems(fixed, items []string, elided, head, tail, max int) string {
	h := min(head, len(items))
	t := min(tail, len(items)-h)
	build := func(clipTo int) string {
		list := make([]string, 0, len(fixed)+h+t+1)
		list = append(list, fixed...)
		list = append(list, items[:h]...)
		if n := elided + len(items) - h - t; n > 0 {
			list = append(list, elisionMarker(n))
		}
		list = append(list, items[len(items)-t:]...)
		if clipTo > 0 {
			for i := range list {
				if !elisionItem.MatchString(list[i]) { // a clipped marker would read as an item
					list[i] = clip(list[i], clipTo)
				}
			}
		}
		return renderItems(list)
	}
	out := build(0)
	for len(out) > max {
		switch {
		case t > 2:
			t--
		case h > 1:
			h--
		case t > 1:
			t--
		default:
			n := len(fixed) + h + t + 1
			out = build(max/n - 16)
			if len(out) > max {
				out = strings.TrimSpace(truncateUTF8(out, max))
			}
			return out
		}
		out = build(0)
	}
	return out
}

// fileTrail is execution_progress's list of the files an agent touched, by kind:
// "files edited: a.py, b/c.py; created: reproduce.py; read: x.py; deleted: reproduce.py".
type fileTrail struct {
	files [len(trailKinds)][]string
	more  [len(trailKinds)]int // files elided from each list
	// bases counts each kind's files by base name: two paths can name the same file only
	// with the same base name, so most lookups end here.
	bases [len(trailKinds)]map[string]int
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

var trailKinds = [...]string{"edited", "created", "read", "deleted"}

const (
	trailEdited = iota
	trailCreated
	trailRead
	trailDeleted
)

// trailCaps is how many files of each kind the trail lists before eliding the middle ones.
var trailCaps = [len(trailKinds)]int{20, 10, 12, 8}

const maxTrailChars = 800

var moreFiles = regexp.MustCompile(`^\+(\d{1,9}) more$`)

// parseTrail reads a trail item.
func parseTrail(it string) (fileTrail, bool) {
	var ft fileTrail
	rest, ok := strings.CutPrefix(it, "files ")
	if !ok || strings.Contains(it, "\n") {
		return ft, false
	}
	for seg := range strings.SplitSeq(rest, "; ") {
		kind, list, ok := strings.Cut(seg, ": ")
		k := -1
		for i, name := range trailKinds {
			if kind == name {
				k = i
			}
		}
		if !ok || k < 0 {
			return ft, false
		}
		for f := range strings.SplitSeq(list, ", ") {
			if m := moreFiles.FindStringSubmatch(f); m != nil {
				n, _ := strconv.Atoi(m[1])
				ft.more[k] += n
			} else if f = strings.TrimSpace(f); f != "" {
				ft.add(k, f)
			}
		}
	}
	return ft, true
}

// sameFile reports whether two paths name the same file as far as a trail can tell: the
// agent writes "/testbed/a/b.py" in one tool and "a/b.py" in another.
func sameFile(a, b string) bool {
	return a == b || pathSuffix(a, b) || pathSuffix(b, a)
}

// pathSuffix reports whether path p ends with "/"+s.
func pathSuffix(p, s string) bool {
	return len(p) > len(s) && p[len(p)-len(s)-1] == '/' && strings.HasSuffix(p, s)
}

// maxTrailFiles bounds the files a trail holds per kind: each add compares with every one,
// and a rendered trail shows a few dozen; past it, files are only counted.
const maxTrailFiles = 400

func (ft *fileTrail) has(k int, f string) bool {
	if ft.bases[k][baseName(f)] == 0 {
		return false
	}
	for _, g := range ft.files[k] {
		if sameFile(g, f) {
			return true
		}
	}
	return false
}

func (ft *fileTrail) remove(k int, f string) {
	if !ft.has(k, f) {
		return
	}
	out := ft.files[k][:0]
	for _, g := range ft.files[k] {
		if sameFile(g, f) {
			ft.bases[k][baseName(g)]--
		} else {
			out = append(out, g)
		}
	}
	ft.files[k] = out
}

// add records a file: a file created is not listed as edited or read too, one edited is not
// listed as read.
func (ft *fileTrail) add(k int, f string) {
	switch k {
	case trailCreated:
		ft.remove(trailEdited, f)
		ft.remove(trailRead, f)
	case trailEdited:
		if ft.has(trailCreated, f) {
			return
		}
		ft.remove(trailRead, f)
	case trailRead:
		if ft.has(trailCreated, f) || ft.has(trailEdited, f) {
			return
		}
	}
	switch {
	case ft.has(k, f):
	case len(ft.files[k]) >= maxTrailFiles:
		ft.more[k]++
	default:
		ft.files[k] = append(ft.files[k], f)
		if ft.bases[k] == nil {
			ft.bases[k] = map[string]int{}
		}
		ft.bases[k][baseName(f)]++
	}
}

func (ft *fileTrail) merge(o fileTrail) {
	for k := range trailKinds {
		ft.more[k] += o.more[k]
		for _, f := range o.files[k] {
			ft.add(k, f)
		}
	}
}

func (ft *fileTrail) empty() bool {
	for k := range trailKinds {
		if len(ft.files[k])+ft.more[k] > 0 {
			return false
		}
	}
	return true
}

// String renders the trail within maxTrailChars, eliding the middle of long lists (read
// files first).
func (ft *fileTrail) String() string {
	caps := trailCaps
	for {
		s := ft.render(caps)
		if len(s) <= maxTrailChars {
			return s
		}
		shrunk := false
		for _, k := range [...]int{trailRead, trailDeleted, trailCreated, trailEdited} {
			if caps[k] > 2 {
				caps[k] /= 2
				shrunk = true
				break
			}
		}
		if !shrunk {
			return clip(s, maxTrailChars-3)
		}
	}
}

func (ft *fileTrail) render(caps [len(trailKinds)]int) string {
	var b strings.Builder
	for k, kind := range trailKinds {
		files, hidden := ft.files[k], ft.more[k]
		if len(files)+hidden == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("files ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(kind + ": ")
		// The first files, "+N more" for the elided ones, the last files.
		first, from := min(3, len(files)), min(3, len(files))
		if len(files) > caps[k] {
			first = min(3, caps[k]/2)
			from = len(files) - (caps[k] - first)
			hidden += from - first
		}
		list := append([]string(nil), files[:first]...)
		if hidden > 0 {
			list = append(list, fmt.Sprintf("+%d more", hidden))
		}
		list = append(list, files[from:]...)
		b.WriteString(strings.Join(list, ", "))
	}
	return b.String()
}

// callCounts is execution_progress's count of tool calls by tool: "tool calls: bash x4,
// str_replace_editor x2". Each summary counts only its own span, so merged counts add up.
type callCounts struct {
	names []string
	n     map[string]int
}

var countsItem = regexp.MustCompile(`^tool calls: ((?:[\w.:/-]+ x\d{1,9})(?:, [\w.:/-]+ x\d{1,9})*)$`)

func parseCounts(it string) (callCounts, bool) {
	m := countsItem.FindStringSubmatch(it)
	if m == nil {
		return callCounts{}, false
	}
	cc := callCounts{n: map[string]int{}}
	for part := range strings.SplitSeq(m[1], ", ") {
		i := strings.LastIndex(part, " x")
		n, err := strconv.Atoi(part[i+2:])
		if err != nil {
			return callCounts{}, false
		}
		cc.add(part[:i], n)
	}
	return cc, true
}

func (cc *callCounts) add(name string, n int) {
	if cc.n == nil {
		cc.n = map[string]int{}
	}
	if _, ok := cc.n[name]; !ok {
		cc.names = append(cc.names, name)
	}
	cc.n[name] += n
}

func (cc *callCounts) merge(o callCounts) {
	for _, name := range o.names {
		cc.add(name, o.n[name])
	}
}

// String lists the tools most used first, at most eight.
func (cc *callCounts) String() string {
	names := append([]string(nil), cc.names...)
	sort.SliceStable(names, func(i, j int) bool { return cc.n[names[i]] > cc.n[names[j]] })
	parts := make([]string, 0, len(names))
	other := 0
	for i, n := range names {
		if i >= 8 {
			other += cc.n[n]
			continue
		}
		parts = append(parts, fmt.Sprintf("%s x%d", n, cc.n[n]))
	}
	if other > 0 {
		parts = append(parts, fmt.Sprintf("other x%d", other))
	}
	return "tool calls: " + strings.Join(parts, ", ")
}
