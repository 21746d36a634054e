package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/harness9/compaction-operator/compaction"
)

// benchHistory is an OpenAI request of an agent after turns tool calls (1-2 KB per result,
// 16 KB every fifth).
func benchHistory(turns int, stream bool) []byte {
	msgs := []map[string]any{{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the tests"}}
	for turn := 1; turn <= turns; turn++ {
		id := fmt.Sprintf("call_%d", turn)
		lines := 30 + (turn%3)*20
		if turn%5 == 0 {
			lines = 330
		}
		var out strings.Builder
		for j := range lines {
			fmt.Fprintf(&out, "tests/test_case%d.py::test_%d PASSED [%d%%]\n", turn, j, 100*j/lines)
		}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": "run", "arguments": `{"cmd":"pytest"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": out.String()})
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": stream})
	return body
}

// BenchmarkProxyRequest is the proxy's own cost per chat request, without the compaction API
// (a compactor that returns the history) and with an upstream that answers at once: decoding
// the request, encoding the view, forwarding and reading the answer's usage. The direct case is
// the same request straight to the upstream. hack/proxybench measures it against the real
// manager.
func BenchmarkProxyRequest(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":1,"total_tokens":1001}}`)
	}))
	defer up.Close()
	upURL, _ := url.Parse(up.URL + "/v1")
	p, err := New(Config{Upstream: upURL, Compactor: passThroughCompactor{}, PromptCacheKey: true, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	for _, turns := range []int{5, 40} {
		body := benchHistory(turns, false)
		for _, via := range []struct{ name, base string }{{"direct", up.URL}, {"proxied", srv.URL}} {
			b.Run(fmt.Sprintf("turns=%d/%dKB/%s", turns, len(body)>>10, via.name), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					resp, err := hc.Post(via.base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
		}
	}
}

// passThroughCompactor returns the history as it is.
type passThroughCompactor struct{}

func (passThroughCompactor) Compact(_ context.Context, _ string, history []compaction.Message, _ int) ([]compaction.Message, error) {
	return history, nil
}
