package compaction

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestSummaryPromptLen: the record's count of an LLM summarizer's input equals the length
// of the prompt it would be sent, for every shape of message the prompt renders.
func TestSummaryPromptLen(t *testing.T) {
	long := strings.Repeat("ü€x", 3000) // multi-byte runes across the cut
	cases := map[string]SummaryRequest{
		"empty": {},
		"plain": {Messages: []Message{
			{Role: RoleUser, Content: "fix the bug"},
			{Role: RoleAssistant, Content: "", ToolCalls: []ToolCall{{ID: "c1", Type: "function", Function: FunctionCall{Name: "bash", Arguments: `{"command":"ls"}`}}}},
			{Role: RoleTool, ToolCallID: "c1", Content: "a\nb\n"},
		}},
		"long content and arguments": {Messages: []Message{
			{Role: RoleUser, Content: long},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c2", Type: "function", Function: FunctionCall{Name: "write", Arguments: long}}}},
			{Role: RoleTool, ToolCallID: "c2", Content: long[:4001]},
		}},
		"parts": {Messages: []Message{
			{Role: RoleUser, ContentParts: json.RawMessage(`[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:x"}},{"x":1}]`)},
			{Role: RoleUser, ContentParts: json.RawMessage(`[{"type":"text","text":"` + strings.Repeat("p", 9000) + `"}]`)},
			{Role: RoleUser, ContentParts: json.RawMessage(`not json`)},
		}},
		"previous summary and anchors": {
			PreviousSummary: "before",
			PreviousAnchors: []Anchor{{Type: AnchorUserIntent, Content: "- the task"}},
			Messages:        []Message{{Role: RoleUser, Content: "go on"}},
		},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var msgs []Message
	for i := range 2000 {
		body := strings.Repeat("line\n", rng.IntN(3000))
		switch i % 3 {
		case 0:
			msgs = append(msgs, Message{Role: RoleUser, Content: body})
		case 1:
			msgs = append(msgs, Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Type: "function", Function: FunctionCall{Name: "n", Arguments: body}}}})
		default:
			msgs = append(msgs, Message{Role: RoleTool, ToolCallID: "c", Content: body})
		}
	}
	cases["random, 2000 messages"] = SummaryRequest{Messages: msgs}
	memo := newExtractMemo()
	for name, req := range cases {
		want := len(BuildSummaryPrompt(req, 0))
		if got := summaryPromptLen(nil, req); got != want {
			t.Errorf("%s: summaryPromptLen = %d, the prompt is %d bytes", name, got, want)
		}
		for pass := range 2 { // the memo's first read, then its kept length
			if got := summaryPromptLen(memo, req); got != want {
				t.Errorf("%s: summaryPromptLen with a memo (pass %d) = %d, the prompt is %d bytes", name, pass, got, want)
			}
		}
	}
	for _, n := range []int{0, 7, 10, 99, 100, 12345, -3} {
		if got, want := decimalLen(n), len(strconv.Itoa(n)); got != want {
			t.Errorf("decimalLen(%d) = %d, want %d", n, got, want)
		}
	}
}
