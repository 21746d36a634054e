// Package proxy is compaction-proxy: an HTTP server an agent talks to instead of its model
// endpoint (the upstream). Chat requests (OpenAI POST /v1/chat/completions, Anthropic POST
// /v1/messages) have their messages replaced by the compacted view the operator's compaction
// API returns, then go upstream with the agent's own headers; the answer comes back byte for
// byte while the proxy reads its token usage for the next turn. Every other request is passed
// through untouched. When compaction fails the original request goes upstream (fail-open).
//
// Before compacting, tool results new in a conversation and over the policy's hook threshold
// go through the operator's OffloadHook (toolresults route), so the compaction and the
// upstream see their placeholder from the first request that carries them. The placeholders
// the upstream sees end with a command that reads the result back from the proxy's own
// listener (GET /compaction/v1/toolresults/{tool_call_id}?conversation=...), so a model whose
// agent can run a shell or fetch a URL reads it without code of the agent's.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/harness9/compaction-operator/compaction"
)

// Compactor compacts one conversation's history into the view to send upstream.
// promptTokens is what the upstream reported for the conversation's last request (0: none).
type Compactor interface {
	Compact(ctx context.Context, conversation string, history []compaction.Message, promptTokens int) ([]compaction.Message, error)
}

// Config configures a Proxy.
type Config struct {
	// Upstream is the OpenAI-compatible base URL the agent would have used, such as
	// https://api.openai.com/v1: a request for /v1/chat/completions goes to
	// Upstream + /chat/completions.
	Upstream *url.URL
	// AnthropicUpstream is the Anthropic base URL (https://api.anthropic.com/v1 style); nil:
	// Upstream.
	AnthropicUpstream *url.URL
	// Compactor compacts the histories.
	Compactor Compactor
	// PromptCacheKey sets OpenAI's prompt_cache_key to the conversation when the agent did
	// not set one, so the provider's prompt cache follows the conversation.
	PromptCacheKey bool
	// MaxBodyBytes bounds a chat request's body; a larger one is passed through uncompacted.
	MaxBodyBytes int64
	// CompactTimeout bounds one compaction, with the OffloadHook calls before it; past it
	// the request goes upstream uncompacted.
	CompactTimeout time.Duration
	// Client sends the requests upstream; nil: a client without timeout (answers stream
	// as long as they take), proxying nothing from the environment.
	Client *http.Client
	// ReadBackURL is the proxy's own base URL as the agent reaches it, such as
	// http://127.0.0.1:4141: the placeholders the upstream sees end with the command that
	// reads their result back from it (ReadBackPath). Empty: placeholders are forwarded as
	// the engine wrote them.
	ReadBackURL string
	// DisableOffloadHook keeps new tool results away from the OffloadHook: large ones are
	// then offloaded only by compaction, from the Warn tier on.
	DisableOffloadHook bool
	// Metrics are updated when set.
	Metrics *Metrics
	Log     logr.Logger
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes   = 32 << 20
	DefaultCompactTimeout = 10 * time.Second
)

// Proxy is the handler. It is safe for concurrent use.
type Proxy struct {
	cfg    Config
	client *http.Client
	usage  *usageBook
	hooks  *hookBook

	// failing is set while compactions fail, so an outage is logged once, and its end too.
	mu      sync.Mutex
	failing bool
}

// New checks cfg and builds the proxy.
func New(cfg Config) (*Proxy, error) {
	if cfg.Upstream == nil || (cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https") || cfg.Upstream.Host == "" {
		return nil, errors.New("proxy: the upstream must be an http(s) URL")
	}
	if cfg.AnthropicUpstream == nil {
		cfg.AnthropicUpstream = cfg.Upstream
	}
	if cfg.AnthropicUpstream.Scheme != "http" && cfg.AnthropicUpstream.Scheme != "https" || cfg.AnthropicUpstream.Host == "" {
		return nil, errors.New("proxy: the Anthropic upstream must be an http(s) URL")
	}
	if cfg.Compactor == nil {
		return nil, errors.New("proxy: no compactor")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.CompactTimeout <= 0 {
		cfg.CompactTimeout = DefaultCompactTimeout
	}
	c := cfg.Client
	if c == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		c = &http.Client{Transport: tr}
	}
	cfg.ReadBackURL = strings.TrimRight(cfg.ReadBackURL, "/")
	return &Proxy{cfg: cfg, client: c, usage: newUsageBook(), hooks: newHookBook()}, nil
}

// ServeHTTP compacts chat requests and passes everything else through.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, ReadBackPath):
		p.readBack(w, r)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/chat/completions"):
		p.chat(w, r, openAIProtocol{cacheKey: p.cfg.PromptCacheKey})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages") && !strings.HasSuffix(r.URL.Path, "/count_tokens"):
		p.chat(w, r, anthropicProtocol{})
	default:
		p.forward(w, r, p.upstreamFor(r), r.Body, r.ContentLength, nil)
	}
}

// upstreamFor is the upstream of r: Anthropic's for its paths (or when the request carries
// Anthropic's version header), the OpenAI one otherwise.
func (p *Proxy) upstreamFor(r *http.Request) *url.URL {
	if r.Header.Get("anthropic-version") != "" || strings.HasSuffix(r.URL.Path, "/messages") || strings.Contains(r.URL.Path, "/messages/") {
		return p.cfg.AnthropicUpstream
	}
	return p.cfg.Upstream
}

