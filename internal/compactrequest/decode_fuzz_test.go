package compactrequest

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// FuzzDecodeCompactRequest: any body either decodes into a request whose messages are valid
// UTF-8 and within the request limits, or is rejected with a 400 (or 413 over a limit)
// Error; never a panic.
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
		`{"messages": [1, 1, 1]}`, `{"messages": [{"role": "assistant", "tool_calls": [{}, {}, {"x": 1}]}]}`,
		`{"messages": [{"role": "user", "content": "hi", "a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9, "j": 10, "k": 11, "l": 12, "m": 13, "n": 14, "o": 15, "p": 16, "q": 17}]}`,
		`{"messages": [{"role": "user", "content": "a \"{[:,\" in a string"}]}`,
		`{"messages": [{"role": "user", "content": "a"}], "messages": [{"role": "user", "content": "b"}]}`,
		`{"Messages": [{"role": "user", "content": "a"}]}`, `{"messages": [{"role": "user", "content": "a"}], "usage": {"PromptTokens": 1}}`,
		`{"messages": [{"role": "user", "content": "a"}], "usage": {"promptTokens": 1, "x": 2}}`, `{"messages": [{"role": "user"}], "usage": null, "force": null, "watermark": null, "prefixHash": null}`,
		`{"messages": [{"role": "user"}], "watermark": 1.0, "prefixHash": "a"}`,
		`{"messages": [{"role": "user"}], "omitEcho": true}`, `{"messages": [{"role": "user"}], "seen": 3, "prefixHash": "h"}`, `{"seen": 1, "messages": [], "seen": 2}`, `{"messages": [], "seen": "3"}`, `{"messages": [], "seen": 1e2}`, `{"omitEcho": false, "messages": [], "omitEcho": true}`, `{"messages": [], "omitEcho": "yes"}`, `{"messages": [{"role": "user"}], "watermark": -0}`, `{"messages": [{"role": "user"}], "watermark": 01}`,
		`{"messages": [{"role": "user"}], "watermark": 99999999999999999999, "prefixHash": "a"}`, `{"messages": [{"role": "user"}], "watermark": 2, "prefixHash": "a\u0062"}`,
		`{"messages": [{"role": "user"}, null]}`, `{"messages": []}`, "\t{ \"messages\" : [ {\"role\":\"user\"} ] , \"force\" : false }\n ",
		`{"messages": [{"role": "user"}]} `, `{"messages": [{"role": "user"}]}}`, `{"messages": [{"role": "user"}}]}`,
		`{"message": {"role": "tool", "tool_call_id": "c1", "content": "out\nput"}}`, ` {"message" : {"role": "tool"} } `,
		`{"message": {"role": "tool"}, "message": {"role": "tool"}}`, `{"Message": {"role": "tool"}}`, `{"message": null}`, `{"message": {"role": "tool"}} x`,
	} {
		f.Add(seed)
	}
	l := Limits{MaxMessages: 100}
	f.Fuzz(func(t *testing.T, body string) {
		var fast, slow compactclient.CompactRequest
		if decodeCompactFast([]byte(body), &fast) {
			if err := Decode([]byte(body), &slow); err != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast decode %#v, Decode %#v, %v", fast, slow, err)
			}
		}
		// The same body as an offload's (a message is a valid one too).
		var fastOffload, slowOffload compactclient.OffloadRequest
		if decodeOffloadFast([]byte(body), &fastOffload) {
			if err := Decode([]byte(body), &slowOffload); err != nil || !reflect.DeepEqual(fastOffload, slowOffload) {
				t.Fatalf("fast offload decode %#v, Decode %#v, %v", fastOffload, slowOffload, err)
			}
		}
		_, err := l.CheckValues([]byte(body))
		var req *compactclient.CompactRequest
		if err == nil {
			req, err = l.ParseCompact([]byte(body))
		}
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("decode error %T %v is not a 4xx Error", err, err)
			}
			if ae.Code != http.StatusBadRequest && ae.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("decode error status %d, want 400 or 413", ae.Code)
			}
			return
		}
		if len(req.Messages) > l.MaxMessages {
			t.Fatalf("%d messages accepted, more than %d", len(req.Messages), l.MaxMessages)
		}
		unknown := 0
		for i, m := range req.Messages {
			if !utf8.ValidString(m.Content) || !utf8.ValidString(string(m.Role)) {
				t.Fatalf("message %d decoded with invalid UTF-8", i)
			}
			if len(m.Extra) > MaxUnknownFields {
				t.Fatalf("message %d keeps %d unknown fields", i, len(m.Extra))
			}
			unknown += len(m.Extra)
			for _, tc := range m.ToolCalls {
				unknown += len(tc.Extra)
			}
		}
		if unknown > UnknownFieldsPerMessage*l.MaxMessages {
			t.Fatalf("%d unknown fields kept", unknown)
		}
	})
}
