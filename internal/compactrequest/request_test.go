package compactrequest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// deltaBody is the body of a delta request of an agent: a system message, then n turns of
// an assistant tool call and its result.
func deltaBody(tb testing.TB, n int) []byte {
	tb.Helper()
	msgs := make([]compaction.Message, 0, 1+2*n)
	msgs = append(msgs, compaction.Message{Role: compaction.RoleSystem, Content: "You are a coding agent."})
	for i := range n {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			compaction.Message{Role: compaction.RoleAssistant, Content: "Reading the handler.", ToolCalls: []compaction.ToolCall{{ID: id, Type: "function",
				Function: compaction.FunctionCall{Name: "bash", Arguments: `{"cmd": "sed -n '1,80p' handlers.go"}`}}}},
			compaction.Message{Role: compaction.RoleTool, ToolCallID: id, Content: strings.Repeat("\tif err != nil {\n\t\treturn err\n\t}\n", 20)})
	}
	body, err := json.Marshal(compactclient.CompactRequest{Messages: msgs, Usage: &compactclient.Usage{PromptTokens: 5000}, Watermark: 40, PrefixHash: "abc"})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// TestDecodeCompactFastTakesRequests: an ordinary request takes the fast path.
func TestDecodeCompactFastTakesRequests(t *testing.T) {
	var req compactclient.CompactRequest
	if !decodeCompactFast(deltaBody(t, 3), &req) || len(req.Messages) != 7 || req.Watermark != 40 || req.Usage.PromptTokens != 5000 {
		t.Fatalf("not decoded by the fast path: %+v", req)
	}
}

// BenchmarkParseCompact is what checking and decoding a delta request of 10 turns costs
// (ParseCompact after CheckValues, as the compact route does), and for reference decoding
// it with encoding/json (Decode).
func BenchmarkParseCompact(b *testing.B) {
	body := deltaBody(b, 10)
	l := Limits{MaxMessages: 10000}
	b.Run("ParseCompact", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.CheckValues(body); err != nil {
				b.Fatal(err)
			}
			if _, err := l.ParseCompact(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var req compactclient.CompactRequest
			if err := Decode(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeOffloadFast: an ordinary offload body takes the fast path and decodes as Decode
// decodes it.
func TestDecodeOffloadFast(t *testing.T) {
	body := []byte(`{"message": {"role": "tool", "tool_call_id": "call_1", "content": "line 1\nline 2\n", "x-extra": {"a": 1}}}`)
	var fast, slow compactclient.OffloadRequest
	if !decodeOffloadFast(body, &fast) {
		t.Fatal("not decoded by the fast path")
	}
	if err := Decode(body, &slow); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fast)
	b, _ := json.Marshal(slow)
	if string(a) != string(b) || fast.Message.Content != "line 1\nline 2\n" {
		t.Fatalf("fast %s, Decode %s", a, b)
	}
}

// TestParseCompactSeen: a seen delta takes seen (> 0) with a prefixHash and no watermark;
// anything else is a 400 that says what a seen delta needs, before the engine sees it.
func TestParseCompactSeen(t *testing.T) {
	l := Limits{MaxMessages: 100}
	msgs := `"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "go on"}]`
	req, err := l.ParseCompact([]byte(`{` + msgs + `, "seen": 7, "prefixHash": "h"}`))
	if err != nil || req.Seen != 7 || req.PrefixHash != "h" || req.Watermark != 0 {
		t.Fatalf("a seen delta: %+v, %v", req, err)
	}
	for _, body := range []string{
		`{` + msgs + `, "seen": 7}`,
		`{` + msgs + `, "seen": -1, "prefixHash": "h"}`,
		`{` + msgs + `, "seen": 7, "watermark": 3, "prefixHash": "h"}`,
	} {
		if _, err := l.ParseCompact([]byte(body)); err == nil || !strings.Contains(err.Error(), "seen") {
			t.Errorf("%s: %v, want a 400 about seen", body, err)
		}
	}
}
