package compaction

import "fmt"

// systemPrefixLen is the number of leading system messages: they are always kept.
func systemPrefixLen(msgs []Message) int {
	n := 0
	for n < len(msgs) && msgs[n].Role == RoleSystem {
		n++
	}
	return n
}

// groupStart moves a cut index back so it does not fall between an assistant message and
// its tool results (including parallel calls): the cut lands on the assistant message.
// It never goes below lo; when it reaches lo while still inside a group, it moves forward
// past the group instead, so the returned index is a clean boundary or len(msgs).
func groupStart(msgs []Message, cut, lo int) int {
	c := cut
	for c > lo && c < len(msgs) && msgs[c].Role == RoleTool {
		c--
	}
	if c < len(msgs) && msgs[c].Role == RoleTool { // reached lo inside a group
		c = cut
		for c < len(msgs) && msgs[c].Role == RoleTool {
			c++
		}
	}
	return c
}

// splitHeadTail returns the spec's split: prefix = leading system messages,
// head = msgs[prefix : N-MinTail], tail = msgs[N-MinTail:], with the cut moved back to a
// tool-pair boundary so the tail keeps whole groups (it may hold more than MinTail).
func splitHeadTail(msgs []Message, minTail int) (prefix, head, tail []Message) {
	p := systemPrefixLen(msgs)
	cut := len(msgs) - minTail
	if cut <= p {
		return msgs[:p], nil, msgs[p:]
	}
	cut = groupStart(msgs, cut, p)
	return msgs[:p], msgs[p:cut], msgs[cut:]
}

// splitHalf splits the head at its middle on a tool-pair boundary.
func splitHalf(head []Message) (oldest, recent []Message) {
	mid := groupStart(head, len(head)/2, 0)
	if mid == 0 && len(head) > 1 {
		// The first group spans the middle: summarize that group rather than nothing.
		mid = 1
		for mid < len(head) && head[mid].Role == RoleTool {
			mid++
		}
	}
	return head[:mid], head[mid:]
}

// repairToolPairs returns msgs with every orphan removed: a tool result whose call is not
// in an earlier assistant message of msgs is dropped; a tool call without a result later in
// msgs is dropped from its assistant message (the message too, when nothing else is left).
// The input is not modified; the result shares unchanged messages with it.
func repairToolPairs(msgs []Message) []Message {
	results := make(map[string]int, 8)
	calls := make(map[string]bool, 8)
	for i := range msgs {
		for _, tc := range msgs[i].ToolCalls {
			calls[tc.ID] = true
		}
		if msgs[i].Role == RoleTool {
			results[msgs[i].ToolCallID]++
		}
	}
	out := make([]Message, 0, len(msgs))
	seenCall := make(map[string]bool, len(calls))
	answered := make(map[string]bool, len(results))
	for i := range msgs {
		m := msgs[i]
		switch {
		case m.Role == RoleTool:
			if !seenCall[m.ToolCallID] || answered[m.ToolCallID] {
				continue // orphaned (its call was cut) or a duplicate answer
			}
			answered[m.ToolCallID] = true
		case len(m.ToolCalls) > 0:
			kept := m.ToolCalls[:0:0]
			for _, tc := range m.ToolCalls {
				if results[tc.ID] > 0 {
					kept = append(kept, tc)
				}
			}
			if len(kept) != len(m.ToolCalls) {
				m = m.Clone()
				m.ToolCalls = kept
				if len(kept) == 0 {
					m.ToolCalls = nil
					if m.Content == "" && m.ContentParts == nil {
						continue
					}
				}
			}
			for _, tc := range m.ToolCalls {
				seenCall[tc.ID] = true
			}
		}
		out = append(out, m)
	}
	return out
}

// hasOrphans reports whether msgs breaks a tool pair; tests and the engine's own checks use it.
func hasOrphans(msgs []Message) bool {
	called := map[string]bool{}
	answered := map[string]bool{}
	for i := range msgs {
		for _, tc := range msgs[i].ToolCalls {
			called[tc.ID] = true
		}
		if msgs[i].Role == RoleTool {
			if !called[msgs[i].ToolCallID] || answered[msgs[i].ToolCallID] {
				return true
			}
			answered[msgs[i].ToolCallID] = true
		}
	}
	for id := range called {
		if !answered[id] {
			return true
		}
	}
	return false
}

// Contents of the synthetic tool results that close, in a view, a call the history does not
// answer where providers require it: right after the assistant message that made it.
const (
	InterruptedResult = "[no result: the tool call was interrupted before it returned]"
	lateResult        = "[the result of this call arrived later; it follows below]"
)

