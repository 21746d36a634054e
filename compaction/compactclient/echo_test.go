package compactclient

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// A Session asks for answers without the messages it sent that end the view (omitEcho) and
// returns the whole view: the messages of the answer followed by the echoed ones it sent,
// from the full history or from a delta. A view that is all of the history is its array,
// capped. An answer echoing more messages than were sent, or a negative number, is an error
// and teaches the Session nothing.
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
		{body: `{"messages":[],"echoed":-1,"record":{},"watermark":7,"prefixHash":"bad"}`},
	}
	n := 0
	s := sessionOn(t, func(w http.ResponseWriter, r *http.Request) {
		a := answers[n]
		n++
		if err := json.NewDecoder(r.Body).Decode(&a.got); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(a.body))
	})
	ctx := context.Background()
	msg := func(role compaction.Role, content string) compaction.Message {
		return compaction.Message{Role: role, Content: content}
	}
	history := make([]compaction.Message, 0, 5)
	history = append(history, msg(compaction.RoleSystem, "s"), msg(compaction.RoleUser, "task"), msg(compaction.RoleAssistant, "a1"))
	view := func(history []compaction.Message, want []compaction.Message) []compaction.Message {
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
		return resp.Messages
	}
	all := view(history, history)
	if len(all) != cap(all) || &all[0] != &history[0] {
		t.Fatalf("a view that is all of the history: len %d cap %d, shared %t; want history's array, capped", len(all), cap(all), &all[0] == &history[0])
	}
	_ = append(all, msg(compaction.RoleUser, "into the view"))
	history = append(history, msg(compaction.RoleUser, "more"))
	if history[3].Content != "more" {
		t.Fatalf("appending to the view wrote into history: %q", history[3].Content)
	}
	view(history, []compaction.Message{msg(compaction.RoleSystem, "s"), msg(compaction.RoleUser, "summary")})
	history = append(history, msg(compaction.RoleAssistant, "a2"))
	// The delta is the leading system message and what follows the watermark; the view is
	// the answer's two messages and the delta's last two.
	view(history, []compaction.Message{msg(compaction.RoleSystem, "s"), msg(compaction.RoleUser, "summary"), history[3], history[4]})
	if got := answers[2].got; got.Watermark != 3 || len(got.Messages) != 3 {
		t.Fatalf("third request: watermark %d, %d messages; want a delta of 3 after watermark 3", got.Watermark, len(got.Messages))
	}
	for _, bad := range []string{"9 of 3", "-1"} {
		if _, err := s.Compact(ctx, history, 0); err == nil {
			t.Fatalf("an answer echoing %s messages was taken", bad)
		}
		if s.watermark != 3 || s.prefixHash != "h" {
			t.Fatalf("an answer echoing %s messages moved the watermark to %d %q", bad, s.watermark, s.prefixHash)
		}
	}
}

// A Session talking to a server older than omitEcho (which refuses the unknown field) sends
// the request again without it, and never sends it again.
func TestSessionOmitEchoOlderServer(t *testing.T) {
	var requests, refused int
	s := sessionOn(t, func(w http.ResponseWriter, r *http.Request) {
		requests++
		var body map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		if _, ok := body["omitEcho"]; ok {
			refused++
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":400,"reason":"BadRequest","message":"malformed JSON body: json: unknown field \"omitEcho\""}`))
			return
		}
		_, _ = w.Write([]byte(`{"messages":` + string(body["messages"]) + `,"record":{},"watermark":0}`))
	})
	history := []compaction.Message{{Role: compaction.RoleSystem, Content: "s"}, {Role: compaction.RoleUser, Content: "task"}}
	for turn := range 3 {
		resp, err := s.Compact(context.Background(), history, 0)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if !compaction.EqualMessages(resp.Messages, history) {
			t.Fatalf("turn %d: view %+v", turn, resp.Messages)
		}
	}
	if requests != 4 || refused != 1 {
		t.Fatalf("%d requests, %d refused; want 4 and 1 (omitEcho once, then never)", requests, refused)
	}
	// Another refusal is an error as before.
	if refusesField(&APIError{ErrorResponse{Code: 400, Reason: ReasonBadRequest, Message: "messages is empty"}}, "omitEcho") {
		t.Fatal("a 400 about something else is taken for a refusal of omitEcho")
	}
}
