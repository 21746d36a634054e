package compaction

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// decodeFastCases are messages and tool calls at the edges of what the fast decoder takes:
// each decodes as decodeSlow decodes it, or is left to it.
var decodeFastCases = []string{
	`{"role":"user","content":"hi"}`,
	` {"role" : "user" , "content" : "a\nb\"c\\d\/e\u00e9\ud83d\ude00\ud800x\udc00\u0041" } `,
	`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\": \"ls\"}"},"index":0}],"reasoning_content":"r"}`,
	`{"role":"assistant","tool_calls":[]}`, `{"role":"assistant","tool_calls":null}`, `{"role":"assistant","tool_calls":[null]}`,
	`{"role":"assistant","tool_calls":[{"function":{"Name":"x","arguments":"a"}}]}`,
	`{"role":"assistant","tool_calls":[{"function":{"name":"x","name":null,"other":[1,{"a":[]}]}}]}`,
	`{"role":"assistant","tool_calls":[{"function":{"\u017fame":"x"}}]}`,
	`{"role":"assistant","tool_calls":[{"function":null,"id":null,"type":null}]}`,
	`{"role":"assistant","tool_calls":[{"function":"f"}]}`, `{"role":"assistant","tool_calls":{}}`,
	`{"role":"user","content":[{"type":"text","text":"hi"}],"pinned":true}`,
	`{"role":"user","content":"x","pinned":false}`, `{"role":"user","content":"x","pinned":null}`, `{"role":"user","content":"x","pinned":"yes"}`,
	`{"role":"user","content":"a","content":null}`, `{"role":"user","content":null,"content":"a"}`,
	`{"role":"user","x":1,"x":{"b" : [ 1.5e+3 , -0 , true , false , null ]}}`,
	`{"role":"user","rol\u0065":"x"}`, `{"Role":"user"}`, `{}`, `null`, `[]`, `1`, `"s"`, `{`, `{"role":}`,
	`{"role":"user",}`, `{"role":"user"} x`, `{"role":5}`, `{"role":null,"name":null,"tool_call_id":null}`,
	`{"role":"user","content":5}`, `{"role":"user","content":{}}`, `{"role":"user","content":true}`,
	`{"role":"user","content":"\x01"}`, `{"role":"user","content":"\u12"}`, `{"role":"user","content":"\q"}`,
	`{"role":"user","n":01}`, `{"role":"user","n":1.}`, `{"role":"user","n":-}`, `{"role":"user","n":1e}`, `{"role":"user","n":tru}`,
	`{"role":"user","n":[1,]}`, `{"role":"user","n":{"a":1,}}`, `{"role":"user","n":{"a" 1}}`, `{"role":"user","n":[1 2]}`,
	"{\"role\":\"user\",\"content\":\"\xff\"}", "\xef\xbb\xbf{\"role\":\"user\"}",
	`{"role":"tool","tool_call_id":"c1","name":"bash","content":""}`,
}

// checkDecodeFast fails t when UnmarshalJSON (the fast path first) and decodeSlow disagree
// on data, for a message and for a tool call.
func checkDecodeFast(t *testing.T, data []byte) {
	t.Helper()
	var fast, slow Message
	errFast, errSlow := fast.UnmarshalJSON(data), error(nil)
	if !utf8.Valid(data) {
		errSlow = errors.New("message is not valid UTF-8")
	} else {
		errSlow = slow.decodeSlow(data)
	}
	if (errFast == nil) != (errSlow == nil) || (errFast != nil && errFast.Error() != errSlow.Error()) || !reflect.DeepEqual(fast, slow) {
		t.Fatalf("message %q: fast %#v, %v; slow %#v, %v", data, fast, errFast, slow, errSlow)
	}
	var fc, sc ToolCall
	errFast, errSlow = fc.UnmarshalJSON(data), sc.decodeSlow(data)
	if (errFast == nil) != (errSlow == nil) || (errFast != nil && errFast.Error() != errSlow.Error()) || !reflect.DeepEqual(fc, sc) {
		t.Fatalf("tool call %q: fast %#v, %v; slow %#v, %v", data, fc, errFast, sc, errSlow)
	}
}

// TestDecodeFastAgrees: the fast decoder gives what decodeSlow gives (messages, tool calls,
// errors) on the edge cases and on every line of the sample transcripts.
func TestDecodeFastAgrees(t *testing.T) {
	for _, c := range decodeFastCases {
		checkDecodeFast(t, []byte(c))
	}
	files, _ := filepath.Glob("../testdata/*.jsonl")
	lines := 0
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			checkDecodeFast(t, sc.Bytes())
			var m Message
			if !m.decodeFast(sc.Bytes()) {
				t.Errorf("%s: a line the fast path does not take: %.200s", name, sc.Bytes())
			}
			lines++
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d transcript lines from %d files", lines, len(files))
}

