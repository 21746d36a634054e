package compaction

import (
	"fmt"
	"sort"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// TokenBudgetCompactor is the fallback compactor: no summarizer, only cuts. The progressive
// compactor uses Compact when the summarizer fails and CompactForce for the Emergency tier.
// Every cut lands on a tool-pair boundary and the result is repaired, so no tool call or
// result is ever orphaned.
type TokenBudgetCompactor struct {
	// Budget is the token estimate the result should fit.
	Budget int
	// MinTailMessages is the number of recent messages CompactForce keeps.
	MinTailMessages int
}

// truncationNotice tells the model that earlier context is gone, so it does not assume it
// still has it.
func truncationNotice(dropped int, why string) Message {
	return Message{Role: RoleUser, Content: fmt.Sprintf("%s\n%d earlier messages were removed to fit the context window (%s). Offloaded tool results can still be read back by their tool_call_id.", CompactionHeader, dropped, why)}
}

// Compact drops the oldest non-system messages, whole tool groups at a time, until the
// estimate fits the budget, always keeping at least MinTailMessages. It returns msgs itself
// when they already fit.
func (t TokenBudgetCompactor) Compact(msgs []Message) []Message {
	if EstimateTokens(msgs) <= t.Budget {
		return msgs[:len(msgs):len(msgs)]
	}
	p := systemPrefixLen(msgs)
	chars := 0
	for i := 0; i < p; i++ {
		chars += msgs[i].Chars()
	}
	limit := t.Budget * 4
	// Walk back from the end, keeping messages while they fit; the minimal tail is kept
	// regardless.
	minCut := len(msgs) - t.MinTailMessages
	if minCut < p {
		minCut = p
	}
	minCut = groupStart(msgs, minCut, p)
	cut := len(msgs)
	for i := len(msgs) - 1; i >= p; i-- {
		c := msgs[i].Chars()
		if i < minCut && chars+c > limit {
			break
		}
		chars += c
		cut = i
	}
	cut = groupStart(msgs, cut, p)
	if cut < len(msgs) && msgs[cut].Role == RoleTool { // could not move back: move forward
		for cut < len(msgs) && msgs[cut].Role == RoleTool {
			cut++
		}
	}
	return t.assemble(msgs, p, cut, "summarizer unavailable")
}

// CompactForce keeps the system messages and the minimal tail only, then shortens the
// largest remaining messages if that still does not fit the budget.
func (t TokenBudgetCompactor) CompactForce(msgs []Message) []Message {
	p := systemPrefixLen(msgs)
	cut := len(msgs) - t.MinTailMessages
	if cut < p {
		cut = p
	}
	cut = groupStart(msgs, cut, p)
	return t.assemble(msgs, p, cut, "emergency truncation")
}

func (t TokenBudgetCompactor) assemble(msgs []Message, p, cut int, why string) []Message {
	out := make([]Message, 0, p+1+len(msgs)-cut)
	out = append(out, msgs[:p]...)
	if dropped := cut - p; dropped > 0 {
		out = append(out, truncationNotice(dropped, why))
	}
	out = append(out, msgs[cut:]...)
	out = repairToolPairs(out)
	return shrinkToBudget(out, t.Budget, 0)
}

// minKeptChars is what shrinkToBudget leaves of a shortened message: enough to see what it was.
const minKeptChars = 1024

// shrinkToBudget shortens the largest non-system message contents at or after index from
// (keeping their start and end) until the estimate fits budget or nothing more can be cut.
// The input is not modified.
func shrinkToBudget(msgs []Message, budget, from int) []Message {
	excess := EstimateTokens(msgs)*4 - budget*4
	if excess <= 0 {
		return msgs
	}
	idx := make([]int, 0, len(msgs))
	for i := from; i < len(msgs); i++ {
		if msgs[i].Role != RoleSystem && len(msgs[i].Content) > minKeptChars {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return len(msgs[idx[a]].Content) > len(msgs[idx[b]].Content) })
	var out []Message
	for _, i := range idx {
		if excess <= 0 {
			break
		}
		if out == nil {
			out = make([]Message, len(msgs))
			copy(out, msgs)
		}
		content := out[i].Content
		keep := len(content) - excess - 64 // 64: room for the marker
		if keep < minKeptChars {
			keep = minKeptChars
		}
		marker := fmt.Sprintf("\n[... %d bytes truncated by emergency compaction ...]\n", len(content)-keep)
		shortened := textcut.Head(content, keep/2) + marker + textcut.Tail(content, keep-keep/2)
		if len(shortened) >= len(content) {
			continue
		}
		excess -= len(content) - len(shortened)
		out[i] = out[i].Clone()
		out[i].Content = shortened
	}
	if out == nil {
		return msgs
	}
	return out
}
