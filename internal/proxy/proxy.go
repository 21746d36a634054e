// Package proxy is compaction-proxy: an HTTP server an agent talks to instead of its model
// endpoint (the upstream). Conversation requests (OpenAI POST /v1/chat/completions and POST
// /v1/responses, Anthropic POST /v1/messages and its count_tokens, Gemini
// :generateContent, :streamGenerateContent and :countTokens) have their history replaced by
// the compacted view the operator's compaction API returns, then go upstream with the
// agent's own headers; the answer comes back byte for byte while the proxy reads its token
// usage for the next turn. Every other request is passed through untouched, to the upstream
// of its provider (route.go). A conversation request that is not compacted goes upstream as
// the agent sent it (fail-open), and the proxy says why (passthrough.go).
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
	lru "github.com/hashicorp/golang-lru/v2"

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
	// GeminiUpstream is the Gemini API's base URL, without version
	// (https://generativelanguage.googleapis.com): a request for
	// /v1beta/models/{model}:generateContent goes to GeminiUpstream + that path. Nil:
	// DefaultGeminiUpstream.
	GeminiUpstream *url.URL
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
	// DefaultGeminiUpstream is the public Gemini API (Generative Language).
	DefaultGeminiUpstream = "https://generativelanguage.googleapis.com"
)

// Proxy is the handler. It is safe for concurrent use.
type Proxy struct {
	cfg    Config
	client *http.Client
	usage  *usageBook
	hooks  *hookBook
	pass   *passThroughs
	// heldLogged holds the conversations whose held history was logged (noteHeld).
	heldLogged *lru.Cache[string, struct{}]

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
	if cfg.GeminiUpstream == nil {
		cfg.GeminiUpstream, _ = url.Parse(DefaultGeminiUpstream)
	}
	if cfg.GeminiUpstream.Scheme != "http" && cfg.GeminiUpstream.Scheme != "https" || cfg.GeminiUpstream.Host == "" {
		return nil, errors.New("proxy: the Gemini upstream must be an http(s) URL")
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
	held, _ := lru.New[string, struct{}](maxConversations) // errors only for a size below 1
	return &Proxy{cfg: cfg, client: c, usage: newUsageBook(), hooks: newHookBook(), pass: newPassThroughs(), heldLogged: held}, nil
}

// ServeHTTP compacts conversation requests and passes everything else through.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, ReadBackPath) {
		p.readBack(w, r)
		return
	}
	if r.URL.Path == HistoryPath || r.URL.Path == HistorySearchPath {
		p.history(w, r)
		return
	}
	s := surfaceOf(r)
	target := p.upstreamOf(s)
	if unset(target) {
		// The injected sidecar's stand-in for an API the pod names no upstream for: say so
		// rather than fail on a name that cannot resolve, and send nothing anywhere.
		p.cfg.Metrics.upstreamError()
		http.Error(w, fmt.Sprintf("compaction-proxy: no upstream is set for the %s API: the pod names none "+
			"(the annotation %s or a literal %s on the container); nothing was sent", s, s.annotation(), s.baseURLVariable()), http.StatusBadGateway)
		return
	}
	if isWebSocket(r) {
		// Codex asks for the Responses API over a WebSocket first: refused at once, it
		// falls back to HTTP, where the proxy compacts its requests.
		p.passThrough(s.String(), "", ReasonWebSocket, nil)
		w.Header().Set("Connection", "close")
		http.Error(w, "compaction-proxy: WebSocket is not supported; use HTTP", http.StatusUpgradeRequired)
		return
	}
	proto := p.protocolFor(r, s)
	if proto == nil {
		if r.Method == http.MethodPost && generationPath(r.URL.Path) {
			p.passThrough(s.String(), "", ReasonUnsupportedRequest, fmt.Errorf("POST %s", r.URL.Path))
		}
		p.forward(w, r, target, s, r.Body, r.ContentLength, nil)
		return
	}
	p.chat(w, r, s, proto)
}

// unset reports whether upstream is a reserved .invalid name (RFC 6761), which the proxy
// injection uses for an API the pod names no upstream for.
func unset(upstream *url.URL) bool {
	return upstream != nil && strings.HasSuffix(strings.TrimSuffix(upstream.Hostname(), "."), ".invalid")
}

// upstreamOf is the upstream base URL of surface s.
func (p *Proxy) upstreamOf(s surface) *url.URL {
	switch s {
	case surfaceAnthropic:
		return p.cfg.AnthropicUpstream
	case surfaceGemini:
		return p.cfg.GeminiUpstream
	}
	return p.cfg.Upstream
}