// BenchmarkDecodeMessages encodes and decodes a delta request's messages (an assistant
// message with a tool call and its multi-line result, 20 of each) with MarshalJSON and
// UnmarshalJSON and, for reference, with marshalSlow and decodeSlow alone (the encoder and
// decoder before the fast paths).
func BenchmarkDecodeMessages(b *testing.B) {
	msgs := make([]Message, 0, 40)
	for i := range 20 {
		id := "call_" + strconv.Itoa(i)
		msgs = append(msgs,
			Message{Role: RoleAssistant, Content: "Let me look at the file.\nThen \"fix\" it.", ToolCalls: []ToolCall{{ID: id, Type: "function",
				Function: FunctionCall{Name: "bash", Arguments: `{"cmd": "sed -n '1,80p' src/app/handlers.go"}`}}}},
			Message{Role: RoleTool, ToolCallID: id, Content: strings.Repeat("\tfunc handler(w http.ResponseWriter, r *http.Request) {\n", 40)})
	}
	lines := make([][]byte, len(msgs))
	size := 0
	for i := range msgs {
		var err error
		if lines[i], err = msgs[i].MarshalJSON(); err != nil {
			b.Fatal(err)
		}
		size += len(lines[i])
	}
	b.Run("MarshalJSON", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for i := range msgs {
				if _, err := msgs[i].MarshalJSON(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("marshalSlow", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for i := range msgs {
				if _, err := msgs[i].marshalSlow(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	for _, bc := range []struct {
		name   string
		decode func(m *Message, data []byte) error
	}{
		{"UnmarshalJSON", (*Message).UnmarshalJSON},
		{"decodeSlow", (*Message).decodeSlow},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				for _, line := range lines {
					var m Message
					if err := bc.decode(&m, line); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// checkEncodeFast fails t when MarshalJSON (appendJSON first) and marshalSlow disagree on m.
func checkEncodeFast(t *testing.T, m Message) {
	t.Helper()
	fast, errFast := m.MarshalJSON()
	slow, errSlow := m.marshalSlow()
	if (errFast == nil) != (errSlow == nil) || (errFast != nil && errFast.Error() != errSlow.Error()) || !bytes.Equal(fast, slow) {
		t.Fatalf("message %#v: fast %s, %v; slow %s, %v", m, fast, errFast, slow, errSlow)
	}
	for _, tc := range m.ToolCalls {
		fast, errFast := tc.MarshalJSON()
		slow, errSlow := tc.marshalSlow()
		if (errFast == nil) != (errSlow == nil) || (errFast != nil && errFast.Error() != errSlow.Error()) || !bytes.Equal(fast, slow) {
			t.Fatalf("tool call %#v: fast %s, %v; slow %s, %v", tc, fast, errFast, slow, errSlow)
		}
	}
}

// TestEncodeFastAgrees: MarshalJSON writes what marshalSlow writes, for the decoded edge
// cases and transcript lines and for messages no decoder makes.
func TestEncodeFastAgrees(t *testing.T) {
	for _, c := range decodeFastCases {
		var m Message
		if m.UnmarshalJSON([]byte(c)) == nil {
			checkEncodeFast(t, m)
		}
	}
	odd := "ctl \x00\x01\x1f\x7f \b\f\n\r\t quote\" back\\ slash/ <tag> & \u2028\u2029 \xff\xfe é 😀 \xed\xa0\x80"
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	for _, m := range []Message{
		{},
		{Role: Role(odd), Content: odd, ToolCallID: odd, Name: odd, Pinned: true},
		{Role: RoleUser, nullContent: true},
		{Role: RoleUser, nullContent: true, Content: "x"},
		{Role: RoleUser, ContentParts: raw(` [ {"type" : "text", "text":"<b>"} ] `)},
		{Role: RoleUser, ContentParts: raw(`[`)},
		{Role: RoleUser, Extra: map[string]json.RawMessage{"role": raw(`"x"`), "tool_calls": raw(`[1]`), "pinned": raw(` false `), "a": nil, odd: raw(`{"b" : 1}`), "zz": raw(`2`)}},
		{Role: RoleUser, Extra: map[string]json.RawMessage{"bad": raw(`{`)}},
		{Role: RoleAssistant, ToolCalls: []ToolCall{
			{ID: odd, Function: FunctionCall{Name: odd, Arguments: odd}},
			{ID: "c", Type: "custom", Extra: map[string]json.RawMessage{"function": raw(`1`), "index": raw(`0`), "id": raw(`"y"`), "~": raw(` [ ] `)}},
		}},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Extra: map[string]json.RawMessage{"x": raw(`nul`)}}}},
	} {
		checkEncodeFast(t, m)
	}
	files, _ := filepath.Glob("../testdata/*.jsonl")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			var m Message
			if m.UnmarshalJSON(line) == nil {
				checkEncodeFast(t, m)
			}
		}
	}
}
