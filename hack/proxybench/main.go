// Command proxybench measures what compaction-proxy adds to an agent's requests. An agent
// loop (system prompt, task, then a tool call and its result per turn, a 16 KB result every
// fifth turn, a new conversation every -turns turns) sends the same OpenAI Chat Completions
// requests straight to an in-process model endpoint that answers at once, and through the
// proxy in front of it; the two alternate, request by request. It reports p50/p99 of the
// request latency of each, of the time to the first byte of a streamed answer, and the
// proxy's memory over the loop.
//
// Two setups:
//
//   - api (default): the compaction-proxy binary, in its own process, compacting through the
//     real manager of the local environment (internal/dev/devenv: kube-apiserver, etcd,
//     MinIO): the latency includes the compaction API round trip, the engine and the
//     OffloadHook. The proxy's RSS (/proc) and heap in use (its /metrics) are sampled.
//
//   - stub: the proxy in process with a compactor that returns the history as it is: the
//     proxy's own cost (decoding, re-encoding, forwarding, reading the usage).
//
// Run from the repository root:
//
//	go run ./hack/proxybench -requests 400
//	go run ./hack/proxybench -setup stub -requests 2000
//	go run ./hack/proxybench -requests 4000 -sample 500   # memory over a long loop
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/devenv"
	"github.com/harness9/compaction-operator/internal/dev/proc"
	"github.com/harness9/compaction-operator/internal/proxy"
)

const ns = "default"

