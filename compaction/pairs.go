package compaction

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

// RepairToolPairs returns msgs with every orphan removed: a tool result whose call is not
// in an earlier assistant message of msgs is dropped; a tool call without a result later in
// msgs is dropped from its assistant message (the message too, when nothing else is left).
// The input is not modified; the result shares unchanged messages with it.
func RepairToolPairs(msgs []Message) []Message {
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
