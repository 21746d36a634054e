package compactclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// A Session asks for answers without the messages it sent that end the view (omitEcho) and
// returns the whole view: the messages of the answer followed by the echoed ones it sent,
// from the full history or from a delta. An answer echoing more messages than were sent is
// an error, and teaches the Session nothing.
func TestSessionPutsEchoBack(t *testing.T) {
	type answer struct {
		body string
		got  CompactRequest
	}
	answers := []*answer{
		{body: `{"messages":[],"echoed":3,"record":{},"watermark":0}`},
		{body: `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"summary"}],"record":{},"watermark":3,"prefixHash":"h"}`},
		{body: `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"summary"}],"echoed":2,"record":{},"watermark":3,"prefixHash":"h"}`},
		{body: `{"messages":[],"echoed":9,"record":{},"watermark":7,"prefixHash":"bad"}`},
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
	msg := func(role compaction.Role, content string) compaction.Message {
		return compaction.Message{Role: role, Content: content}
	}
	history := make([]compaction.Message, 0, 5)
	history = append(history, msg(compaction.RoleSystem, "s"), msg(compaction.RoleUser, "task"), msg(compaction.RoleAssistant, "a1"))
	view := func(history []compaction.Message, want []compaction.Message) {
		t.Helper()
		resp, err := s.Compact(ctx, history, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !compaction.EqualMessages(resp.Messages, want) || resp.Echoed != 0 {
			t.Fatalf("view %+v (echoed %d), want %+v", resp.Messages, resp.Echoed, want)
		}
		if !answers[n-1].got.OmitEcho {
			t.Fatalf("request %d without omitEcho", n)
		}
	}
	view(history, history)
	history = append(history, msg(compaction.RoleUser, "more"))
	view(history, []compaction.Message{msg(compaction.RoleSystem, "s"), msg(compaction.RoleUser, "summary")})
	history = append(history, msg(compaction.RoleAssistant, "a2"))
	// The delta is the leading system message and what follows the watermark; the view is
	// the answer's two messages and the delta's last two.
	view(history, []compaction.Message{msg(compaction.RoleSystem, "s"), msg(compaction.RoleUser, "summary"), history[3], history[4]})
	if got := answers[2].got; got.Watermark != 3 || len(got.Messages) != 3 {
		t.Fatalf("third request: watermark %d, %d messages; want a delta of 3 after watermark 3", got.Watermark, len(got.Messages))
	}
	if _, err := s.Compact(ctx, history, 0); err == nil {
		t.Fatal("an answer echoing 9 of 3 messages was taken")
	}
	if s.watermark != 3 || s.prefixHash != "h" {
		t.Fatalf("a bad answer moved the watermark to %d %q", s.watermark, s.prefixHash)
	}
}
