package compactclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// A Session asks for answers without an unchanged view (acceptUnchanged) and, given one,
// returns the messages it sent as the view: the full history, or the delta after a
// watermark. An answer with a view returns that view.
func TestSessionUnchangedView(t *testing.T) {
	type answer struct {
		body string
		got  CompactRequest
	}
	answers := []*answer{
		{body: `{"messages":null,"unchanged":true,"record":{},"watermark":0}`},
		{body: `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"summary"}],"record":{},"watermark":3,"prefixHash":"h"}`},
		{body: `{"messages":null,"unchanged":true,"record":{},"watermark":3,"prefixHash":"h"}`},
	}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[n]
		n++
		if err := json.NewDecoder(r.Body).Decode(&a.got); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{Client: c, Namespace: "ns", Name: "agent"}
	ctx := context.Background()
	history := []compaction.Message{
		{Role: compaction.RoleSystem, Content: "s"}, {Role: compaction.RoleUser, Content: "task"}, {Role: compaction.RoleAssistant, Content: "a1"},
	}
	view := func(history []compaction.Message, want []compaction.Message) {
		t.Helper()
		resp, err := s.Compact(ctx, history, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !compaction.EqualMessages(resp.Messages, want) {
			t.Fatalf("view %+v, want %+v", resp.Messages, want)
		}
		if !answers[n-1].got.AcceptUnchanged {
			t.Fatalf("request %d without acceptUnchanged", n)
		}
	}
	view(history, history)
	history = append(history, compaction.Message{Role: compaction.RoleUser, Content: "more"})
	view(history, []compaction.Message{{Role: compaction.RoleSystem, Content: "s"}, {Role: compaction.RoleUser, Content: "summary"}})
	history = append(history, compaction.Message{Role: compaction.RoleAssistant, Content: "a2"})
	// The delta: the leading system message and what follows the watermark.
	view(history, []compaction.Message{history[0], history[3], history[4]})
	if got := answers[2].got; got.Watermark != 3 || len(got.Messages) != 3 {
		t.Fatalf("third request: watermark %d, %d messages; want a delta of 3 after watermark 3", got.Watermark, len(got.Messages))
	}
}