// message is a message of the agent's history.
type message struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCalls  []any  `json:"tool_calls,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

func main() {
	setup := flag.String("setup", "api", "api: the proxy binary on the real manager; stub: the proxy in process with a pass-through compactor")
	requests := flag.Int("requests", 400, "requests sent each way (direct and proxied), half of them streamed")
	turns := flag.Int("turns", 40, "turns of a conversation before the agent starts a new one")
	window := flag.Int("window", 16000, "the policy's context window (api setup)")
	sample := flag.Int("sample", 0, "sample the proxy's memory every this many requests (0: requests/8)")
	managerBin := flag.String("manager", "", "the manager binary (default: built with hack/build-static.sh)")
	proxyBin := flag.String("proxy", "", "the compaction-proxy binary (default: built with hack/build-static.sh)")
	flag.Parse()
	if *sample <= 0 {
		*sample = max(1, *requests/8)
	}
	if err := run(*setup, *requests, *turns, int32(*window), *sample, *managerBin, *proxyBin); err != nil { //nolint:gosec // flag value
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(1)
	}
}

func run(setup string, requests, turns int, window int32, sample int, managerBin, proxyBin string) error {
	ctx := context.Background()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "proxybench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	up := &http.Server{Handler: http.HandlerFunc(model), ReadHeaderTimeout: 10 * time.Second}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = up.Serve(upLn) }()
	defer func() { _ = up.Close() }()
	upstream := "http://" + upLn.Addr().String() + "/v1"

	var proxyURL string
	var mem func() (rss, heap int64)
	var counts func() string // the proxy's own counts of what it did, for the api setup
	switch setup {
	case "stub":
		u, _ := url.Parse(upstream)
		p, err := proxy.New(proxy.Config{Upstream: u, Compactor: passThrough{}, PromptCacheKey: true, Log: logr.Discard()})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		proxyURL = "http://" + ln.Addr().String()
		mem = func() (int64, int64) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return rssOf(os.Getpid()), int64(ms.HeapInuse) //nolint:gosec // fits
		}
	case "api":
		if managerBin == "" {
			if managerBin, err = build(root, dir, "./cmd/manager"); err != nil {
				return err
			}
		}
		if proxyBin == "" {
			if proxyBin, err = build(root, dir, "./cmd/compaction-proxy"); err != nil {
				return err
			}
		}
		env, err := devenv.Start(ctx, devenv.Options{Root: root, Dir: dir, ManagerBin: managerBin})
		if err != nil {
			return err
		}
		defer env.Stop()
		if err := createSession(ctx, env, window); err != nil {
			return err
		}
		ports, err := proc.FreeLoopbackPorts(2)
		if err != nil {
			return err
		}
		cmd := exec.Command(proxyBin, "--server", env.APIURL, "--session", ns+"/bench", "--token-file", env.AgentTokenFile,
			"--ca-file", env.CAFile, "--upstream", upstream, "--listen", ports[0], "--metrics-listen", ports[1])
		logFile, err := os.Create(filepath.Join(dir, "proxy.log"))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		proxyURL = "http://" + ports[0]
		if err := waitFor(proxyURL + "/compaction/v1/toolresults/x?conversation=x"); err != nil {
			return err
		}
		metricsURL := "http://" + ports[1] + "/metrics"
		pid := cmd.Process.Pid
		mem = func() (int64, int64) { return rssOf(pid), gauge(metricsURL, "go_memstats_heap_inuse_bytes") }
		counts = func() string {
			var b strings.Builder
			for _, series := range []string{
				`compaction_proxy_requests_total{protocol="openai",result="compacted"}`,
				`compaction_proxy_requests_total{protocol="openai",result="failed_open"}`,
				`compaction_proxy_offload_hook_total{result="offloaded"}`,
				`compaction_proxy_offload_hook_total{result="kept"}`,
				`compaction_proxy_offload_hook_total{result="failed_open"}`,
			} {
				fmt.Fprintf(&b, "  %s %d\n", series, gauge(metricsURL, series))
			}
			return b.String()
		}
	default:
		return fmt.Errorf("-setup %q: want api or stub", setup)
	}

	fmt.Printf("setup %s, %d requests each way, %d turns per conversation, GOMAXPROCS %d, %d CPUs\n",
		setup, requests, turns, runtime.GOMAXPROCS(0), runtime.NumCPU())
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}
	var direct, proxied, directTTFB, proxiedTTFB []time.Duration
	rss0, heap0 := mem()
	peakRSS, peakHeap := rss0, heap0
	fmt.Printf("proxy memory at start: RSS %.1f MiB, heap in use %.1f MiB\n", mib(rss0), mib(heap0))
	a := &agent{turns: turns}
	var sent int64
	for i := range requests {
		streamed := i%2 == 1
		body := a.next(streamed)
		sent += int64(len(body))
		// Alternate which goes first, so neither always finds the caches warm.
		order := []string{upstream, proxyURL + "/v1"}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, base := range order {
			total, ttfb, answer, err := send(ctx, hc, base, body)
			if err != nil {
				return fmt.Errorf("request %d to %s: %w", i, base, err)
			}
			isProxy := base != upstream
			switch {
			case isProxy && streamed:
				proxiedTTFB = append(proxiedTTFB, ttfb)
			case isProxy:
				proxied = append(proxied, total)
			case streamed:
				directTTFB = append(directTTFB, ttfb)
			default:
				direct = append(direct, total)
			}
			if isProxy {
				a.answered(answer)
			}
		}
		if (i+1)%sample == 0 {
			rss, heap := mem()
			peakRSS, peakHeap = max(peakRSS, rss), max(peakHeap, heap)
			fmt.Printf("  after %5d requests (%d conversations): proxy RSS %.1f MiB, heap in use %.1f MiB\n", i+1, a.conversations, mib(rss), mib(heap))
		}
	}
	rss1, heap1 := mem()
	peakRSS, peakHeap = max(peakRSS, rss1), max(peakHeap, heap1)
	fmt.Printf("requests of %.1f KB on average (the agent's history, uncompacted)\n", float64(sent)/float64(requests)/1024)
	fmt.Printf("request latency, complete answers (%d each):\n", len(direct))
	report("direct", direct)
	report("proxied", proxied)
	fmt.Printf("  added: p50 %s, p99 %s\n", (pct(proxied, 50) - pct(direct, 50)).Round(time.Microsecond), (pct(proxied, 99) - pct(direct, 99)).Round(time.Microsecond))
	fmt.Printf("time to first byte, streamed answers (%d each):\n", len(directTTFB))
	report("direct", directTTFB)
	report("proxied", proxiedTTFB)
	fmt.Printf("  added: p50 %s, p99 %s\n", (pct(proxiedTTFB, 50) - pct(directTTFB, 50)).Round(time.Microsecond), (pct(proxiedTTFB, 99) - pct(directTTFB, 99)).Round(time.Microsecond))
	fmt.Printf("proxy memory: start RSS %.1f MiB / heap %.1f MiB, end %.1f / %.1f MiB, peak %.1f / %.1f MiB\n",
		mib(rss0), mib(heap0), mib(rss1), mib(heap1), mib(peakRSS), mib(peakHeap))
	if counts != nil {
		fmt.Print("the proxy's counts:\n", counts())
	}
	return nil
}

// passThrough is a compactor that returns the history as it is.
type passThrough struct{}

func (passThrough) Compact(_ context.Context, _ string, history []compaction.Message, _ int) ([]compaction.Message, error) {
	return history, nil
}

// agent builds the requests of an agent loop: a tool call and its result per turn.
type agent struct {
	turns         int
	conversations int
	turn          int
	msgs          []message
}

func (a *agent) next(streamed bool) []byte {
	if a.msgs == nil || a.turn >= a.turns {
		a.conversations++
		a.turn = 0
		a.msgs = []message{
			{Role: "system", Content: "You are a coding agent. Fix the failing tests."},
			{Role: "user", Content: fmt.Sprintf("Fix the failing tests of module %d", a.conversations)},
		}
	}
	a.turn++
	req := map[string]any{"model": "gpt-bench", "messages": a.msgs}
	if streamed {
		req["stream"] = true
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	body, _ := json.Marshal(req)
	return body
}

// answered appends the tool call of the answer and its result.
func (a *agent) answered(_ []byte) {
	id := fmt.Sprintf("call_%d_%d", a.conversations, a.turn)
	a.msgs = append(a.msgs,
		message{Role: "assistant", ToolCalls: []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": "run", "arguments": fmt.Sprintf(`{"cmd":"pytest -k case%d"}`, a.turn)}}}},
		message{Role: "tool", ToolCallID: id, Content: toolOutput(a.conversations, a.turn)})
}

// toolOutput is one or two KB of test log, 16 KB every fifth turn (over the hook threshold).
func toolOutput(conv, turn int) string {
	var b strings.Builder
	lines := 30 + (turn%3)*20
	if turn%5 == 0 {
		lines = 330
	}
	for j := range lines {
		fmt.Fprintf(&b, "tests/m%d/test_case%d.py::test_%d PASSED [%d%%]\n", conv, turn, j, 100*j/lines)
	}
	fmt.Fprintf(&b, "==== %d passed, 1 failed: test_edge%d AssertionError: expected 4, got 5 ====\n", lines-1, turn)
	return b.String()
}

// model is the model endpoint: it answers every request at once with a tool call, as JSON or
// as a stream of a few events, with a usage of a token per 4 bytes of request.
func model(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	prompt := len(body) / 4
	call := `{"id":"call_x","type":"function","function":{"name":"run","arguments":"{\"cmd\":\"pytest\"}"}}`
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-bench","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[%s]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":%d,"completion_tokens":12,"total_tokens":%d}}`, call, prompt, prompt+12)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	chunk := func(s string) {
		_, _ = fmt.Fprintf(w, "data: %s\n\n", s)
		f.Flush()
	}
	chunk(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-bench","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
	chunk(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-bench","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"run","arguments":"{\"cmd\":\"pytest\"}"}}]},"finish_reason":null}]}`)
	chunk(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-bench","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
	chunk(fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-bench","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":12,"total_tokens":%d}}`, prompt, prompt+12))
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// send posts body to base's chat completions and reads the answer to its end: the total time
// and the time to the answer's first byte.
func send(ctx context.Context, hc *http.Client, base string, body []byte) (time.Duration, time.Duration, []byte, error) {
	var first time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, base+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	total := time.Since(start)
	if err != nil {
		return 0, 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, nil, fmt.Errorf("%s: %.200s", resp.Status, answer)
	}
	return total, first.Sub(start), answer, nil
}

