// Command compaction-proxy is the agent's model endpoint: it compacts the messages of each
// chat request through the operator's compaction API and forwards the request to the real
// endpoint. See internal/proxy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/proxy"
)

const usage = `compaction-proxy: the model endpoint of an agent, compacting its context on the way.

The agent talks to the proxy instead of its model endpoint: point OPENAI_BASE_URL at
http://LISTEN/v1, ANTHROPIC_BASE_URL and GOOGLE_GEMINI_BASE_URL at http://LISTEN (docs/agents/
has the settings of Claude Code, Codex, Gemini CLI and the OpenAI Agents SDK). For each
conversation request the proxy sends the history to the operator's compaction API (the
AgentSession --session), replaces it with the compacted view and forwards the request, with
the agent's own headers (its API key passes through, never stored), to the upstream:
  OpenAI     POST /v1/chat/completions, POST /v1/responses        (--upstream)
  Anthropic  POST /v1/messages, /v1/messages/count_tokens         (--anthropic-upstream)
  Gemini     POST /v1beta/models/M:generateContent, :streamGenerateContent,
             :countTokens (also under /v1/models/)                (--gemini-upstream)
streamed or not. The answer comes back byte for byte; its token usage calibrates the next
compaction. Other requests pass through untouched to their provider's upstream (everything
under /v1/messages, /api/ or with an anthropic-version header to Anthropic's; /v1beta/,
/v1alpha/, /upload/ or an x-goog-api-key header to Gemini's; the rest to OpenAI's). A
WebSocket upgrade is answered 426, so the client uses HTTP. Each conversation (told apart
by its system prompt and first user message) is compacted on its own.

A conversation request that is not compacted goes upstream as the agent sent it, and the
proxy says why: the metric compaction_proxy_requests_total{result=REASON}, a log line the
first time per conversation and reason, and the AgentSession's PassThrough condition
(kubectl get agentsession shows it). The reasons: the body is not the protocol's request
(NotDecodable), it continues history the provider keeps (StatefulRequest:
previous_response_id, conversation), it is over --max-body-bytes (TooLarge), it is a POST
for generation the proxy has no protocol for (UnsupportedRequest), or the compaction API
failed or took longer than --compact-timeout (CompactionFailed, fail-open).

Tool results new in a request and larger than the policy's offload.hookThresholdChars go
through the operator's OffloadHook first (--offload-hook): the upstream sees their
placeholder from the first request on. Each placeholder the upstream sees ends with a
command that reads the full result back from the proxy itself:
  curl -s 'http://LISTEN/compaction/v1/toolresults/TOOL_CALL_ID?conversation=CONVERSATION'
(--read-back-url sets the base URL in it), so a model whose agent can run a shell or fetch a
URL reads it without code of the agent's. A result read back starts with a marker line and
is never offloaded again.

Usage:
  compaction-proxy --server URL --session NAMESPACE/NAME [flags]

Flags:
`