// generationPath reports whether a POST to path looks like a request for generation the
// proxy has no protocol for (a legacy completion, an API it does not know), as opposed to
// the requests that carry no conversation (embeddings, files, uploads, telemetry).
func generationPath(path string) bool {
	seg := lastSegment(path)
	switch {
	case seg == "completions", strings.HasSuffix(seg, "Content"), strings.HasSuffix(seg, ":predict"):
		return true
	}
	return false
}

// protocol is what differs between the conversation APIs.
type protocol interface {
	name() string
	// decode reads the history out of a request body. An error that wraps a
	// *passThroughError names why the request is passed through.
	decode(r *http.Request, body []byte) (request, error)
	// usageReader reads the prompt tokens from a complete answer or the events of a stream;
	// nil for a request whose answer reports none (a token count).
	usageReader(req request) usageReader
}

// request is a decoded conversation request.
type request interface {
	history() []compaction.Message
	// conversation names the conversation the request continues.
	conversation() string
	// rewrite returns the body with view instead of the history.
	rewrite(view []compaction.Message) ([]byte, error)
	// asSent reports whether rewrite, given the history itself, would only write the body
	// anew: nothing the proxy adds (an OpenAI prompt_cache_key), so it may go as it came.
	asSent() bool
}

// chat compacts a conversation request's history, forwards it and tees the answer's usage.
func (p *Proxy) chat(w http.ResponseWriter, r *http.Request, s surface, proto protocol) {
	target := p.upstreamOf(s)
	body, err := io.ReadAll(io.LimitReader(r.Body, p.cfg.MaxBodyBytes+1))
	if err != nil {
		http.Error(w, fmt.Sprintf("compaction-proxy: read request: %v", err), http.StatusBadRequest)
		return
	}
	if int64(len(body)) > p.cfg.MaxBodyBytes {
		// Too large to decode here: the rest of it is still in r.Body.
		p.passThrough(proto.name(), "", ReasonTooLarge, fmt.Errorf("a body over %d bytes (--max-body-bytes)", p.cfg.MaxBodyBytes))
		p.forward(w, r, target, s, io.MultiReader(bytes.NewReader(body), r.Body), r.ContentLength, nil)
		return
	}
	req, err := proto.decode(r, body)
	if err != nil {
		// Not a request the proxy can compact: the upstream answers it as it would have.
		p.passThrough(proto.name(), "", reasonOf(err), err)
		p.forward(w, r, target, s, bytes.NewReader(body), int64(len(body)), nil)
		return
	}
	conv := req.conversation()
	p.noteHeld(proto.name(), conv, req)
	out := body
	history, ids := uniqueToolCallIDs(req.history())
	// One deadline for the hook calls and the compaction: an API that hangs delays the
	// request by CompactTimeout at most, then it goes upstream as it is.
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.CompactTimeout)
	entered, hooked := p.offloadNew(ctx, conv, history)
	view, err := p.cfg.Compactor.Compact(ctx, conv, entered, p.usage.prompt(conv))
	cancel()
	if err == nil {
		view = ids.restore(p.withHistory(conv, p.withReadBack(conv, view)))
		if !req.asSent() || !compaction.EqualMessages(view, req.history()) {
			out, err = req.rewrite(view)
		} // else the view is the history: the body goes as the agent sent it, byte for byte
	}
	if err != nil {
		p.failed(proto.name(), conv, err)
		out = body
		if hooked {
			// The results the hook offloaded stay placeholders, as on the other turns.
			if b, rerr := req.rewrite(ids.restore(p.withReadBack(conv, entered))); rerr == nil {
				out = b
			}
		}
	} else {
		p.recovered()
		p.cfg.Metrics.request(proto.name(), "compacted")
	}
	tee := proto.usageReader(req)
	p.forward(w, r, target, s, bytes.NewReader(out), int64(len(out)), tee)
	if tee == nil {
		return
	}
	if n, ok := tee.promptTokens(); ok {
		p.usage.set(conv, n)
	}
}

// failed counts a compaction that failed and logs the start of an outage.
func (p *Proxy) failed(proto, conv string, err error) {
	p.passThrough(proto, conv, ReasonCompactionFailed, err)
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
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, target *url.URL, s surface, body io.Reader, length int64, tee usageReader) {
	u := *target
	u.Path = upstreamPath(target, s, r.URL.Path)
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
