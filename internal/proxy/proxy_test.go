package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/harness9/compaction-operator/compaction"
)

// stubCompactor stands for the compaction API in these unit tests of the proxy's own paths
// (test/proxy drives the real one): it keeps the last message only, or fails.
type stubCompactor struct {
	err   error
	mu    sync.Mutex
	calls int
}

func (s *stubCompactor) Compact(_ context.Context, _ string, history []compaction.Message, _ int) ([]compaction.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	return history[len(history)-1:], nil
}

// echo is an upstream that answers with the body it received.
func echo(t *testing.T) *url.URL {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/v1")
	return u
}

func newTestProxy(t *testing.T, upstream *url.URL, c Compactor, maxBody int64) (*httptest.Server, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Upstream: upstream, Compactor: c, MaxBodyBytes: maxBody, Metrics: m, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, m
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

const twoMessages = `{"model":"m","messages":[{"role":"user","content":"first"},{"role":"user","content":"second"}]}`

// What the proxy cannot or need not compact goes upstream as the agent sent it, and is
// counted by why.
func TestPassedThroughUncompacted(t *testing.T) {
	for _, tc := range []struct {
		name, body, result string
		err                error
		maxBody            int64
	}{
		{"compaction fails", twoMessages, "failed_open", errors.New("compaction API down"), 0},
		{"not a chat request", `{"model":"m","messages":"nope"}`, "not_decoded", nil, 0},
		{"too large", twoMessages, "too_large", nil, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stub := &stubCompactor{err: tc.err}
			srv, m := newTestProxy(t, echo(t), stub, tc.maxBody)
			code, got := post(t, srv.URL+"/v1/chat/completions", tc.body)
			if code != http.StatusOK || got != tc.body {
				t.Errorf("upstream got %d %q, want the agent's body %q", code, got, tc.body)
			}
			if n := value(m.Requests.WithLabelValues("openai", tc.result)); n != 1 {
				t.Errorf("%v requests counted %s, want 1", n, tc.result)
			}
		})
	}
}

// A compacted request carries the view and a prompt cache key only when asked to.
func TestCompactedRequest(t *testing.T) {
	srv, m := newTestProxy(t, echo(t), &stubCompactor{}, 0)
	_, got := post(t, srv.URL+"/v1/chat/completions", twoMessages)
	if strings.Contains(got, "first") || !strings.Contains(got, "second") || strings.Contains(got, "prompt_cache_key") {
		t.Errorf("upstream got %s, want only the view's message and no prompt_cache_key", got)
	}
	if n := value(m.Requests.WithLabelValues("openai", "compacted")); n != 1 {
		t.Errorf("%v requests counted compacted", n)
	}
}

// A request whose history the compaction leaves as it is goes upstream as the agent sent it,
// byte for byte, unless the proxy adds to it: a prompt cache key, when asked to and the
// agent set none.
func TestUnchangedRequest(t *testing.T) {
	const keyed = `{"model":"m", "prompt_cache_key":"mine", "messages":[{"role":"user","content":"first"}]}`
	for _, tc := range []struct {
		name, body string
		cacheKey   bool
		want       func(got string) bool
	}{
		{"as sent", twoMessages, false, func(got string) bool { return got == twoMessages }},
		{"the agent's key", keyed, true, func(got string) bool { return got == keyed }},
		{"a key added", twoMessages, true, func(got string) bool {
			return strings.Contains(got, `"prompt_cache_key":"compaction-`) && strings.Contains(got, `"content":"first"`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Config{Upstream: echo(t), Compactor: &convCompactor{}, PromptCacheKey: tc.cacheKey, Log: logr.Discard()})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			if code, got := post(t, srv.URL+"/v1/chat/completions", tc.body); code != http.StatusOK || !tc.want(got) {
				t.Errorf("upstream got %d %s", code, got)
			}
		})
	}
}

// An upstream that cannot be reached is a 502 for the agent, counted.
func TestUpstreamUnreachable(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(dead.URL + "/v1")
	dead.Close()
	srv, m := newTestProxy(t, u, &stubCompactor{}, 0)
	if code, _ := post(t, srv.URL+"/v1/embeddings", `{}`); code != http.StatusBadGateway {
		t.Errorf("status %d, want 502", code)
	}
	if n := value(m.UpstreamErrors); n != 1 {
		t.Errorf("%v upstream errors counted, want 1", n)
	}
}

// An API the injected sidecar has no upstream for (the injection's reserved .invalid name)
// is answered at once with what the pod must set: nothing is compacted or sent anywhere,
// while the APIs the pod names keep working.
func TestUnsetUpstream(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	stub := &stubCompactor{}
	unnamed, _ := url.Parse("https://compaction.harness9.io-anthropic-upstream-not-set.invalid/v1")
	p, err := New(Config{Upstream: echo(t), AnthropicUpstream: unnamed, Compactor: stub, Metrics: m, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	code, got := post(t, srv.URL+"/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if code != http.StatusBadGateway || !strings.Contains(got, "compaction.harness9.io/anthropic-upstream") || !strings.Contains(got, "ANTHROPIC_BASE_URL") {
		t.Errorf("got %d %q, want 502 naming the annotation and ANTHROPIC_BASE_URL", code, got)
	}
	if stub.calls != 0 {
		t.Errorf("%d compactions for a request with no upstream, want 0", stub.calls)
	}
	if n := value(m.UpstreamErrors); n != 1 {
		t.Errorf("%v upstream errors counted, want 1", n)
	}
	if code, got := post(t, srv.URL+"/v1/chat/completions", twoMessages); code != http.StatusOK || !strings.Contains(got, "second") {
		t.Errorf("the named OpenAI upstream: %d %q", code, got)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	good, _ := url.Parse("https://api.example.com/v1")
	ftp, _ := url.Parse("ftp://x")
	for _, cfg := range []Config{
		{Compactor: &stubCompactor{}},
		{Upstream: ftp, Compactor: &stubCompactor{}},
		{Upstream: good, AnthropicUpstream: ftp, Compactor: &stubCompactor{}},
		{Upstream: good},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func value(c prometheus.Counter) float64 {
	var d dto.Metric
	_ = c.Write(&d)
	return d.GetCounter().GetValue()
}
