package compactclient

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// Every call sends the conversation as the query parameter conversation, and none without
// one: a client that does not use conversations sends the requests it always sent.
func TestConversationParameter(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"message":{"role":"tool","tool_call_id":"c","content":"x"},"watermark":3,"prefixHash":"h"}`))
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msg := compaction.Message{Role: compaction.RoleTool, ToolCallID: "c", Content: "x"}
	history := []compaction.Message{{Role: compaction.RoleUser, Content: "a"}, {Role: compaction.RoleUser, Content: "b"}, {Role: compaction.RoleUser, Content: "c"}}
	for _, s := range []*Session{
		{Client: c, Namespace: "ns", Name: "agent"},
		{Client: c, Namespace: "ns", Name: "agent", Conversation: "sub-agent.1"},
	} {
		// Twice: the second is a delta request, which carries the conversation too.
		for range 2 {
			if _, err := s.Compact(ctx, history, 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.OffloadToolResult(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetToolResult(ctx, "call_1"); err != nil {
			t.Fatal(err)
		}
		if err := s.Records(ctx, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	}
	// The Client's own methods, with and without the option.
	if _, err := c.Compact(ctx, "ns", "agent", CompactRequest{Messages: history}, InConversation("w")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, "ns", "agent", CompactRequest{Messages: history}, InConversation("")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"POST /v1/namespaces/ns/sessions/agent/compact",
		"POST /v1/namespaces/ns/sessions/agent/compact",
		"POST /v1/namespaces/ns/sessions/agent/toolresults",
		"GET /v1/namespaces/ns/sessions/agent/toolresults/call_1",
		"GET /v1/namespaces/ns/sessions/agent/records",
		"POST /v1/namespaces/ns/sessions/agent/compact?conversation=sub-agent.1",
		"POST /v1/namespaces/ns/sessions/agent/compact?conversation=sub-agent.1",
		"POST /v1/namespaces/ns/sessions/agent/toolresults?conversation=sub-agent.1",
		"GET /v1/namespaces/ns/sessions/agent/toolresults/call_1?conversation=sub-agent.1",
		"GET /v1/namespaces/ns/sessions/agent/records?conversation=sub-agent.1",
		"POST /v1/namespaces/ns/sessions/agent/compact?conversation=w",
		"POST /v1/namespaces/ns/sessions/agent/compact",
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("requests:\n%q\nwant\n%q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %s, want %s", i, got[i], want[i])
		}
	}
}

// A tool call ID that is not safe in a path as it is reaches the server as that ID, escaped
// once (the server's mux unescapes it once).
func TestToolCallIDEscapedOnce(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.EscapedPath()+" "+r.URL.Path)
		_, _ = w.Write([]byte("x"))
	}))
	t.Cleanup(srv.Close)
	for _, base := range []string{srv.URL, srv.URL + "/", srv.URL + "/api%20v"} {
		c, err := New(base, WithToken("t"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetToolResult(context.Background(), "ns", "agent", "call/1 %"); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"/v1/namespaces/ns/sessions/agent/toolresults/call%2F1%20%25 /v1/namespaces/ns/sessions/agent/toolresults/call/1 %",
		"/v1/namespaces/ns/sessions/agent/toolresults/call%2F1%20%25 /v1/namespaces/ns/sessions/agent/toolresults/call/1 %",
		"/api%20v/v1/namespaces/ns/sessions/agent/toolresults/call%2F1%20%25 /api v/v1/namespaces/ns/sessions/agent/toolresults/call/1 %",
	}
	if len(got) != len(want) {
		t.Fatalf("requests %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %q, want %q", i, got[i], want[i])
		}
	}
}
