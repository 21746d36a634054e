package compaction

import (
	"bytes"
	"encoding/json"
)

// EqualMessages reports whether a and b are the same messages: every field, the ones the
// engine does not interpret included, so that a caller holding a may use it in place of b.
func EqualMessages(a, b []Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(&b[i]) {
			return false
		}
	}
	return true
}

// SharedTail is how many of the last messages of view are the last messages of sent, in the
// same order: the part of a view its caller has already, having sent it.
func SharedTail(view, sent []Message) int {
	n := 0
	for n < len(view) && n < len(sent) && view[len(view)-1-n].Equal(&sent[len(sent)-1-n]) {
		n++
	}
	return n
}

// Equal reports whether m and o are the same message: every field, including the Pinned mark
// and an explicit null content.
func (m *Message) Equal(o *Message) bool {
	if m.Role != o.Role || m.Content != o.Content || m.ToolCallID != o.ToolCallID || m.Name != o.Name ||
		m.Pinned != o.Pinned || m.nullContent != o.nullContent || !bytes.Equal(m.ContentParts, o.ContentParts) ||
		(m.ContentParts == nil) != (o.ContentParts == nil) || !equalExtra(m.Extra, o.Extra) || len(m.ToolCalls) != len(o.ToolCalls) {
		return false
	}
	for i := range m.ToolCalls {
		x, y := &m.ToolCalls[i], &o.ToolCalls[i]
		if x.ID != y.ID || x.Type != y.Type || x.Function != y.Function || !equalExtra(x.Extra, y.Extra) {
			return false
		}
	}
	return true
}

func equalExtra(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
