package compaction

import (
	"encoding/json"
	"testing"
)

// EqualMessages tells apart messages that differ in any field, those the engine keeps
// without interpreting included, and finds equal two decodings of the same JSON.
func TestEqualMessages(t *testing.T) {
	const raw = `[{"role":"system","content":"s"},{"role":"user","content":null,"x_meta":{"a":1}},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"},"index":0}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"out"},{"role":"user","content":[{"type":"text","text":"hi"}],"pinned":true}]`
	decode := func() []Message {
		t.Helper()
		var msgs []Message
		if err := json.Unmarshal([]byte(raw), &msgs); err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	a := decode()
	if !EqualMessages(a, decode()) {
		t.Fatal("two decodings of the same messages differ")
	}
	for name, change := range map[string]func(m []Message){
		"role":          func(m []Message) { m[0].Role = RoleUser },
		"content":       func(m []Message) { m[3].Content = "out." },
		"null content":  func(m []Message) { m[1].nullContent = false },
		"extra":         func(m []Message) { m[1].Extra["x_meta"] = json.RawMessage(`{"a":2}`) },
		"extra key":     func(m []Message) { m[0].Extra = map[string]json.RawMessage{"x": json.RawMessage(`1`)} },
		"tool call":     func(m []Message) { m[2].ToolCalls[0].Function.Arguments = `{"cmd":"ls"}` },
		"tool call ext": func(m []Message) { m[2].ToolCalls[0].Extra = nil },
		"tool calls":    func(m []Message) { m[2].ToolCalls = nil },
		"tool call id":  func(m []Message) { m[3].ToolCallID = "c2" },
		"name":          func(m []Message) { m[3].Name = "bash" },
		"parts":         func(m []Message) { m[4].ContentParts = json.RawMessage(`[{"type":"text","text":"ho"}]`) },
		"pinned":        func(m []Message) { m[4].Pinned = false },
	} {
		b := decode()
		change(b)
		if EqualMessages(a, b) {
			t.Errorf("%s: a change went unnoticed", name)
		}
	}
	if EqualMessages(a, a[:4]) {
		t.Error("a shorter list is equal")
	}
}
