package gemini

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzGeminiRoundTrip: any body is refused with ErrInvalidRequest or decoded; a decoded
// request encodes without error to the request itself (every content is kept whole), which
// decodes again to the same messages.
func FuzzGeminiRoundTrip(f *testing.F) {
	f.Add(cli)
	f.Add(`{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}`)
	f.Add(`{"generateContentRequest": {"model": "models/m", "contents": [{"parts": {"text": "hi"}}]}}`)
	f.Add(`{"system_instruction": "s", "contents": [{"role": "model", "parts": [{"functionCall": {"name": "a"}}, {"function_call": {"name": "a", "id": "x"}}]}, {"role": "function", "parts": [{"functionResponse": {"name": "a", "id": "x", "response": {"output": "<b> & c"}}}, {"functionResponse": {"name": "b"}}]}]}`)
	f.Add(`{"contents": [{"role": "user", "parts": []}, {"role": "model"}, {"role": "", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}, {"text": "t", "thought": true}]}]}`)
	f.Add(`{"contents": [{"role": "model", "parts": [{"functionCall": {"name": "gemini-0-0", "id": "gemini-0-1"}}, {"functionCall": {"name": "f"}}]}, {"role": "user", "parts": [{"text": "x"}, {"functionResponse": {"name": "f", "response": {}, "parts": [{"fileData": {"fileUri": "u"}}]}}]}]}`)
	f.Add(`{"contents": [`)
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
		again, err := DecodeRequest(out)
		if err != nil {
			t.Fatalf("the encoded request does not decode: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(describe(again.Messages), describe(r.Messages)) {
			t.Fatalf("the encoded request decodes to other messages:\n%s\nto\n%s", body, out)
		}
		var want any
		_ = json.Unmarshal([]byte(body), &want) // decoded above
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip changed the request:\n%s\nto\n%s", body, out)
		}
	})
}