// protocol is what differs between the chat APIs.
type protocol interface {
	name() string
	// decode reads the history out of a request body; rewrite puts view in its place.
	decode(body []byte) (request, error)
	// usage reads the prompt tokens from a complete answer or the events of a stream.
	usageReader(streamed bool) usageReader
}

// request is a decoded chat request.
type request interface {
	history() []compaction.Message
	// conversation names the conversation the request continues.
	conversation() string
	streamed() bool
	// rewrite returns the body with view instead of the history.
	rewrite(view []compaction.Message) ([]byte, error)
}

// chat compacts a chat request's history, forwards it and tees the answer's usage.
func (p *Proxy) chat(w http.ResponseWriter, r *http.Request, proto protocol) {
	body, err := io.ReadAll(io.LimitReader(r.Body, p.cfg.MaxBodyBytes+1))
	if err != nil {
		http.Error(w, fmt.Sprintf("compaction-proxy: read request: %v", err), http.StatusBadRequest)
		return
	}
	target := p.upstreamFor(r)
	if _, isOpenAI := proto.(openAIProtocol); isOpenAI {
		target = p.cfg.Upstream
	}
	if int64(len(body)) > p.cfg.MaxBodyBytes {
		// Too large to decode here: the rest of it is still in r.Body.
		p.cfg.Metrics.request(proto.name(), "too_large")
		p.forward(w, r, target, io.MultiReader(bytes.NewReader(body), r.Body), r.ContentLength, nil)
		return
	}
	req, err := proto.decode(body)
	if err != nil {
		// Not a request the proxy understands: the upstream answers it as it would have.
		p.cfg.Metrics.request(proto.name(), "not_decoded")
		p.cfg.Log.V(1).Info("request passed through uncompacted", "protocol", proto.name(), "reason", err.Error())
		p.forward(w, r, target, bytes.NewReader(body), int64(len(body)), nil)
		return
	}
	conv := req.conversation()
	out := body
	history := req.history()
	// One deadline for the hook calls and the compaction: an API that hangs delays the
	// request by CompactTimeout at most, then it goes upstream as it is.
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.CompactTimeout)
	entered, hooked := p.offloadNew(ctx, conv, history)
	view, err := p.cfg.Compactor.Compact(ctx, conv, entered, p.usage.prompt(conv))
	cancel()
	if err == nil {
		out, err = req.rewrite(p.withReadBack(conv, view))
	}
	if err != nil {
		p.failed(proto.name(), err)
		out = body
		if hooked {
			// The results the hook offloaded stay placeholders, as on the other turns.
			if b, rerr := req.rewrite(p.withReadBack(conv, entered)); rerr == nil {
				out = b
			}
		}
	} else {
		p.recovered()
		p.cfg.Metrics.request(proto.name(), "compacted")
	}
	tee := proto.usageReader(req.streamed())
	p.forward(w, r, target, bytes.NewReader(out), int64(len(out)), tee)
	if n, ok := tee.promptTokens(); ok {
		p.usage.set(conv, n)
	}
}

// failed counts a compaction that failed and logs the start of an outage.
func (p *Proxy) failed(proto string, err error) {
	p.cfg.Metrics.request(proto, "failed_open")
	p.mu.Lock()
	first := !p.failing
	p.failing = true
	p.mu.Unlock()
	if first {
		p.cfg.Log.Error(err, "compaction failed; requests go upstream uncompacted until it works again")
	}
}

// recovered logs the end of an outage.
func (p *Proxy) recovered() {
	p.mu.Lock()
	was := p.failing
	p.failing = false
	p.mu.Unlock()
	if was {
		p.cfg.Log.Info("compaction works again")
	}
}

// hopHeaders are connection-level headers a proxy does not forward (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward sends r, with body instead of its own, to target and copies the answer back as it
// arrives, flushing each read so streamed events are not held. tee, when set, reads the
// answer's body too.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, target *url.URL, body io.Reader, length int64, tee usageReader) {
	u := *target
	u.Path = joinPath(target.Path, strings.TrimPrefix(r.URL.Path, "/v1"))
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), body)
	if err != nil {
		http.Error(w, fmt.Sprintf("compaction-proxy: %v", err), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	// The answer is read for its usage: ask for it uncompressed (the transport still takes
	// gzip and decompresses it, so the bytes the agent gets are the answer's content).
	out.Header.Del("Accept-Encoding")
	out.ContentLength = length
	if length < 0 || r.Body == nil {
		out.ContentLength = -1
	}
	resp, err := p.client.Do(out)
	if err != nil {
		p.cfg.Metrics.upstreamError()
		http.Error(w, fmt.Sprintf("compaction-proxy: upstream %s: %v", target.Host, err), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	var dst io.Writer = w
	if tee != nil && resp.StatusCode/100 == 2 {
		dst = io.MultiWriter(w, tee)
	}
	flusher := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return // the agent went away
			}
			_ = flusher.Flush()
		}
		if rerr != nil {
			return
		}
	}
}

// joinPath joins a base path and a request path with one slash.
func joinPath(base, rest string) string {
	if rest == "" {
		return base
	}
	return strings.TrimRight(base, "/") + "/" + strings.TrimLeft(rest, "/")
}