func createSession(ctx context.Context, env *devenv.Env, window int32) error {
	c, err := devenv.Client(env.Config)
	if err != nil {
		return err
	}
	if err := env.CreateMinIOPolicy(ctx, c, ns, "bench", window); err != nil {
		return err
	}
	if err := c.Create(ctx, builder.Session(ns, "bench", "bench").Build()); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var s compactionv1alpha1.AgentSession
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bench"}, &s); err == nil && meta.IsStatusConditionTrue(s.Status.Conditions, compactionv1alpha1.ConditionReady) {
			return nil
		}
	}
	return fmt.Errorf("session bench not Ready after a minute")
}

// build builds pkg with hack/build-static.sh, as the image does.
func build(root, dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command(filepath.Join(root, "hack", "build-static.sh"), out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// waitFor waits for u to answer at all.
func waitFor(u string) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(u); err == nil {
			_ = resp.Body.Close()
			return nil
		}
	}
	return fmt.Errorf("%s does not answer", u)
}

// rssOf is the resident set size of process pid, in bytes (0 when unknown).
func rssOf(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// gauge reads an unlabelled gauge from a Prometheus text endpoint (0 when missing).
func gauge(u, name string) int64 {
	resp, err := http.Get(u)
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return int64(v)
		}
	}
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}

func report(name string, ds []time.Duration) {
	fmt.Printf("  %-8s p50 %9s  p99 %9s\n", name, pct(ds, 50).Round(time.Microsecond), pct(ds, 99).Round(time.Microsecond))
}
