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

// TestArchiveEncodingAhead: an encoding started ahead is used only for exactly its span,
// and waited for either way.
func TestArchiveEncodingAhead(t *testing.T) {
	msgs := []Message{{Role: RoleUser, Content: "a"}, {Role: RoleAssistant, Content: "b"}, {Role: RoleUser, Content: "c"}}
	want, err := appendJSONL(msgs[:2])
	if err != nil {
		t.Fatal(err)
	}
	c := &ProgressiveCompactor{archive: nopArchive{}}
	tr := &turn{rest: msgs, base: 10}
	c.encodeAhead(tr, 2)
	if got, err := c.archiveEncoding.take(10, 12); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("take of the span encoded ahead = %q, %v; want %q", got, err, want)
	}
	if got, err := c.archiveEncoding.take(10, 12); got != nil || err != nil {
		t.Fatalf("a second take = %q, %v: the encoding is used once", got, err)
	}
	c.encodeAhead(tr, 2)
	if got, err := c.archiveEncoding.take(10, 13); got != nil || err != nil || c.archiveEncoding.done != nil {
		t.Fatalf("take of another span = %q, %v, and must forget the one encoded", got, err)
	}
	c.cfg.RawHistory = true
	if c.encodeAhead(tr, 2); c.archiveEncoding.done != nil {
		t.Fatal("RawHistory archives nothing: nothing to encode ahead")
	}
}

type nopArchive struct{ ArchiveStore }
