package compaction

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction/internal/prose"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// mergeAnchors merges new anchors into old ones. Each anchor's content is a list of items
// (its "- " bullets, or its lines); the result holds all five types, each the de-duplicated
// union of old and new items, oldest first, bounded to its oldest and newest items with an
// elision marker in between, within maxAnchorChars. It never nests: merging a merge result
// again gives a flat list. Where they apply:
//   - user_intent keeps more of its oldest items, the task, than the other anchors do;
//   - an item a newer one restates with more detail (the older is a prefix of the newer)
//     is replaced by it;
//   - execution_progress's trail of files ("files edited: ...; created: ...; read: ...")
//     and its tool-call counts ("tool calls: bash x4, ...") merge into one item each;
//   - next_step is the newest plan when the new anchors have one: a plan supersedes the
//     one before it.
func mergeAnchors(old, new []Anchor) []Anchor {
	return (*extractMemo)(nil).mergeAnchors(old, new)
}

// mergeAnchors is the package's mergeAnchors, with each item's key read from m when m has
// it: a session's merges key the same kept items turn after turn.
func (m *extractMemo) mergeAnchors(old, new []Anchor) []Anchor {
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
		found[t] = m.mergeItems(t, oldList, newList)
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
func (m *extractMemo) mergeItems(t AnchorType, old, new itemList) string {
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
		k := m.itemKey(t, it)
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
		kept, elided, tail = shedWeakDecisions(fixed, kept, elided, head, tail, anchorMaxChars(t))
	}
	// A marker in the new anchors is most likely the old one copied (a model restating the
	// previous anchors): the larger count, not the sum.
	return boundItems(fixed, kept, elided, head, tail, anchorMaxChars(t))
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
		if prose.StrongDecision(middle[i]) {
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
			if !prose.StrongDecision(items[i]) {
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

// splitItems reads an anchor's content as a list: each "- " bullet with the lines under it
// is one item, or, in a content with no bullets, each line. Elision markers are counted,
// not returned.
func splitItems(content string) itemList {
	l := itemList{marker: -1}
	lines := strings.Split(strings.TrimSpace(content), "\n")
	bulleted := false
	for _, line := range lines {
		if prose.ListMarkerLen(line) > 0 || (strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "  ") && prose.ListMarkerLen(line[1:]) > 0) {
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
		if n := prose.ListMarkerLen(t); bulleted && n > 0 && indent <= 1 {
			t = strings.TrimSpace(t[n:])
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
					list[i] = textcut.Clip(list[i], clipTo)
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
				out = strings.TrimSpace(textcut.Head(out, max))
			}
			return out
		}
		out = build(0)
	}
	return out
}
