package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// FuzzResponsesRoundTrip: any body is refused (ErrInvalidRequest, or ErrStateful for a
// request continuing server-side state) or decoded to a history the engine accepts; a
// decoded request encodes back, directly and after a trip through the compaction API's JSON,
// to the request itself: the same document, every input item byte for byte.
func FuzzResponsesRoundTrip(f *testing.F) {
	f.Add(codex)
	f.Add(agentsSDK)
	f.Add(opaque)
	f.Add(aiSDK)
	f.Add(`{"model": "m", "input": "hi"}`)
	f.Add(`{"instructions": "x", "input": [{"role": "developer", "content": "x"}, {"role": "user", "content": []}]}`)
	f.Add(`{"input": [{"role": "user", "content": "a"}, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]}]}`)
	f.Add(`{"input": [{"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"}, {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "a", "output": "x"}, {"type": "function_call_output", "call_id": "a", "output": "x"}]}`)
	f.Add(`{"input": [{"type": "function_call_output", "call_id": "z", "output": "<a> & \u003cb\u003e"}, {"id": "ref"}]}`)
	f.Add(`{"previous_response_id": "resp_1", "input": "hi"}`)
	f.Add(`{"input": [`)
	f.Fuzz(func(t *testing.T, body string) {
		r, err := DecodeRequest([]byte(body))
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrStateful) {
				t.Fatalf("error %v is neither ErrInvalidRequest nor ErrStateful", err)
			}
			return
		}
		if err := compaction.Validate(r.Messages); err != nil {
			t.Fatalf("the engine refuses the decoded history: %v", err)
		}
		out, err := r.Encode(r.Messages)
		if err != nil {
			t.Fatalf("Encode of the decoded messages: %v", err)
		}
		checkRoundTrip(t, body, out)

		wire, err := json.Marshal(r.Messages)
		if err != nil {
			t.Fatal(err)
		}
		var back []compaction.Message
		if err := json.Unmarshal(wire, &back); err != nil {
			t.Fatal(err)
		}
		for i := range back {
			back[i].Pinned = false // views never carry the mark
		}
		out, err = r.Encode(back)
		if err != nil {
			t.Fatalf("Encode of the messages after the compaction API: %v", err)
		}
		checkRoundTrip(t, body, out)
	})
}

func checkRoundTrip(t *testing.T, body string, out []byte) {
	t.Helper()
	var got, want any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("Encode wrote invalid JSON: %v\n%s", err, out)
	}
	_ = json.Unmarshal([]byte(body), &want) // decoded above
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip changed the request:\n%s\nto\n%s", body, out)
	}
	var in, back struct {
		Input json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal([]byte(body), &in)
	_ = json.Unmarshal(out, &back)
	var inItems, backItems []json.RawMessage
	if json.Unmarshal(in.Input, &inItems) != nil {
		return // a string input
	}
	_ = json.Unmarshal(back.Input, &backItems)
	if len(inItems) != len(backItems) {
		t.Fatalf("%d items, want %d", len(backItems), len(inItems))
	}
	for i := range inItems {
		if !bytes.Equal(inItems[i], backItems[i]) {
			t.Fatalf("item %d changed:\n%s\nto\n%s", i, inItems[i], backItems[i])
		}
	}
}
