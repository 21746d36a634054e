package compaction

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
)

// history builders.

func sys(s string) Message  { return Message{Role: RoleSystem, Content: s} }
func user(s string) Message { return Message{Role: RoleUser, Content: s} }
func asst(s string) Message { return Message{Role: RoleAssistant, Content: s} }
func call(content string, ids ...string) Message {
	m := Message{Role: RoleAssistant, Content: content}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: "bash", Arguments: `{"cmd":"run ` + id + `"}`}})
	}
	return m
}
func result(id, content string) Message {
	return Message{Role: RoleTool, ToolCallID: id, Content: content}
}

// genHistory builds a random but valid agent history: a system prompt, a user task, then
// turns of single or parallel tool calls, text-only replies and user interjections, with some
// large results.
func genHistory(r *rand.Rand, turns int) []Message {
	msgs := []Message{sys("You are a coding agent."), user("Fix the failing test in parser.go; keep the public API unchanged.")}
	id := 0
	for t := 0; t < turns; t++ {
		switch k := r.IntN(10); {
		case k < 6:
			n := 1
			if r.IntN(3) == 0 {
				n = 2 + r.IntN(3)
			}
			ids := make([]string, n)
			for i := range ids {
				id++
				ids[i] = fmt.Sprintf("call_%d", id)
			}
			msgs = append(msgs, call(strings.Repeat("thinking ", r.IntN(40)), ids...))
			for _, cid := range ids {
				size := 50 + r.IntN(3000)
				if r.IntN(5) == 0 {
					size = 5000 + r.IntN(40000)
				}
				msgs = append(msgs, result(cid, lines(r, size)))
			}
		case k < 8:
			msgs = append(msgs, asst(strings.Repeat("I'll try another approach. ", 1+r.IntN(30))))
		default:
			msgs = append(msgs, user(strings.Repeat("please also check the docs ", 1+r.IntN(10))))
		}
	}
	return msgs
}

func lines(r *rand.Rand, size int) string {
	var b strings.Builder
	for b.Len() < size {
		fmt.Fprintf(&b, "line %d: %s\n", b.Len(), strings.Repeat("x", r.IntN(120)))
	}
	return b.String()[:size]
}

// compactDelta is Compact of a request with a Delta, as view and record.
func compactDelta(ctx context.Context, c *ProgressiveCompactor, d Delta, msgs []Message, force bool) ([]Message, *CompactionRecord, error) {
	res, err := c.Compact(ctx, Request{Messages: msgs, Force: force, Delta: d})
	return res.View, res.Record, err
}