type options struct {
	listen, upstream, anthropicUpstream string
	geminiUpstream                      string
	server, session, tokenFile, caFile  string
	metricsListen                       string
	promptCacheKey, offloadHook         bool
	plainHTTP                           bool
	readBackURL                         string
	compactTimeout                      time.Duration
	maxBodyBytes                        int64
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("compaction-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:4141", "address to serve the agent on (keep it on loopback: the proxy forwards the agent's API key)")
	fs.StringVar(&o.upstream, "upstream", envOr("COMPACTION_PROXY_UPSTREAM", "https://api.openai.com/v1"),
		"the OpenAI-compatible base URL the agent would have used ($COMPACTION_PROXY_UPSTREAM)")
	fs.StringVar(&o.anthropicUpstream, "anthropic-upstream", envOr("COMPACTION_PROXY_ANTHROPIC_UPSTREAM", "https://api.anthropic.com/v1"),
		"the Anthropic base URL, with its /v1 ($COMPACTION_PROXY_ANTHROPIC_UPSTREAM)")
	fs.StringVar(&o.geminiUpstream, "gemini-upstream", envOr("COMPACTION_PROXY_GEMINI_UPSTREAM", proxy.DefaultGeminiUpstream),
		"the Gemini API base URL, without version ($COMPACTION_PROXY_GEMINI_UPSTREAM)")
	fs.StringVar(&o.server, "server", os.Getenv("COMPACTION_SERVER"), "the operator's compaction API base URL ($COMPACTION_SERVER), e.g. https://compaction-operator-api.compaction-system.svc:8082")
	fs.StringVar(&o.session, "session", os.Getenv("COMPACTION_SESSION"), "the AgentSession as NAMESPACE/NAME ($COMPACTION_SESSION)")
	fs.StringVar(&o.tokenFile, "token-file", envOr("COMPACTION_TOKEN_FILE", ""),
		"file holding the bearer token for the compaction API, read on every request (a projected ServiceAccount token with audience "+compactclient.DefaultTokenAudience+"; $COMPACTION_TOKEN_FILE)")
	fs.StringVar(&o.caFile, "ca-file", os.Getenv("COMPACTION_CA_FILE"), "CA bundle to verify the compaction API with (key ca.crt of ConfigMap compaction-operator-api-ca; $COMPACTION_CA_FILE)")
	fs.BoolVar(&o.plainHTTP, "plain-http", false, "allow an http:// --server off the loopback (the token and the conversations then cross the network in clear text: only inside a mesh that encrypts)")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "address to serve Prometheus metrics on at /metrics (empty: none)")
	fs.BoolVar(&o.promptCacheKey, "prompt-cache-key", true, "set OpenAI's prompt_cache_key to the conversation when the agent sets none")
	fs.BoolVar(&o.offloadHook, "offload-hook", true, "send new tool results over the policy's hook threshold to the operator's OffloadHook before compacting\n(false: large results are offloaded only by compaction, from the Warn tier on)")
	fs.StringVar(&o.readBackURL, "read-back-url", "", "base URL of the proxy as the agent reaches it, written into the read-back command of each placeholder\n(empty: http://LISTEN, with 127.0.0.1 for an unspecified address)")
	fs.DurationVar(&o.compactTimeout, "compact-timeout", proxy.DefaultCompactTimeout, "longest wait for a compaction, the offload-hook calls before it included; past it the request goes upstream uncompacted")
	fs.Int64Var(&o.maxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest chat request compacted; a larger one goes upstream uncompacted")
	fs.Usage = func() {
		_, _ = fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.server == "" || o.session == "" {
		return nil, errors.New("--server and --session are required")
	}
	return o, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compaction-proxy:", err)
		os.Exit(2)
	}
	log := zap.New(zap.UseDevMode(false))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log, nil); err != nil {
		log.Error(err, "compaction-proxy stopped")
		os.Exit(1)
	}
}

// run serves until ctx ends; ready, when set, gets the bound address.
func run(ctx context.Context, o *options, log logr.Logger, ready chan<- string) error {
	ns, name, ok := strings.Cut(o.session, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--session %q: want NAMESPACE/NAME", o.session)
	}
	upstream, err := url.Parse(o.upstream)
	if err != nil {
		return fmt.Errorf("--upstream: %w", err)
	}
	anthropicUpstream, err := url.Parse(o.anthropicUpstream)
	if err != nil {
		return fmt.Errorf("--anthropic-upstream: %w", err)
	}
	geminiUpstream, err := url.Parse(o.geminiUpstream)
	if err != nil {
		return fmt.Errorf("--gemini-upstream: %w", err)
	}
	var copts []compactclient.Option
	if o.tokenFile != "" {
		copts = append(copts, compactclient.WithTokenFile(o.tokenFile))
	}
	if o.caFile != "" {
		copts = append(copts, compactclient.WithCAFile(o.caFile))
	}
	if o.plainHTTP {
		copts = append(copts, compactclient.WithPlainHTTP())
	}
	api, err := compactclient.New(o.server, copts...)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := proxy.NewMetrics(reg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	readBack := o.readBackURL
	if readBack == "" {
		readBack = localURL(ln.Addr())
	}
	p, err := proxy.New(proxy.Config{
		Upstream: upstream, AnthropicUpstream: anthropicUpstream, GeminiUpstream: geminiUpstream,
		Compactor:      proxy.NewAPICompactor(api, ns, name),
		PromptCacheKey: o.promptCacheKey, CompactTimeout: o.compactTimeout, MaxBodyBytes: o.maxBodyBytes,
		ReadBackURL: readBack, DisableOffloadHook: !o.offloadHook,
		Metrics: metrics, Log: log,
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- srv.Serve(ln) }()
	var msrv *http.Server
	if o.metricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv = &http.Server{Addr: o.metricsListen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errs <- msrv.ListenAndServe() }()
	}
	log.Info("serving", "listen", ln.Addr().String(), "upstream", upstream.Redacted(), "anthropicUpstream", anthropicUpstream.Redacted(), "geminiUpstream", geminiUpstream.Redacted(), "session", o.session, "readBack", readBack)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		return err
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if msrv != nil {
		_ = msrv.Shutdown(shutdown)
	}
	return srv.Shutdown(shutdown)
}

// localURL is the base URL the agent reaches the listener at: its address, with the loopback
// address of its family when it listens on all of them.
func localURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}
