package compaction

import (
	"encoding/json"
	"testing"
)

// TestJSONStringFieldPlain: the shortcut for strings without escapes returns what decoding
// returns, and strings it must not take (escapes, control characters, invalid UTF-8, a
// value cut off) still go through decoding.
func TestJSONStringFieldPlain(t *testing.T) {
	for _, tc := range []struct{ js, want string }{
		{`{"command": "ls -la /tmp"}`, "ls -la /tmp"},
		{`{"command":"echo \"hi\"\n"}`, "echo \"hi\"\n"},
		{`{"command":"caf\u00e9"}`, "café"},
		{"{\"command\":\"a\tb\"}", "a"}, // a raw tab is invalid JSON: the valid part before it
		{"{\"command\":\"a\xffb\"}", "a\uFFFDb"},
		{`{"command":"cut sho`, "cut sho"},
		{`{"command":"ünïcödé"}`, "ünïcödé"},
	} {
		got, ok := jsonStringField(tc.js, "command")
		if !ok || got != tc.want {
			t.Errorf("jsonStringField(%q) = %q, %v; want %q", tc.js, got, ok, tc.want)
		}
		var v struct{ Command string }
		if json.Unmarshal([]byte(tc.js), &v) == nil && v.Command != got {
			t.Errorf("jsonStringField(%q) = %q, json.Unmarshal gives %q", tc.js, got, v.Command)
		}
	}
}
