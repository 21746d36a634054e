package compactclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// ReportPassThrough posts the report to the session's passthrough route as the server reads
// it, with the message and count made to fit; a 204 is success, an error answer an *APIError.
func TestReportPassThrough(t *testing.T) {
	var got []map[string]any
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("Authorization"))
		body, _ := io.ReadAll(r.Body)
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Errorf("body %q: %v", body, err)
		}
		got = append(got, m)
		if m["reason"] == "Nope" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":400,"reason":"BadRequest","message":"reason \"Nope\" is not one of ..."}`))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.ReportPassThrough(ctx, "ns", "agent", PassThroughReport{Conversation: "sub-1", Protocol: "responses",
		Reason: PassThroughStatefulRequest, Message: "previous_response_id\tis set\n", Count: 12}); err != nil {
		t.Fatal(err)
	}
	// Count is brought into range, the message made printable and cut.
	if err := c.ReportPassThrough(ctx, "ns", "agent", PassThroughReport{Protocol: "openai", Reason: PassThroughTooLarge,
		Message: strings.Repeat("é", 400)}); err != nil {
		t.Fatal(err)
	}
	err = c.ReportPassThrough(ctx, "ns", "agent", PassThroughReport{Protocol: "openai", Reason: "Nope", Count: 1})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != http.StatusBadRequest || ae.Reason != ReasonBadRequest {
		t.Errorf("a refused report: %v, want an *APIError 400 BadRequest", err)
	}

	want := "POST /v1/namespaces/ns/sessions/agent/passthrough application/json Bearer t"
	for i, p := range paths {
		if p != want {
			t.Errorf("request %d: %s, want %s", i, p, want)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	first := got[0]
	if first["conversation"] != "sub-1" || first["protocol"] != "responses" || first["reason"] != "StatefulRequest" ||
		first["message"] != "previous_response_id is set" || first["count"] != float64(12) || len(first) != 5 {
		t.Errorf("first report %v", first)
	}
	second := got[1]
	msg, _ := second["message"].(string)
	if second["count"] != float64(1) || len(msg) > MaxPassThroughMessageBytes || !strings.HasSuffix(msg, "…") || !utf8.ValidString(msg) {
		t.Errorf("second report: count %v, message of %d bytes %q", second["count"], len(msg), msg)
	}
	if _, ok := second["conversation"]; ok {
		t.Errorf("a report without a conversation sent %v", second)
	}
}

func TestFitPassThroughMessage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"  upstream said 413  ", "upstream said 413"},
		{"line one\r\nline two\ttabbed", "line one  line two tabbed"},
		{"esc\x1b[31m", "esc [31m"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"bidi\u202eoverride", "bidi override"},
	} {
		if got := FitPassThroughMessage(tc.in); got != tc.want {
			t.Errorf("FitPassThroughMessage(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := FitPassThroughMessage(strings.Repeat("ab€", 200))
	if len(long) > MaxPassThroughMessageBytes || !utf8.ValidString(long) || !strings.HasSuffix(long, "…") {
		t.Errorf("a long message became %d bytes %q", len(long), long)
	}
	if exact := strings.Repeat("x", MaxPassThroughMessageBytes); FitPassThroughMessage(exact) != exact {
		t.Error("a message of exactly the limit was changed")
	}
}

func TestPassThroughReasonValid(t *testing.T) {
	for _, r := range PassThroughReasons {
		if !r.Valid() {
			t.Errorf("%s is not valid", r)
		}
	}
	for _, r := range []PassThroughReason{"", "statefulrequest", "Busy"} {
		if r.Valid() {
			t.Errorf("%q is valid", r)
		}
	}
}
