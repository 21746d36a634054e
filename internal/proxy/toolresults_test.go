package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harness9/compaction-operator/compaction"
)

// toolStub is a compactor that also offloads at source and reads back, as APICompactor does
// through the API: the view is the history it got, the hook offloads results over threshold.
type toolStub struct {
	threshold int // what HookThreshold says
	offloadAt int // what the hook offloads over
	hookErr   error

	mu        sync.Mutex
	hookCalls map[string]int
	stored    map[string]string
	compacted [][]compaction.Message
}

func newToolStub(threshold int) *toolStub {
	return &toolStub{threshold: threshold, offloadAt: 10000, hookCalls: map[string]int{}, stored: map[string]string{}}
}

func (s *toolStub) Compact(_ context.Context, _ string, history []compaction.Message, _ int) ([]compaction.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted = append(s.compacted, history)
	return history, nil
}

func (s *toolStub) HookThreshold() int { return s.threshold }

func (s *toolStub) OffloadToolResult(_ context.Context, _ string, m compaction.Message) (compaction.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hookCalls[m.ToolCallID]++
	if s.hookErr != nil {
		return m, s.hookErr
	}
	if len(m.Content) <= s.offloadAt {
		return m, nil
	}
	s.stored[m.ToolCallID] = m.Content
	m = m.Clone()
	m.Content = compaction.Placeholder(m.ToolCallID, m.Content, "ref-"+m.ToolCallID, 2)
	return m, nil
}

func (s *toolStub) GetToolResult(_ context.Context, _, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.stored[id]
	if !ok {
		return nil, ErrToolResultNotFound
	}
	return []byte(c), nil
}

func (s *toolStub) calls(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hookCalls[id]
}

func newToolProxy(t *testing.T, c Compactor) (*httptest.Server, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // all of it before answering: echo's copy cuts large bodies
		_, _ = w.Write(body)
	}))
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL + "/v1")
	p, err := New(Config{Upstream: upURL, Compactor: c, Metrics: m, Log: logr.Discard(), ReadBackURL: "http://" + srv.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, m
}

type chatMsg struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	ToolCalls  []any  `json:"tool_calls,omitempty"`
}

// toolTurn is the request of an agent after its tool calls ids returned results.
func toolTurn(results map[string]string, ids ...string) string {
	msgs := make([]chatMsg, 0, 2+2*len(ids))
	msgs = append(msgs, chatMsg{Role: "system", Content: "sys"}, chatMsg{Role: "user", Content: "fix it"})
	for _, id := range ids {
		msgs = append(msgs, chatMsg{Role: "assistant", ToolCalls: []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "run", "arguments": "{}"}}}},
			chatMsg{Role: "tool", ToolCallID: id, Content: results[id]})
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	return string(body)
}

