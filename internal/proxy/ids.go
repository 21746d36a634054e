package proxy

import (
	"strconv"

	"github.com/harness9/compaction-operator/compaction"
)

// toolCallIDs maps the tool call IDs uniqueToolCallIDs made back to the agent's.
type toolCallIDs map[string]string

// uniqueToolCallIDs returns history with every tool call ID made unique. Some model servers
// (local ones especially) number calls per turn, so "call_0" comes back every turn; the
// engine keys offloads and pairs by ID and refuses a history that reuses one. A reused ID
// becomes ID~N (its N-th use) and each tool result is paired by position, with the latest
// call before it of its ID, so the same history always gets the same IDs and a
// conversation's later requests agree with its earlier ones. history itself, and a nil map,
// are returned when no ID is reused.
func uniqueToolCallIDs(history []compaction.Message) ([]compaction.Message, toolCallIDs) {
	seen := map[string]int{}
	reused := false
	for i := range history {
		for _, tc := range history[i].ToolCalls {
			seen[tc.ID]++
			if seen[tc.ID] > 1 {
				reused = true
			}
		}
	}
	if !reused {
		return history, nil
	}
	taken := make(map[string]bool, len(seen))
	for id := range seen {
		taken[id] = true
	}
	uses := map[string]int{}
	latest := map[string]string{}
	ids := toolCallIDs{}
	out := make([]compaction.Message, len(history))
	copy(out, history)
	for i := range out {
		m := &out[i]
		switch {
		case len(m.ToolCalls) > 0:
			cloned := false
			for j, tc := range m.ToolCalls {
				uses[tc.ID]++
				id := tc.ID
				if uses[tc.ID] > 1 && seen[tc.ID] > 1 {
					n := uses[tc.ID]
					for id = tc.ID + "~" + strconv.Itoa(n); taken[id]; id = tc.ID + "~" + strconv.Itoa(n) {
						n++
					}
					taken[id] = true
					ids[id] = tc.ID
					if !cloned {
						*m = m.Clone()
						cloned = true
					}
					m.ToolCalls[j].ID = id
				}
				latest[tc.ID] = id
			}
		case m.Role == compaction.RoleTool && m.ToolCallID != "":
			if id, ok := latest[m.ToolCallID]; ok && id != m.ToolCallID {
				*m = m.Clone()
				m.ToolCallID = id
			}
		}
	}
	return out, ids
}

// restore returns view with the agent's own tool call IDs back in place.
func (ids toolCallIDs) restore(view []compaction.Message) []compaction.Message {
	if len(ids) == 0 {
		return view
	}
	out := make([]compaction.Message, len(view))
	copy(out, view)
	for i := range out {
		m := &out[i]
		if orig, ok := ids[m.ToolCallID]; ok {
			*m = m.Clone()
			m.ToolCallID = orig
		}
		cloned := false
		for j, tc := range m.ToolCalls {
			if orig, ok := ids[tc.ID]; ok {
				if !cloned {
					*m = m.Clone()
					cloned = true
				}
				m.ToolCalls[j].ID = orig
			}
		}
	}
	return out
}
