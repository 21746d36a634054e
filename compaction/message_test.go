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
	if want := len("look") + ImageTokens*4; m.Chars() != want {
		t.Fatalf("Chars %d, want %d (the text, and an image as ImageTokens)", m.Chars(), want)
	}
	out, _ := json.Marshal(m)
	if !strings.Contains(string(out), `"image_url"`) {
		t.Fatalf("parts lost: %s", out)
	}
}

// TestImagesCountAsImageTokens: a base64 screenshot counts as ImageTokens, not as its
// encoded size (which made one screenshot an Emergency compaction), whether the message was
// decoded or built in Go, and whatever the provider's part type.
func TestImagesCountAsImageTokens(t *testing.T) {
	b64 := strings.Repeat("iVBORw0KGgo", 100000) // 1.1 MB
	for _, parts := range []string{
		`[{"type":"text","text":"what is on the screen?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}]`,
		`[{"type":"text","text":"what is on the screen?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}]`,
		`[{"type":"text","text":"what is on the screen?"},{"type":"input_image","image_url":"data:image/png;base64,` + b64 + `"}]`,
	} {
		var decoded Message
		if err := json.Unmarshal([]byte(`{"role":"user","content":`+parts+`}`), &decoded); err != nil {
			t.Fatal(err)
		}
		built := Message{Role: RoleUser, ContentParts: json.RawMessage(parts)}
		want := (len("what is on the screen?") + ImageTokens*4) / 4
		for name, m := range map[string]Message{"decoded": decoded, "built": built} {
			if got := EstimateTokens([]Message{m}); got != want {
				t.Errorf("%s %.40s...: %d tokens, want %d", name, parts, got, want)
			}
		}
		// Parts replaced after decoding are counted anew.
		decoded.ContentParts = json.RawMessage(`[{"type":"text","text":"` + strings.Repeat("x", 400) + `"}]`)
		if got := EstimateTokens([]Message{decoded}); got != 100 {
			t.Errorf("replaced parts: %d tokens, want 100", got)
		}
	}
	// An unknown part counts its JSON, and so does anything that is not a part.
	for parts, want := range map[string]int{`[{"type":"audio","data":"abcd"}]`: len(`{"type":"audio","data":"abcd"}`), `[1,2,3]`: 3, `[`: 1} {
		m := Message{Role: RoleUser, ContentParts: json.RawMessage(parts)}
		if got := m.Chars(); got != want {
			t.Errorf("%s: %d chars, want %d", parts, got, want)
		}
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

// TestRenderMessageShowsImagesAsMarkers: the summarizer reads a screenshot as "[image]", not
// as base64 that costs tokens and says nothing.
func TestRenderMessageShowsImagesAsMarkers(t *testing.T) {
	b64 := strings.Repeat("iVBORw0KGgo", 1000)
	m := Message{Role: RoleUser, ContentParts: json.RawMessage(`[{"type":"text","text":"the login page is blank"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}]`)}
	got := renderMessage(&m, 4000)
	if got != "[user]\nthe login page is blank\n[image]\n\n" {
		t.Errorf("rendered %q", got)
	}
}