// toolContents is what the upstream got as each tool result's content.
func toolContents(t *testing.T, body string) map[string]string {
	t.Helper()
	var req struct {
		Messages []chatMsg `json:"messages"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatalf("upstream body %q: %v", body, err)
	}
	out := map[string]string{}
	for _, m := range req.Messages {
		if m.Role == "tool" {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

// A new tool result over the hook threshold reaches the compaction and the upstream as its
// placeholder on the request that first carries it, ending with the read-back command; smaller
// ones never cost a hook call, and a result is sent to the hook once.
func TestOffloadHookOnEntry(t *testing.T) {
	stub := newToolStub(10000)
	srv, m := newToolProxy(t, stub)
	results := map[string]string{
		"call_big":    strings.Repeat("FAILED test_x line\n", 800), // 15 KB
		"call_medium": strings.Repeat("m", 5000),                   // under the threshold
		"call_small":  "ok",
	}
	_, got := post(t, srv.URL+"/v1/chat/completions", toolTurn(results, "call_small", "call_medium", "call_big"))
	seen := toolContents(t, got)
	big := seen["call_big"]
	wantCmd := fmt.Sprintf("[the full result is stored: read it back with: curl -s '%s/compaction/v1/toolresults/call_big?conversation=", srv.URL)
	if !strings.HasPrefix(big, compaction.PlaceholderPrefix) || !strings.Contains(big, wantCmd) || strings.Contains(big, compaction.PlaceholderReadBack) {
		t.Fatalf("the 15 KB result reached the upstream as\n%s", big)
	}
	if seen["call_medium"] != results["call_medium"] || seen["call_small"] != "ok" {
		t.Error("a result under the threshold was changed")
	}
	if stub.calls("call_medium") != 0 || stub.calls("call_small") != 0 || stub.calls("call_big") != 1 {
		t.Errorf("hook calls %v, want one, for call_big", stub.hookCalls)
	}
	// The compaction saw the placeholder, as the engine wrote it.
	for _, msg := range stub.compacted[0] {
		if msg.ToolCallID == "call_big" && !strings.HasSuffix(msg.Content, compaction.PlaceholderReadBack) {
			t.Errorf("the compaction got\n%s", msg.Content)
		}
	}
	// Next turn: the agent's history still has the full result; the same placeholder, byte
	// for byte, goes upstream without another hook call.
	results["call_next"] = "done"
	_, again := post(t, srv.URL+"/v1/chat/completions", toolTurn(results, "call_small", "call_medium", "call_big", "call_next"))
	if toolContents(t, again)["call_big"] != big || stub.calls("call_big") != 1 {
		t.Errorf("second request: hook calls %d, placeholder the same: %v", stub.calls("call_big"), toolContents(t, again)["call_big"] == big)
	}
	if n := value(m.OffloadHook.WithLabelValues("offloaded")); n != 1 {
		t.Errorf("%v results counted offloaded, want 1", n)
	}
}

// Without a threshold from the API the proxy assumes the smallest a policy allows; a result
// the hook keeps is not sent again.
func TestOffloadHookThresholdUnknown(t *testing.T) {
	stub := newToolStub(0)
	srv, _ := newToolProxy(t, stub)
	results := map[string]string{"tiny": strings.Repeat("t", minHookThreshold), "mid": strings.Repeat("m", 5000)}
	for range 2 {
		post(t, srv.URL+"/v1/chat/completions", toolTurn(results, "tiny", "mid"))
	}
	if stub.calls("tiny") != 0 || stub.calls("mid") != 1 {
		t.Errorf("hook calls %v, want mid once", stub.hookCalls)
	}
}

// A failing hook keeps the result in the request (fail-open) and is tried again next time.
func TestOffloadHookFailsOpen(t *testing.T) {
	stub := newToolStub(10000)
	stub.hookErr = errors.New("API down")
	srv, m := newToolProxy(t, stub)
	results := map[string]string{"call_big": strings.Repeat("x", 20000)}
	code, got := post(t, srv.URL+"/v1/chat/completions", toolTurn(results, "call_big"))
	if code != http.StatusOK || toolContents(t, got)["call_big"] != results["call_big"] {
		t.Fatalf("status %d; the result was changed after a failed hook", code)
	}
	stub.mu.Lock()
	stub.hookErr = nil
	stub.mu.Unlock()
	_, got = post(t, srv.URL+"/v1/chat/completions", toolTurn(results, "call_big"))
	if stub.calls("call_big") != 2 || !strings.HasPrefix(toolContents(t, got)["call_big"], compaction.PlaceholderPrefix) {
		t.Errorf("after the API came back: %d hook calls, result offloaded: %v", stub.calls("call_big"), strings.HasPrefix(toolContents(t, got)["call_big"], compaction.PlaceholderPrefix))
	}
	if n := value(m.OffloadHook.WithLabelValues("failed_open")); n != 1 {
		t.Errorf("%v hook calls counted failed_open, want 1", n)
	}
}

func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

// The read-back route serves a stored result as text after the marker line; a result read
// back is never sent to the hook when it comes back as a tool result.
func TestReadBackRoute(t *testing.T) {
	stub := newToolStub(10000)
	full := strings.Repeat("full line\n", 2000)
	stub.stored["call_1"] = full
	stub.stored["call/2"] = "slash"
	srv, m := newToolProxy(t, stub)
	code, ctype, body := get(t, srv.URL+"/compaction/v1/toolresults/call_1?conversation=abc123")
	if code != http.StatusOK || !strings.HasPrefix(ctype, "text/plain") || !strings.HasPrefix(body, compaction.ReadBackPrefix+" tool_call_id: call_1, 20000 bytes\n") || !strings.HasSuffix(body, full) {
		t.Fatalf("read back: %d %s %.120q", code, ctype, body)
	}
	if !compaction.IsReadBack(body) {
		t.Error("the engine does not recognize the read-back answer")
	}
	if code, _, body := get(t, srv.URL+"/compaction/v1/toolresults/call%2F2?conversation=abc123"); code != http.StatusOK || !strings.HasSuffix(body, "\nslash") {
		t.Errorf("an ID with a slash: %d %q", code, body)
	}
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/compaction/v1/toolresults/call_unknown?conversation=abc123", http.StatusNotFound},
		{"/compaction/v1/toolresults/call%20x?conversation=abc123", http.StatusBadRequest},
		{"/compaction/v1/toolresults/call%00x?conversation=abc123", http.StatusBadRequest},
		{"/compaction/v1/toolresults/?conversation=abc123", http.StatusBadRequest},
		{"/compaction/v1/toolresults/call_1", http.StatusBadRequest},
		{"/compaction/v1/toolresults/call_1?conversation=../x", http.StatusBadRequest},
		{"/compaction/v1/toolresults/call_1?conversation=" + strings.Repeat("c", 65), http.StatusBadRequest},
	} {
		if code, _, body := get(t, srv.URL+tc.path); code != tc.code {
			t.Errorf("GET %s: %d %q, want %d", tc.path, code, body, tc.code)
		}
	}
	if n := value(m.ReadBacks.WithLabelValues("ok")); n != 2 {
		t.Errorf("%v read-backs counted ok, want 2", n)
	}
	// The answer, as the agent's tool returns it, is not offloaded on entry.
	_, _, body = get(t, srv.URL+"/compaction/v1/toolresults/call_1?conversation=abc123")
	_, got := post(t, srv.URL+"/v1/chat/completions", toolTurn(map[string]string{"call_read": body}, "call_read"))
	if stub.calls("call_read") != 0 || toolContents(t, got)["call_read"] != body {
		t.Error("a result read back went to the hook")
	}
}

// The read-back rewrite depends only on the placeholder, the conversation and the proxy's
// address: the same view gives the same bytes.
func TestReadBackRewriteDeterministic(t *testing.T) {
	stub := newToolStub(10000)
	p, err := New(Config{Upstream: echo(t), Compactor: stub, ReadBackURL: "http://127.0.0.1:4141/"})
	if err != nil {
		t.Fatal(err)
	}
	ph := compaction.Placeholder("call_1", strings.Repeat("line\n", 3000), "ref", 3)
	view := []compaction.Message{{Role: compaction.RoleUser, Content: "u"}, {Role: compaction.RoleTool, ToolCallID: "call_1", Content: ph}}
	a, _ := json.Marshal(p.withReadBack("conv1", view))
	b, _ := json.Marshal(p.withReadBack("conv1", view))
	if string(a) != string(b) {
		t.Fatal("the rewrite is not deterministic")
	}
	got := p.withReadBack("conv1", view)[1].Content
	want := strings.TrimSuffix(ph, compaction.PlaceholderReadBack) + "[the full result is stored: read it back with: curl -s 'http://127.0.0.1:4141/compaction/v1/toolresults/call_1?conversation=conv1']"
	if got != want {
		t.Errorf("rewritten placeholder\n%s\nwant\n%s", got, want)
	}
	if view[1].Content != ph {
		t.Error("the rewrite changed its input")
	}
	// Not a placeholder, or no read-back URL: unchanged.
	plain := []compaction.Message{{Role: compaction.RoleTool, ToolCallID: "x", Content: "text " + compaction.PlaceholderReadBack}}
	if out := p.withReadBack("conv1", plain); &out[0] != &plain[0] {
		t.Error("a result that is not a placeholder was rewritten")
	}
	p.cfg.ReadBackURL = ""
	if out := p.withReadBack("conv1", view); &out[0] != &view[0] {
		t.Error("rewritten without a read-back URL")
	}
}

// Anthropic tool_result blocks go through the same hook, and their placeholder through the
// same rewrite.
func TestOffloadHookOnEntryAnthropic(t *testing.T) {
	stub := newToolStub(10000)
	srv, _ := newToolProxy(t, stub)
	big := strings.Repeat("FAILED test_x line\n", 800)
	req, _ := json.Marshal(map[string]any{"model": "claude", "max_tokens": 100, "messages": []any{
		map[string]any{"role": "user", "content": "fix it"},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "run", "input": map[string]any{}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": big}}},
	}})
	code, got := post(t, srv.URL+"/v1/messages", string(req))
	if code != http.StatusOK || strings.Contains(got, "FAILED test_x line\\nFAILED test_x line\\nFAILED test_x line\\nFAILED test_x line\\nFAILED test_x line\\nFAILED test_x line\\nFAILED test_x line") ||
		!strings.Contains(got, "read it back with: curl -s '"+srv.URL+"/compaction/v1/toolresults/toolu_1?conversation=") {
		t.Fatalf("the upstream got %d %.600s", code, got)
	}
	if stub.calls("toolu_1") != 1 {
		t.Errorf("%d hook calls, want 1", stub.calls("toolu_1"))
	}
}

// TestOffloadHookStaleEntry is issue 28 item 6: a result that takes the place of an offloaded
// one under the same tool call ID and with the same length (an agent that rewrote its history
// and numbers its calls again) is new: it is not shown as the first one's placeholder.
func TestOffloadHookStaleEntry(t *testing.T) {
	stub := newToolStub(10000)
	srv, _ := newToolProxy(t, stub)
	first := map[string]string{"call_0": strings.Repeat("FAILED test_a line\n", 800)}
	_, got := post(t, srv.URL+"/v1/chat/completions", toolTurn(first, "call_0"))
	if !strings.HasPrefix(toolContents(t, got)["call_0"], compaction.PlaceholderPrefix) {
		t.Fatal("the first result was not offloaded")
	}
	second := map[string]string{"call_0": strings.Repeat("PASSED test_b line\n", 800)}
	if len(second["call_0"]) != len(first["call_0"]) {
		t.Fatal("the test needs two results of the same length")
	}
	_, got = post(t, srv.URL+"/v1/chat/completions", toolTurn(second, "call_0"))
	if stub.calls("call_0") != 2 {
		t.Errorf("hook calls %d for call_0, want 2: the second result is new", stub.calls("call_0"))
	}
	if c := toolContents(t, got)["call_0"]; !strings.Contains(c, "PASSED test_b") {
		t.Errorf("the second result reached the upstream as the first one's placeholder:\n%.300s", c)
	}
}
