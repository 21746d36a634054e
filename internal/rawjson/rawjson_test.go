package rawjson

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRawJSON(t *testing.T) {
	if got := string(JoinArray([]json.RawMessage{json.RawMessage(`{"a": 1}`), json.RawMessage(`"x"`)})); got != `[{"a": 1},"x"]` {
		t.Errorf("JoinArray = %s", got)
	}
	if got := string(JoinArray(nil)); got != `[]` {
		t.Errorf("JoinArray(nil) = %s", got)
	}
	if got := string(MustMarshal(map[string]string{"t": "<a & b>"})); got != `{"t":"<a & b>"}` {
		t.Errorf("MustMarshal escaped HTML: %s", got)
	}
	for raw, want := range map[string]bool{"null": true, " null\n": true, `"null"`: false, "": false, "nul": false} {
		if IsNull(json.RawMessage(raw)) != want {
			t.Errorf("IsNull(%q) = %v", raw, !want)
		}
	}
	obj := Object(map[string]json.RawMessage{"b": json.RawMessage(`[1, 2]`), "a<": json.RawMessage(`"x"`), "": json.RawMessage(`null`)})
	if got := string(obj); got != `{"":null,"a<":"x","b":[1, 2]}` {
		t.Errorf("Object = %s: keys sorted and written as JSON, values verbatim", got)
	}
	if got := string(Object(nil)); got != `{}` {
		t.Errorf("Object(nil) = %s", got)
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("Marshal of a func must fail")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustMarshal of a func must panic")
		}
	}()
	MustMarshal(make(chan int))
}

// TestDecodeBody: a body that is not a JSON object in valid UTF-8 is an error saying so.
func TestDecodeBody(t *testing.T) {
	if f, err := DecodeBody([]byte(`{"a": 1}`)); err != nil || string(f["a"]) != "1" {
		t.Fatalf("DecodeBody of an object = %v, %v", f, err)
	}
	for body, want := range map[string]string{"\xff{}": "not valid UTF-8", "[1]": "not a JSON object", "null": "the body is null", "": "not a JSON object"} {
		if _, err := DecodeBody([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeBody(%q) = %v, want an error saying %q", body, err, want)
		}
	}
}
