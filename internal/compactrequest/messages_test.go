package compactrequest_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/compactrequest"
)

// DecodeMessages decodes what json.Unmarshal decodes, or leaves it to json.Unmarshal.
func TestDecodeMessagesAsEncodingJSON(t *testing.T) {
	for _, raw := range []string{
		`[]`,
		` [ ] `,
		`[{"role":"user","content":"a \"quoted\" } ] { [ brace"}]`,
		"[ {\"role\":\"system\",\"content\":\"s\"} ,\n\t{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x]}\"}]} ]",
		`[{"role":"assistant","content":null,"tool_calls":[{"id":"c\\1","type":"function","function":{"name":"f","arguments":"{\"a\":[1,{}]}"}}]},{"role":"tool","tool_call_id":"c\\1","content":"\u00e9\\\\"}]`,
		`[{"role":"user","content":"x","extra_field":{"nested":[1,2,{"k":"]"}]}}]`,
		`null`,
		`[null]`,
		`[1]`,
		`[{"role":"user","content":1}]`,
		`[{"role":"user","content":"x"},]`,
		`{"role":"user"}`,
	} {
		var want []compaction.Message
		wantErr := json.Unmarshal([]byte(raw), &want)
		got, ok := compactrequest.DecodeMessages([]byte(raw))
		if !ok {
			continue // json.Unmarshal decides
		}
		if wantErr != nil {
			t.Errorf("%s: DecodeMessages took what json.Unmarshal refuses (%v)", raw, wantErr)
			continue
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if string(a) != string(b) || len(got) != len(want) || (len(got) == 0) != (len(want) == 0) || reflect.TypeOf(got) != reflect.TypeOf(want) {
			t.Errorf("%s:\nDecodeMessages %s\njson.Unmarshal %s", raw, a, b)
		}
	}
}