// lateResultPrefix opens a tool result shown as a user message because its call is not
// right before it in the view (the call was compacted, or other messages came between).
const lateResultPrefix = "[late result of tool call %s]\n"

// closeView makes a view acceptable to OpenAI- and Anthropic-style APIs without touching the
// history it came from: every tool call gets a result right after its assistant message (a
// synthetic one when the history has none there), a result that does not follow its call
// becomes a user message, and pin marks are removed. It returns msgs itself when nothing
// needs to change, which is the common case.
func closeView(msgs []Message) []Message {
	if viewClosed(msgs) {
		return msgs
	}
	answered := make(map[string]bool, 8) // results anywhere in the view
	for i := range msgs {
		if msgs[i].Role == RoleTool {
			answered[msgs[i].ToolCallID] = true
		}
	}
	out := make([]Message, 0, len(msgs)+4)
	var late []Message
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Pinned {
			m = m.Clone()
			m.Pinned = false
		}
		if m.Role == RoleTool { // not consumed by the group of its call below
			out = append(out, lateAsUser(&m))
			continue
		}
		out = append(out, m)
		if len(m.ToolCalls) == 0 {
			continue
		}
		own := make(map[string]bool, len(m.ToolCalls))
		for _, tc := range m.ToolCalls {
			own[tc.ID] = true
		}
		got := make(map[string]bool, len(m.ToolCalls))
		late = late[:0]
		j := i + 1
		for ; j < len(msgs) && msgs[j].Role == RoleTool; j++ {
			if id := msgs[j].ToolCallID; own[id] && !got[id] {
				got[id] = true
				out = append(out, msgs[j])
			} else {
				late = append(late, lateAsUser(&msgs[j]))
			}
		}
		for _, tc := range m.ToolCalls {
			if got[tc.ID] {
				continue
			}
			content := InterruptedResult
			if answered[tc.ID] {
				content = lateResult
			}
			out = append(out, Message{Role: RoleTool, ToolCallID: tc.ID, Content: content})
		}
		out = append(out, late...)
		i = j - 1
	}
	return out
}

// viewClosed reports whether closeView has nothing to do: no pin mark, and every
// assistant message's calls are answered, each once, by the tool messages right after it.
func viewClosed(msgs []Message) bool {
	for i := 0; i < len(msgs); i++ {
		m := &msgs[i]
		if m.Pinned || m.Role == RoleTool {
			return false // a tool message not consumed by a group below
		}
		if len(m.ToolCalls) == 0 {
			continue
		}
		j := i + 1
		for j < len(msgs) && msgs[j].Role == RoleTool {
			j++
		}
		group := msgs[i+1 : j]
		if len(group) != len(m.ToolCalls) {
			return false
		}
		for k := range group {
			if group[k].Pinned || !callsInclude(m.ToolCalls, group[k].ToolCallID) || idRepeated(group[:k], group[k].ToolCallID) {
				return false
			}
		}
		i = j - 1
	}
	return true
}

func callsInclude(calls []ToolCall, id string) bool {
	for i := range calls {
		if calls[i].ID == id {
			return true
		}
	}
	return false
}

func idRepeated(group []Message, id string) bool {
	for i := range group {
		if group[i].ToolCallID == id {
			return true
		}
	}
	return false
}

// lateAsUser shows a tool result whose call is not right before it as a user message, so no
// content is lost and no provider sees an orphaned result.
func lateAsUser(m *Message) Message {
	content := m.Content
	if content == "" && m.ContentParts != nil {
		content = string(m.ContentParts)
	}
	return Message{Role: RoleUser, Content: fmt.Sprintf(lateResultPrefix, m.ToolCallID) + content}
}

// openCalls returns open updated by span: the calls span makes without answering them are
// added, the calls it answers removed. At most maxOpenCalls are kept, the newest.
func openCalls(open []string, span []Message) []string {
	answered := map[string]bool{}
	for i := range span {
		if span[i].Role == RoleTool {
			answered[span[i].ToolCallID] = true
		}
	}
	out := make([]string, 0, len(open))
	for _, id := range open {
		if !answered[id] {
			out = append(out, id)
		}
	}
	for i := range span {
		for _, tc := range span[i].ToolCalls {
			if !answered[tc.ID] {
				out = append(out, tc.ID)
			}
		}
	}
	if len(out) > maxOpenCalls {
		out = out[len(out)-maxOpenCalls:]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// maxOpenCalls bounds the unanswered calls a session remembers past its watermark; a result
// that arrives after more than this many newer unanswered calls is rejected as an orphan.
const maxOpenCalls = 256
