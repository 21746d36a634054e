package compaction

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMessageRoundTripKeepsUnknownFields(t *testing.T) {
	in := `{"role":"assistant","content":null,"reasoning_content":"hmm","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"ls <dir> && pwd\"}"},"index":0}],"x_vendor":{"a":[1,2]}}`
	var m Message
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	if m.Role != RoleAssistant || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "bash" {
		t.Fatalf("decoded %+v", m)
	}
	out, err := m.MarshalJSON() // as EncodeJSONL writes it, without HTML escaping
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	if err := json.Unmarshal([]byte(in), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("round trip changed the message:\n in %s\nout %s", ja, jb)
	}
	if strings.Contains(string(out), `\u003c`) {
		t.Fatalf("HTML-escaped output: %s", out)
	}
}

func TestMessageContentParts(t *testing.T) {
	in := `{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:..."}}]}`
	var m Message
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	if m.ContentParts == nil || m.Content != "" {
		t.Fatalf("parts not kept: %+v", m)
	}
	if m.Chars() != len(m.ContentParts) {
		t.Fatalf("Chars %d, want %d", m.Chars(), len(m.ContentParts))
	}
	out, _ := json.Marshal(m)
	if !strings.Contains(string(out), `"image_url"`) {
		t.Fatalf("parts lost: %s", out)
	}
}

func TestMessageRejectsBadContentType(t *testing.T) {
	var m Message
	if err := json.Unmarshal([]byte(`{"role":"user","content":42}`), &m); err == nil {
		t.Fatal("numeric content accepted")
	}
	if err := json.Unmarshal([]byte(`null`), &m); err == nil {
		t.Fatal("null message accepted")
	}
}

func TestEstimateTokensCountsBytesAndToolCalls(t *testing.T) {
	msgs := []Message{
		{Role: RoleUser, Content: "12345678"},              // 8
		{Role: RoleUser, Content: "é"},                     // 2 bytes
		call("ab", "id1"),                                  // 2 + "bash" 4 + args
		{Role: RoleTool, ToolCallID: "id1", Content: "xy"}, // 2
	}
	args := len(msgs[2].ToolCalls[0].Function.Arguments)
	want := (8 + 2 + 2 + 4 + args + 2) / 4
	if got := EstimateTokens(msgs); got != want {
		t.Fatalf("EstimateTokens = %d, want %d", got, want)
	}
	if EstimateTokens(nil) != 0 {
		t.Fatal("empty history not zero")
	}
}

func TestCloneIsDeep(t *testing.T) {
	m := call("x", "a", "b")
	m.Extra = map[string]json.RawMessage{"k": json.RawMessage(`1`)}
	c := m.Clone()
	c.ToolCalls[0].ID = "changed"
	c.Extra["k"] = json.RawMessage(`2`)
	if m.ToolCalls[0].ID != "a" || string(m.Extra["k"]) != "1" {
		t.Fatal("Clone shares state with the original")
	}
}
