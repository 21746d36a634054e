package compactapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeCompactRequest: any body either decodes into a request whose messages are valid
// UTF-8, or is rejected with a 400 (or 413 over the limit) apiError; never a panic.
func FuzzDecodeCompactRequest(f *testing.F) {
	for _, seed := range []string{
		`{"messages": [{"role": "user", "content": "hi"}]}`,
		`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"ls\"}"}}]}, {"role": "tool", "tool_call_id": "call_1", "content": "a\nb"}], "force": true, "usage": {"promptTokens": 12}, "watermark": 3, "prefixHash": "abc"}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}`,
		`{"messages": [{"role": "user", "content": "the task", "pinned": true}, {"role": "user", "content": "x", "pinned": "yes"}]}`,
		`{"messages": [`, `{}`, ``, `[]`, `{"messages": null}`, `{"messages": [{}]} {}`,
		"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}",
		`{"mesages": []}`, `{"messages": [{"role": "user", "content": "\ud800"}]}`,
		strings.Repeat("[", 10000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := parseCompact([]byte(body))
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				t.Fatalf("decode error %T %v is not a 4xx apiError", err, err)
			}
			if ae.code != http.StatusBadRequest && ae.code != http.StatusRequestEntityTooLarge {
				t.Fatalf("decode error status %d, want 400 or 413", ae.code)
			}
			return
		}
		for i, m := range req.Messages {
			if !utf8.ValidString(m.Content) || !utf8.ValidString(string(m.Role)) {
				t.Fatalf("message %d decoded with invalid UTF-8", i)
			}
		}
	})
}
