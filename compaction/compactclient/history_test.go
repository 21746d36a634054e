package compactclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// History, SearchHistory and Reset send their parameters and the conversation as the API
// takes them (nothing for what is not set), decode the answers, and a Session's Reset
// makes its next Compact send the full history.
func TestHistoryAndResetRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	s := sessionOn(t, func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + r.URL.RequestURI()
		if strings.HasSuffix(r.URL.Path, "/compact") {
			var req CompactRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				t.Error(err)
			}
			line += fmt.Sprintf(" watermark=%d messages=%d", req.Watermark, len(req.Messages))
		}
		mu.Lock()
		got = append(got, line)
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/reset"):
			_, _ = w.Write([]byte(`{"record":{"id":"r","sessionID":"u","tier":"None","reset":true,"watermarkBefore":7}}`))
		case strings.HasSuffix(r.URL.Path, "/compact"):
			_, _ = w.Write([]byte(`{"messages":[],"watermark":2,"prefixHash":"h","record":{"tier":"Full"}}`))
		case r.URL.Query().Get("q") == "(":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":400,"reason":"BadRequest","message":"q parameter: invalid regular expression"}`))
		default:
			_, _ = w.Write([]byte(`{"messages":[{"index":3,"role":"tool","archive":"1-9","message":{"role":"tool","tool_call_id":"c","content":"out"}}],"next":4,"truncated":true}`))
		}
	})
	ctx := context.Background()
	s.Conversation = "sub.1"
	resp, err := s.History(ctx, HistoryRange{From: 3, To: 9, Limit: 1})
	if err != nil || len(resp.Messages) != 1 || resp.Messages[0].Index != 3 || resp.Messages[0].Message.ToolCallID != "c" || !resp.Truncated || resp.Next != 4 {
		t.Fatalf("History = %+v, %v", resp, err)
	}
	if _, err := s.SearchHistory(ctx, HistorySearch{Text: "FAIL: Test", Regex: true}); err != nil {
		t.Fatal(err)
	}
	var ae *APIError
	if _, err := s.Client.SearchHistory(ctx, "ns", "agent", HistorySearch{Text: "(", Regex: true}); !errors.As(err, &ae) || ae.Code != http.StatusBadRequest {
		t.Errorf("a bad pattern: %v, want the 400", err)
	}
	if _, err := s.Client.History(ctx, "ns", "agent", HistoryRange{}); err != nil {
		t.Fatal(err)
	}
	history := []compaction.Message{{Role: compaction.RoleSystem, Content: "s"}, {Role: compaction.RoleUser, Content: "a"}, {Role: compaction.RoleUser, Content: "b"}}
	if _, err := s.Compact(ctx, history, 0); err != nil {
		t.Fatal(err)
	}
	reset, err := s.Reset(ctx)
	if err != nil || reset.Record == nil || !reset.Record.Reset || reset.Record.WatermarkBefore != 7 {
		t.Fatalf("Reset = %+v, %v", reset, err)
	}
	// Without the reset this would be a delta from watermark 2.
	if _, err := s.Compact(ctx, history, 0); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"GET /v1/namespaces/ns/sessions/agent/history?conversation=sub.1&from=3&limit=1&to=9",
		"GET /v1/namespaces/ns/sessions/agent/history/search?conversation=sub.1&q=FAIL%3A+Test&regex=1",
		"GET /v1/namespaces/ns/sessions/agent/history/search?q=%28&regex=1",
		"GET /v1/namespaces/ns/sessions/agent/history",
		"POST /v1/namespaces/ns/sessions/agent/compact?conversation=sub.1 watermark=0 messages=3",
		"POST /v1/namespaces/ns/sessions/agent/reset?conversation=sub.1",
		"POST /v1/namespaces/ns/sessions/agent/compact?conversation=sub.1 watermark=0 messages=3",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
