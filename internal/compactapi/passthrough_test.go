package compactapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// TestParsePassThrough: a report is taken only as the route documents it; anything else is a
// 400 BadRequest whose message names what is wrong.
func TestParsePassThrough(t *testing.T) {
	ok := `{"protocol":"responses","reason":"StatefulRequest","message":"previous_response_id is set","count":12,"conversation":"sub-1"}`
	got, err := parsePassThrough([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	want := passThroughReport{conversation: "sub-1", protocol: "responses", message: "previous_response_id is set",
		reason: compactionv1alpha1.PassThroughStatefulRequest, count: 12}
	if *got != want {
		t.Errorf("parsed %+v, want %+v", *got, want)
	}
	if _, err := parsePassThrough([]byte(`{"protocol":"gemini","reason":"WebSocket","count":1}`)); err != nil {
		t.Errorf("a report without message and conversation: %v", err)
	}
	if _, err := parsePassThrough([]byte(`{"protocol":"openai","reason":"TooLarge","count":1,"message":"` + strings.Repeat("é", 256) + `"}`)); err != nil {
		t.Errorf("a message of 512 bytes: %v", err)
	}

	for _, tc := range []struct{ name, body, says string }{
		{"empty", ``, "empty request body"},
		{"not an object", `[]`, "malformed JSON"},
		{"unknown field", `{"protocol":"openai","reason":"TooLarge","count":1,"session":"other"}`, "unknown field"},
		{"data after the object", `{"protocol":"openai","reason":"TooLarge","count":1} {}`, "data after"},
		{"no reason", `{"protocol":"openai","count":1}`, "reason \"\" is not one of"},
		{"unknown reason", `{"protocol":"openai","reason":"Busy","count":1}`, "NotDecodable, StatefulRequest, TooLarge, UnsupportedRequest, CompactionFailed, WebSocket"},
		{"reason in another case", `{"protocol":"openai","reason":"statefulrequest","count":1}`, "is not one of"},
		{"no protocol", `{"reason":"TooLarge","count":1}`, "protocol \"\""},
		{"protocol in capitals", `{"protocol":"OpenAI","reason":"TooLarge","count":1}`, "lower-case token"},
		{"protocol with a space", `{"protocol":"open ai","reason":"TooLarge","count":1}`, "lower-case token"},
		{"long protocol", `{"protocol":"` + strings.Repeat("a", 33) + `","reason":"TooLarge","count":1}`, "1 to 32"},
		{"no count", `{"protocol":"openai","reason":"TooLarge"}`, "count is 0"},
		{"negative count", `{"protocol":"openai","reason":"TooLarge","count":-3}`, "count is -3"},
		{"huge count", `{"protocol":"openai","reason":"TooLarge","count":1000001}`, "1 to 1000000"},
		{"fractional count", `{"protocol":"openai","reason":"TooLarge","count":1.5}`, "malformed JSON"},
		{"long message", `{"protocol":"openai","reason":"TooLarge","count":1,"message":"` + strings.Repeat("x", 513) + `"}`, "513 bytes"},
		{"control character", `{"protocol":"openai","reason":"TooLarge","count":1,"message":"a\u001b[31mred"}`, "unprintable character U+001B"},
		{"newline", `{"protocol":"openai","reason":"TooLarge","count":1,"message":"a\nb"}`, "one line"},
		{"bidi override", `{"protocol":"openai","reason":"TooLarge","count":1,"message":"a\u202eb"}`, "U+202E"},
		{"bad conversation", `{"protocol":"openai","reason":"TooLarge","count":1,"conversation":".hidden"}`, "conversation:"},
		{"long conversation", `{"protocol":"openai","reason":"TooLarge","count":1,"conversation":"` + strings.Repeat("c", 65) + `"}`, "conversation:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePassThrough([]byte(tc.body))
			var ae *apiError
			if !errors.As(err, &ae) || ae.code != http.StatusBadRequest || ae.reason != ReasonBadRequest {
				t.Fatalf("got %v, want a 400 BadRequest", err)
			}
			if !strings.Contains(ae.msg, tc.says) {
				t.Errorf("message %q does not say %q", ae.msg, tc.says)
			}
		})
	}
}

// TestPassThroughReasonsMatch: the client's reasons are the API's, in the same order, and each
// has a counter in status.passThrough.reasons.
func TestPassThroughReasonsMatch(t *testing.T) {
	if len(compactclient.PassThroughReasons) != len(compactionv1alpha1.PassThroughReasons) {
		t.Fatalf("client reasons %v, API reasons %v", compactclient.PassThroughReasons, compactionv1alpha1.PassThroughReasons)
	}
	var counts compactionv1alpha1.PassThroughCounts
	seen := map[**int64]bool{}
	for i, r := range compactclient.PassThroughReasons {
		if string(r) != string(compactionv1alpha1.PassThroughReasons[i]) {
			t.Errorf("reason %d: client %s, API %s", i, r, compactionv1alpha1.PassThroughReasons[i])
		}
		c := counts.Counter(compactionv1alpha1.PassThroughReason(r))
		if c == nil || seen[c] {
			t.Errorf("reason %s has no counter of its own", r)
		}
		seen[c] = true
	}
}
