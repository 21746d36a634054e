package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"

	"github.com/go-logr/logr"

	"github.com/harness9/compaction-operator/compaction"
)

// TestRoutes: the paths the real agents send (Claude Code 2.1, Codex 0.17, Gemini CLI 0.61,
// the OpenAI SDKs and Agents SDK, the Vercel AI SDK) reach their provider's upstream at the right path, and the
// conversation requests among them are compacted by their protocol. A prefix is stripped only
// at a segment boundary: /v1beta is not /v1 + "beta".
func TestRoutes(t *testing.T) {
	openai, _ := url.Parse("https://api.openai.com/v1")
	anthropic, _ := url.Parse("https://api.anthropic.com/v1")
	gemini, _ := url.Parse("https://generativelanguage.googleapis.com")
	gateway, _ := url.Parse("https://gateway.example/openai/v1")
	p, err := New(Config{Upstream: openai, AnthropicUpstream: anthropic, GeminiUpstream: gemini, Compactor: &stubCompactor{}, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	pg, err := New(Config{Upstream: gateway, Compactor: &stubCompactor{}, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		agent, method, target string
		header                map[string]string
		proxy                 *Proxy
		want                  string // the upstream URL, query excluded
		protocol              string // "": passed through
	}{
		{"Claude Code", "POST", "/v1/messages?beta=true", map[string]string{"anthropic-version": "2023-06-01"}, p, "https://api.anthropic.com/v1/messages", "anthropic"},
		{"Claude Code", "POST", "/v1/messages/count_tokens?beta=true", map[string]string{"anthropic-version": "2023-06-01"}, p, "https://api.anthropic.com/v1/messages/count_tokens", "anthropic"},
		{"Claude Code", "HEAD", "/api/hello", nil, p, "https://api.anthropic.com/api/hello", ""},
		{"Claude Code", "POST", "/api/event_logging/batch", nil, p, "https://api.anthropic.com/api/event_logging/batch", ""},
		{"Claude Code", "GET", "/v1/models?limit=1000", map[string]string{"anthropic-version": "2023-06-01"}, p, "https://api.anthropic.com/v1/models", ""},
		{"AI SDK, ANTHROPIC_BASE_URL without /v1", "POST", "/messages", map[string]string{"anthropic-version": "2023-06-01"}, p, "https://api.anthropic.com/v1/messages", "anthropic"},
		{"AI SDK, ANTHROPIC_BASE_URL without /v1", "POST", "/messages/count_tokens", map[string]string{"anthropic-version": "2023-06-01"}, p, "https://api.anthropic.com/v1/messages/count_tokens", "anthropic"},
		{"Anthropic SDK", "POST", "/v1/messages/batches", map[string]string{"anthropic-version": "2023-06-01"}, p, "https://api.anthropic.com/v1/messages/batches", ""},
		{"Codex", "POST", "/v1/responses", nil, p, "https://api.openai.com/v1/responses", "responses"},
		{"Codex", "GET", "/v1/models?client_version=0.171.0", nil, p, "https://api.openai.com/v1/models", ""},
		{"Agents SDK", "POST", "/v1/responses", nil, p, "https://api.openai.com/v1/responses", "responses"},
		{"Agents SDK", "GET", "/v1/responses/resp_1", nil, p, "https://api.openai.com/v1/responses/resp_1", ""},
		{"OpenAI SDK", "POST", "/v1/chat/completions", nil, p, "https://api.openai.com/v1/chat/completions", "openai"},
		{"OpenAI SDK", "POST", "/v1/chat/completions", nil, pg, "https://gateway.example/openai/v1/chat/completions", "openai"},
		{"OpenAI SDK without /v1", "POST", "/chat/completions", nil, p, "https://api.openai.com/v1/chat/completions", "openai"},
		{"OpenAI SDK", "POST", "/v1/threads/t_1/messages", nil, p, "https://api.openai.com/v1/threads/t_1/messages", ""},
		{"OpenAI SDK", "POST", "/v1/embeddings", nil, p, "https://api.openai.com/v1/embeddings", ""},
		{"Gemini CLI", "POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", map[string]string{"x-goog-api-key": "k"}, p, "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent", "gemini"},
		{"Gemini CLI", "POST", "/v1beta/models/gemini-2.5-flash:generateContent", nil, p, "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent", "gemini"},
		{"Gemini CLI", "POST", "/v1beta/models/gemini-2.5-pro:countTokens", nil, p, "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:countTokens", "gemini"},
		{"Gemini CLI", "POST", "/v1beta/models/gemini-embedding-001:batchEmbedContents", nil, p, "https://generativelanguage.googleapis.com/v1beta/models/gemini-embedding-001:batchEmbedContents", ""},
		{"Gemini SDK v1", "POST", "/v1/models/gemini-2.5-pro:generateContent", nil, p, "https://generativelanguage.googleapis.com/v1/models/gemini-2.5-pro:generateContent", "gemini"},
		{"Gemini SDK", "GET", "/v1beta/models", nil, p, "https://generativelanguage.googleapis.com/v1beta/models", ""},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		s := surfaceOf(r)
		base := c.proxy.upstreamOf(s)
		u := *base
		u.Path = upstreamPath(base, s, r.URL.Path)
		if got := u.String(); got != c.want {
			t.Errorf("%s %s %s: upstream %s, want %s", c.agent, c.method, c.target, got, c.want)
		}
		got := ""
		if proto := c.proxy.protocolFor(r, s); proto != nil {
			got = proto.name()
		}
		if got != c.protocol {
			t.Errorf("%s %s %s: protocol %q, want %q", c.agent, c.method, c.target, got, c.protocol)
		}
	}
}

// TestWebSocketRefused: Codex's WebSocket upgrade on /v1/responses is answered 426 at once,
// never forwarded, and counted.
func TestWebSocketRefused(t *testing.T) {
	hit := false
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit = true }))
	t.Cleanup(up.Close)
	base, _ := url.Parse(up.URL + "/v1")
	srv, m := newTestProxy(t, base, &stubCompactor{}, 0)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/responses", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || hit {
		t.Errorf("WebSocket upgrade: %d, upstream hit %v; want 426 and no upstream request", resp.StatusCode, hit)
	}
	if n := value(m.Requests.WithLabelValues("openai", "websocket")); n != 1 {
		t.Errorf("websocket pass-throughs counted %v, want 1", n)
	}
}

