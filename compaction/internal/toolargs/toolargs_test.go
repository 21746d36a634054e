package toolargs

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStringFieldPlain: the shortcut for strings without escapes returns what decoding
// returns, and strings it must not take (escapes, control characters, invalid UTF-8, a
// value cut off) still go through decoding.
func TestStringFieldPlain(t *testing.T) {
	for _, tc := range []struct{ js, want string }{
		{`{"command": "ls -la /tmp"}`, "ls -la /tmp"},
		{`{"command":"echo \"hi\"\n"}`, "echo \"hi\"\n"},
		{`{"command":"caf\u00e9"}`, "café"},
		{"{\"command\":\"a\tb\"}", "a"}, // a raw tab is invalid JSON: the valid part before it
		{"{\"command\":\"a\xffb\"}", "a\uFFFDb"},
		{`{"command":"cut sho`, "cut sho"},
		{`{"command":"ünïcödé"}`, "ünïcödé"},
	} {
		got, ok := StringField(tc.js, "command")
		if !ok || got != tc.want {
			t.Errorf("StringField(%q) = %q, %v; want %q", tc.js, got, ok, tc.want)
		}
		var v struct{ Command string }
		if json.Unmarshal([]byte(tc.js), &v) == nil && v.Command != got {
			t.Errorf("StringField(%q) = %q, json.Unmarshal gives %q", tc.js, got, v.Command)
		}
	}
}

// TestStringField: the first key present wins, a key must be followed by a string, and
// only keys near the start are looked for.
func TestStringField(t *testing.T) {
	far := `{"file_text": "` + strings.Repeat("x", 2000) + `", "path": "late.py"}`
	cases := []struct {
		js   string
		keys []string
		want string
		ok   bool
	}{
		{`{"path": "a.py", "command": "view"}`, []string{"command", "path"}, "view", true},
		{`{"path": "a.py"}`, []string{"command", "path"}, "a.py", true},
		{`{"command": 3}`, []string{"command"}, "", false},
		{`{"text": "\"command\": \"x\"", "command": "y"}`, []string{"command"}, "y", true},
		{`{"command" : "spaced"}`, []string{"command"}, "spaced", true},
		{far, []string{"path"}, "", false},
		{`{"command": "bad\u"}`, []string{"command"}, "bad", true},
	}
	for _, c := range cases {
		got, ok := StringField(c.js, c.keys...)
		if got != c.want || ok != c.ok {
			t.Errorf("StringField(%.60q, %q) = %q, %v; want %q, %v", c.js, c.keys, got, ok, c.want, c.ok)
		}
	}
}

// FuzzDecodeString: decodeString accepts exactly the JSON strings encoding/json does (a
// string literal alone: no space around it, not null) and decodes them to the same text
// (escapes, surrogates, invalid UTF-8, control characters).
func FuzzDecodeString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"caf\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`,
		`"\udc00\ud800"`, "\"a\xffb\"", "\"\xed\xa0\x80\"", "\"a\tb\"", `"bad\u12"`, `"bad\x"`, `"unterminated`, `"a"b"`, `""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got, ok := decodeString(q)
		var want string
		wantOK := json.Unmarshal([]byte(q), &want) == nil && strings.HasPrefix(q, `"`) && strings.HasSuffix(q, `"`)
		if ok != wantOK || ok && got != want {
			t.Fatalf("decodeString(%q) = %q, %v; json.Unmarshal gives %q, %v", q, got, ok, want, wantOK)
		}
	})
}
