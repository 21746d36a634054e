package anthropic

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzAnthropicRoundTrip: any body is refused with ErrInvalidRequest or decoded; a decoded
// request encodes without error to JSON, and one whose messages alternate user, assistant,
// user... (as the API requires) encodes to the request itself.
func FuzzAnthropicRoundTrip(f *testing.F) {
	f.Add(rich)
	f.Add(`{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`)
	f.Add(`{"system": null, "messages": [{"role": "user", "content": []}, {"role": "assistant", "content": []}]}`)
	f.Add(`{"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": null}]}]}`)
	f.Add(`{"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": null}]}]}`)
	f.Add(`{"messages": [{"role": "user", "content": "<a> & \u003cb\u003e"}]}`)
	f.Add(`{"messages": [`)
	f.Fuzz(func(t *testing.T, body string) {
		r, err := DecodeRequest([]byte(body))
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not ErrInvalidRequest", err)
			}
			return
		}
		out, err := r.Encode(r.Messages)
		if err != nil {
			t.Fatalf("Encode of the decoded messages: %v", err)
		}
		var got any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("Encode wrote invalid JSON: %v\n%s", err, out)
		}
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		for i, m := range req.Messages {
			if want := []string{"user", "assistant"}[i%2]; m.Role != want {
				return // not a conversation the API takes: consecutive roles are merged
			}
		}
		var want any
		_ = json.Unmarshal([]byte(body), &want) // decoded above
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip changed the request:\n%s\nto\n%s", body, out)
		}
	})
}
