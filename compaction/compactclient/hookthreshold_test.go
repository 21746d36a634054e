package compactclient

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// A Session sends a tool result to the toolresults route only when it is over the hook
// threshold the last answer gave: a result at or under it comes back as it is, without a
// round trip. Before any answer, every result is sent; an answer without a threshold (an
// older server) keeps the one known.
func TestSessionSkipsHooksUnderThreshold(t *testing.T) {
	var hooks, compacts atomic.Int32
	var threshold atomic.Int32
	threshold.Store(100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/toolresults"):
			hooks.Add(1)
			_, _ = fmt.Fprintf(w, `{"message":{"role":"tool","tool_call_id":"c","content":"kept"},"hookThreshold":%d}`, threshold.Load())
		case strings.HasSuffix(r.URL.Path, "/compact"):
			compacts.Add(1)
			_, _ = fmt.Fprintf(w, `{"messages":[],"record":{},"watermark":1,"prefixHash":"h","hookThreshold":%d}`, threshold.Load())
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := &Session{Client: c, Namespace: "ns", Name: "agent"}
	result := func(n int) compaction.Message {
		return compaction.Message{Role: compaction.RoleTool, ToolCallID: fmt.Sprintf("c%d", n), Content: strings.Repeat("x", n)}
	}
	offload := func(n int, wantHooks int32) {
		t.Helper()
		m := result(n)
		resp, err := s.OffloadToolResult(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := hooks.Load(); got != wantHooks {
			t.Fatalf("a %d-byte result: %d toolresults requests in all, want %d", n, got, wantHooks)
		}
		if resp == nil {
			t.Fatalf("a %d-byte result: no answer", n)
		}
	}

	if s.HookThreshold() != 0 {
		t.Fatalf("HookThreshold before any answer: %d, want 0", s.HookThreshold())
	}
	offload(10, 1) // nothing known yet: sent
	if s.HookThreshold() != 100 {
		t.Fatalf("HookThreshold after the first answer: %d, want 100", s.HookThreshold())
	}
	// At or under 100 bytes: kept as it is, not sent.
	m := result(100)
	resp, err := s.OffloadToolResult(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if hooks.Load() != 1 || resp.Message.Content != m.Content || resp.Message.ToolCallID != m.ToolCallID || resp.Offloaded != nil {
		t.Fatalf("a result at the threshold: %d requests, answer %+v; want no request and the result as it is", hooks.Load(), resp)
	}
	offload(101, 2) // over it: sent

	// A compaction's answer lowers it to 50: a 60-byte result is sent again.
	threshold.Store(50)
	if _, err := s.Compact(ctx, []compaction.Message{{Role: compaction.RoleUser, Content: "go"}}, 0); err != nil {
		t.Fatal(err)
	}
	offload(60, 3)
	offload(50, 3)

	// An answer without a threshold keeps the one known.
	threshold.Store(0)
	offload(70, 4)
	offload(40, 4)
	if s.HookThreshold() != 50 {
		t.Fatalf("HookThreshold after an answer without one: %d, want 50", s.HookThreshold())
	}
}
