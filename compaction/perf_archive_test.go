package compaction

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// TestAppendJSONLIsEncodeJSONL: the archive's encoder writes the bytes EncodeJSONL writes,
// and fails where it fails.
func TestAppendJSONLIsEncodeJSONL(t *testing.T) {
	msgs := []Message{
		{Role: RoleSystem, Content: "you are \"helpful\"\n\t\u2028"},
		{Role: RoleUser, Content: "fix \xff the bug"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Type: "function", Function: FunctionCall{Name: "bash", Arguments: `{"cmd":"ls"}`}}}},
		{Role: RoleTool, ToolCallID: "c1", Content: "a\nb\n"},
		{Role: RoleUser, ContentParts: json.RawMessage(`[{"type":"text","text":"hi"}]`)},
		{Role: RoleAssistant, Content: "ok", Extra: map[string]json.RawMessage{"reasoning": json.RawMessage(`{"x": [1, 2]}`)}},
	}
	var want bytes.Buffer
	if err := EncodeJSONL(&want, msgs); err != nil {
		t.Fatal(err)
	}
	got, err := appendJSONL(msgs)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("appendJSONL = %q, %v\nEncodeJSONL = %q", got, err, want.Bytes())
	}
	bad := append(slices.Clip(msgs), Message{Role: RoleUser, Content: "x", Extra: map[string]json.RawMessage{"k": json.RawMessage(`{bad`)}})
	if _, err := appendJSONL(bad); err == nil || EncodeJSONL(&bytes.Buffer{}, bad) == nil {
		t.Fatalf("an unknown field that is not JSON: appendJSONL error %v, EncodeJSONL must fail too", err)
	}
}