// TestUniqueToolCallIDs: a model server that numbers calls per turn (call_0 every turn) gets
// unique IDs, results paired by position, the same IDs for the same history, and its own IDs
// back in the view.
func TestUniqueToolCallIDs(t *testing.T) {
	call := func(ids ...string) compaction.Message {
		m := compaction.Message{Role: compaction.RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, compaction.ToolCall{ID: id, Type: "function", Function: compaction.FunctionCall{Name: "sh", Arguments: "{}"}})
		}
		return m
	}
	result := func(id, text string) compaction.Message {
		return compaction.Message{Role: compaction.RoleTool, ToolCallID: id, Content: text}
	}
	history := []compaction.Message{
		{Role: compaction.RoleSystem, Content: "s"}, {Role: compaction.RoleUser, Content: "task"},
		call("call_0", "call_1"), result("call_0", "a"), result("call_1", "b"),
		call("call_0"), result("call_0", "c"),
		call("call_0", "call_0~2"), result("call_0", "d"), result("call_0~2", "e"),
	}
	orig := make([]compaction.Message, len(history))
	for i := range history {
		orig[i] = history[i].Clone()
	}
	got, ids := uniqueToolCallIDs(history)
	var calls, results []string
	for _, m := range got {
		for _, tc := range m.ToolCalls {
			calls = append(calls, tc.ID)
		}
		if m.Role == compaction.RoleTool {
			results = append(results, m.ToolCallID)
		}
	}
	// The agent's own call_0~2 keeps its ID: the renamed ones step over it.
	wantCalls := []string{"call_0", "call_1", "call_0~3", "call_0~4", "call_0~2"}
	wantResults := wantCalls
	if !reflect.DeepEqual(calls, wantCalls) || !reflect.DeepEqual(results, wantResults) {
		t.Fatalf("calls %v, results %v; want %v and %v", calls, results, wantCalls, wantResults)
	}
	if err := compaction.Validate(got); err != nil {
		t.Fatalf("the engine refuses the unique IDs: %v", err)
	}
	if !reflect.DeepEqual(history, orig) {
		t.Fatal("uniqueToolCallIDs changed the history it was given")
	}
	again, _ := uniqueToolCallIDs(append(history[:len(history):len(history)], call("call_0"), result("call_0", "f")))
	if !reflect.DeepEqual(again[:len(got)], got) {
		t.Fatal("a longer history of the same conversation got other IDs for its earlier calls")
	}
	if back := ids.restore(got); !reflect.DeepEqual(back, history) {
		t.Fatalf("restore gave %+v, want the agent's history", back)
	}
	if same, none := uniqueToolCallIDs(orig[:5]); none != nil || &same[0] != &orig[0] {
		t.Fatal("a history without reused IDs is not returned as it is")
	}
}
