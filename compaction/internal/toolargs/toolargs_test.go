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
