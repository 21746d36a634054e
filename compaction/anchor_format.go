package compaction

import (
	"strings"
	"unicode"
)

// formatAnchors renders anchors in the "- type: content" form the parser reads back
// exactly: a content that is a list of "- " items goes on the lines below its header, and
// every continuation line is indented by two spaces, so no line of content can be taken
// for a header.
func formatAnchors(anchors []Anchor) string {
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

// formatAnchorsWithin is formatAnchors in at most about max bytes: when the anchors do not
// fit, every anchor gives up bytes in proportion to its size, the middle of its list first
// (its oldest and newest items are kept, as the merge keeps them). A small window cannot
// afford the anchors a long session gathers; the stored anchors keep them all.
func formatAnchorsWithin(anchors []Anchor, max int) string {
	full := formatAnchors(anchors)
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
	return formatAnchors(out)
}
