package compaction

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestDecodeTranscriptJSONLAndArray(t *testing.T) {
	jsonl := `{"role":"system","content":"s"}

{"role":"user","content":"u"}
{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"ls","arguments":"{}"}}]}
{"role":"tool","tool_call_id":"a","content":"x"}`
	msgs, err := DecodeTranscript(strings.NewReader(jsonl), DecodeOptions{})
	if err != nil || len(msgs) != 4 {
		t.Fatalf("JSONL: %d messages, err %v", len(msgs), err)
	}
	var buf bytes.Buffer
	if err := EncodeJSONL(&buf, msgs); err != nil {
		t.Fatal(err)
	}
	again, err := DecodeTranscript(&buf, DecodeOptions{})
	if err != nil || len(again) != 4 {
		t.Fatalf("round trip: %v", err)
	}
	arr := `  [{"role":"user","content":"u"},{"role":"assistant","content":"a"}]  `
	msgs, err = DecodeTranscript(strings.NewReader(arr), DecodeOptions{})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("array: %d messages, err %v", len(msgs), err)
	}
}

func TestDecodeTranscriptErrorsNameTheLine(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"malformed":   {"{\"role\":\"user\",\"content\":\"u\"}\n\n{\"role\":\"user\",", "line 3: malformed message"},
		"bad role":    {"{\"role\":\"user\",\"content\":\"u\"}\n{\"role\":\"bot\",\"content\":\"u\"}", `line 2: unknown role "bot"`},
		"orphan":      {"{\"role\":\"user\",\"content\":\"u\"}\n{\"role\":\"tool\",\"tool_call_id\":\"q\",\"content\":\"u\"}", "line 2: orphaned tool result"},
		"array elem":  {`[{"role":"user","content":"u"},{"role":"x"}]`, `element 1: unknown role`},
		"array bad":   {`[{"role":"user","content":"u"},`, "malformed"},
		"trailing":    {`[{"role":"user","content":"u"}] {}`, "after the JSON array"},
		"empty":       {"  \n ", "empty transcript"},
		"empty array": {"[]", "no messages"},
		"bad utf8":    {"{\"role\":\"user\",\"content\":\"\xff\"}", "line 1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeTranscript(strings.NewReader(tc.in), DecodeOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDecodeTranscriptBoundsInput(t *testing.T) {
	big := `{"role":"user","content":"` + strings.Repeat("a", 2000) + `"}`
	_, err := DecodeTranscript(strings.NewReader(big), DecodeOptions{MaxMessageBytes: 1000})
	if err == nil || !strings.Contains(err.Error(), "longer than 1000 bytes") {
		t.Fatalf("oversized line: %v", err)
	}
	many := strings.Repeat(`{"role":"user","content":"u"}`+"\n", 11)
	_, err = DecodeTranscript(strings.NewReader(many), DecodeOptions{MaxMessages: 10})
	if err == nil || !strings.Contains(err.Error(), "more than 10 messages") {
		t.Fatalf("too many messages: %v", err)
	}
}

func FuzzDecodeTranscript(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"u"}`))
	f.Add([]byte("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"x\",\"arguments\":\"{}\"}}]}\n{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"r\"}"))
	f.Add([]byte(`[{"role":"system","content":[{"type":"text","text":"hi"}]}]`))
	for _, c := range decodeFastCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeFast(t, data)
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			checkDecodeFast(t, line)
			var m Message
			if m.UnmarshalJSON(line) == nil {
				checkEncodeFast(t, m)
			}
		}
		msgs, err := DecodeTranscript(bytes.NewReader(data), DecodeOptions{MaxMessageBytes: 1 << 16, MaxMessages: 1000})
		if err != nil {
			return
		}
		if err := Validate(msgs); err != nil {
			t.Fatalf("decoded history fails Validate: %v", err)
		}
		var buf bytes.Buffer
		if err := EncodeJSONL(&buf, msgs); err != nil {
			t.Fatalf("encode: %v", err)
		}
		again, err := DecodeTranscript(&buf, DecodeOptions{})
		if err != nil {
			t.Fatalf("re-decode of our own output failed: %v\n%s", err, buf.String())
		}
		if len(again) != len(msgs) || EstimateTokens(again) != EstimateTokens(msgs) {
			t.Fatalf("round trip changed the history: %d/%d messages", len(again), len(msgs))
		}
	})
}

func TestAssistantTurns(t *testing.T) {
	sys, user := Message{Role: RoleSystem, Content: "s"}, Message{Role: RoleUser, Content: "u"}
	asst, tool := Message{Role: RoleAssistant, Content: "a"}, Message{Role: RoleTool, Content: "r", ToolCallID: "c"}
	for _, tc := range []struct {
		name string
		msgs []Message
		want []int
	}{
		{"empty", nil, nil},
		{"no user", []Message{sys, asst, asst}, nil},
		{"an assistant before the first user message is no turn", []Message{sys, asst, user, asst, tool, asst}, []int{3, 5}},
		{"every assistant after the task", []Message{sys, user, asst, tool, asst, user, asst}, []int{2, 4, 6}},
	} {
		if got := AssistantTurns(tc.msgs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
