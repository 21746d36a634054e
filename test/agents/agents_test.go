// Package agents drives real coding agents, installed from npm at pinned versions
// (test/agents/node/package-lock.json, installed by `make tools`), through compaction-proxy:
// Claude Code, Codex CLI, Gemini CLI, OpenCode, Qwen Code, and scripts of the OpenAI Agents
// SDK, LangChain.js and the Vercel AI SDK. Each runs headless against a scripted model of the test's own (model_test.go)
// that speaks the provider's protocol, streaming included, and asks the agent to run its own
// tools on files in a temporary workspace until the context crosses the session's Warn and
// Full thresholds; the manager binary on a real kube-apiserver and MinIO serves the
// compaction API.
//
//	go test -race -count=1 ./test/agents/ -run 'TestAgents/claude-code' -v
package agents

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/devenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/proxy"
)

// direct runs the agents against the scripted model without the proxy and the operator: a
// way to debug the harness, or an agent's new version, alone.
var direct = flag.Bool("direct", false, "run the agents against the scripted model directly, without compaction-proxy and the operator")

const ns = "default"

type suite struct {
	t    *testing.T
	root string
	env  *devenv.Env
	c    client.Client
	api  *compactclient.Client
	// metrics are each session's proxy metrics.
	mu      sync.Mutex
	metrics map[string]*proxy.Metrics
}

func setUp(t *testing.T) *suite {
	t.Helper()
	root := testenv.RepoRoot(t)
	if *direct {
		return &suite{t: t, root: root}
	}
	bin := testenv.BuildManager(t)
	ctx := context.Background()
	env, err := devenv.Start(ctx, devenv.Options{Root: root, Dir: t.TempDir(), ManagerBin: bin})
	testenv.Must(t, err)
	t.Cleanup(env.Stop)
	scheme := runtime.NewScheme()
	testenv.Must(t, clientgoscheme.AddToScheme(scheme))
	testenv.Must(t, compactionv1alpha1.AddToScheme(scheme))
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	testenv.Must(t, err)
	testenv.Must(t, c.Create(ctx, builder.MinIOSecret(ns, "minio", devenv.MinIOAccessKey, devenv.MinIOSecretKey)))
	// The sessions set their own windows (each agent's fixed part, its system prompt and
	// tools, differs): Warn at 55%, Soft at 65%, Full at 85% of it. A minimum saving of 5%:
	// the agents' fixed parts are large, so offloading a few results of 6 KB at Warn saves
	// less than the default 15% of the view, and Warn would defer it (and not count).
	testenv.Must(t, c.Create(ctx, builder.Policy(ns, "agents").Window(64000).
		Storage(builder.MinIOStorage(env.MinIO.Endpoint, "agent-context", "", "minio")).
		Spec(func(s *compactionv1alpha1.CompactionPolicySpec) {
			s.Thresholds = compactionv1alpha1.Thresholds{WarnPercent: 55, SoftPercent: 65, FullPercent: 85, EmergencyPercent: 95, TargetPercent: 50, MinSavingPercent: 5}
		}).Build()))
	api, err := compactclient.New(env.APIURL, compactclient.WithTokenFile(env.AgentTokenFile), compactclient.WithCAFile(env.CAFile))
	testenv.Must(t, err)
	return &suite{t: t, root: root, env: env, c: c, api: api}
}

// session creates a Ready AgentSession with its own window.
func (s *suite) session(t *testing.T, name string, window int32) {
	t.Helper()
	ctx := context.Background()
	testenv.Must(t, s.c.Create(ctx, builder.Session(ns, name, "agents").Window(window).Build()))
	testenv.Eventually(t, time.Minute, "session "+name+" Ready", func() (bool, string) {
		var got compactionv1alpha1.AgentSession
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &got); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, compactionv1alpha1.ConditionReady), fmt.Sprint(got.Status.Conditions)
	})
}

// serve serves the scripted model handler h and, unless -direct, a proxy for the session
// name in front of it. It returns the URL the agent is to use as its base.
func (s *suite) serve(t *testing.T, name string, window int32, h http.Handler, geminiModel bool) string {
	t.Helper()
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	if *direct {
		return up.URL
	}
	s.session(t, name, window)
	base, err := url.Parse(up.URL + "/v1")
	testenv.Must(t, err)
	root, err := url.Parse(up.URL)
	testenv.Must(t, err)
	srv := httptest.NewUnstartedServer(nil)
	metrics, err := proxy.NewMetrics(prometheus.NewRegistry())
	testenv.Must(t, err)
	s.mu.Lock()
	if s.metrics == nil {
		s.metrics = map[string]*proxy.Metrics{}
	}
	s.metrics[name] = metrics
	s.mu.Unlock()
	cfg := proxy.Config{Upstream: base, AnthropicUpstream: base, Compactor: proxy.NewAPICompactor(s.api, ns, name),
		PromptCacheKey: true, ReadBackURL: "http://" + srv.Listener.Addr().String(), Metrics: metrics, Log: quiet(t)}
	if geminiModel {
		cfg.GeminiUpstream = root
	}
	p, err := proxy.New(cfg)
	testenv.Must(t, err)
	srv.Config.Handler = p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// quiet is the proxy's log: the test's, verbose only with -v.
func quiet(t *testing.T) logr.Logger {
	if testing.Verbose() {
		return testr.New(t)
	}
	return logr.Discard()
}

// modules is test/agents/node/node_modules, failing the test (never skipping it) when `make
// tools` has not installed it or Node.
func (s *suite) modules(t *testing.T, need ...string) (node, dir string) {
	t.Helper()
	node = filepath.Join(s.root, "bin", "node")
	dir = filepath.Join(s.root, "test", "agents", "node", "node_modules")
	for _, p := range append([]string{node}, need...) {
		if !filepath.IsAbs(p) && p != node {
			p = filepath.Join(dir, p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run `make tools` from the repository root: it fetches Node into bin/ and installs the agents' npm packages into test/agents/node/node_modules (agents-modules)", err)
		}
	}
	return node, dir
}

// run runs an agent's command in the workspace with exactly env (nothing of the test's
// environment: an API key or base URL there would change what the agent does) and returns
// its stdout. The agent must exit 0 within timeout.
func run(t *testing.T, dir string, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s ran for %v", filepath.Base(name), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s %s: %v (context: %v)\nstderr (last 4 KB):\n%s\nstdout (last 4 KB):\n%s", filepath.Base(name), strings.Join(args, " "), err, ctx.Err(),
			tail(stderr.Bytes(), 4096), tail(stdout.Bytes(), 4096))
	}
	if testing.Verbose() {
		t.Logf("stderr (last 2 KB):\n%s", tail(stderr.Bytes(), 2048))
	}
	return stdout.String()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// baseEnv is the environment every agent gets: a PATH with the system's tools and the
// pinned Node, a HOME of its own, no proxy.
func baseEnv(t *testing.T, node string) (env []string, home string) {
	home = t.TempDir()
	return []string{
		"PATH=" + filepath.Dir(node) + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"SHELL=/bin/bash",
		"TERM=dumb",
		"LANG=C.UTF-8",
		"NO_COLOR=1",
		"CI=1",
	}, home
}

// check asserts what every agent's run must show: the agent printed the final answer; it
// ran its tool for every step (the model saw each step's proof); and, unless -direct, the
// model received compacted views (the compaction header, and requests far smaller than the
// raw history), and the session's status counts the Warn and Full tiers.
func (s *suite) check(t *testing.T, name string, m *model, stdout string) {
	t.Helper()
	main, side := m.requests()
	if dump := os.Getenv("AGENTS_DUMP"); dump != "" {
		dumpExchanges(t, filepath.Join(dump, name), main, side)
	}
	m.mu.Lock()
	problems := append([]string(nil), m.problems...)
	proved := len(m.proved)
	finals := m.finals
	m.mu.Unlock()
	for _, p := range problems {
		t.Errorf("model: %s", p)
	}
	t.Logf("the model got %d tool-loop requests and %d side requests", len(main), len(side))
	if !strings.Contains(stdout, finalText(m.steps)) {
		t.Errorf("the agent did not print the model's final answer %q; stdout (last 2 KB):\n%s", finalText(m.steps), tail([]byte(stdout), 2048))
	}
	if proved != m.steps || finals == 0 {
		t.Errorf("the model saw the proof of %d of %d steps and sent %d final answers", proved, m.steps, finals)
	}
	if len(main) == 0 {
		t.Fatal("no tool-loop request reached the model")
	}
	// The raw history grows by every log the agent read: the last request, were it
	// uncompacted, would carry the first one's bytes and every log but the last's.
	first, last := len(main[0].raw), len(main[len(main)-1].raw)
	raw := first + m.ws.totalBytes() - m.ws.sizes[m.steps]
	largest, compacted := 0, 0
	for _, e := range main {
		largest = max(largest, len(e.raw))
		if e.compacted {
			compacted++
		}
	}
	t.Logf("request bodies: first %d bytes, last %d, largest %d; the raw history would be at least %d; %d requests carry %q",
		first, last, largest, raw, compacted, compaction.CompactionHeader)
	if *direct {
		return
	}
	if compacted == 0 {
		t.Errorf("no request reached the model with %q", compaction.CompactionHeader)
	}
	if last > first+(raw-first)/2 {
		t.Errorf("the last request has %d bytes: not compacted well below the raw history's %d", last, raw)
	}
	s.checkNoPassThrough(t, name, len(main)+len(side))
	s.logRecords(t, name, m.conversation(main[0].raw))
	s.waitForTiers(t, name, compactionv1alpha1.TierWarn, compactionv1alpha1.TierFull)
}

// checkNoPassThrough asserts that the proxy compacted every conversation request the agent
// sent (at least the n the model received) and passed none through, whatever the reason.
func (s *suite) checkNoPassThrough(t *testing.T, name string, n int) {
	t.Helper()
	s.mu.Lock()
	m := s.metrics[name]
	s.mu.Unlock()
	ch := make(chan prometheus.Metric, 64)
	go func() { m.Requests.Collect(ch); close(ch) }()
	compacted := 0.0
	for metric := range ch {
		var out dto.Metric
		testenv.Must(t, metric.Write(&out))
		result := ""
		for _, l := range out.GetLabel() {
			if l.GetName() == "result" {
				result = l.GetValue()
			}
		}
		v := out.GetCounter().GetValue()
		t.Logf("proxy requests %s: %v", result, v)
		if result == "compacted" {
			compacted += v
		} else if v > 0 {
			t.Errorf("the proxy passed %v requests through (%s): every request of the agent must be compacted", v, result)
		}
	}
	if compacted < float64(n) {
		t.Errorf("the proxy compacted %v requests, the model received %d", compacted, n)
	}
}

// logRecords logs the session's compaction records, one line each.
func (s *suite) logRecords(t *testing.T, name string, conversation string) {
	t.Helper()
	var buf bytes.Buffer
	if err := s.api.Records(context.Background(), ns, name, &buf, compactclient.InConversation(conversation)); err != nil {
		t.Logf("records: %v", err)
		return
	}
	var lines []string
	if buf.Len() > 0 && !strings.HasPrefix(buf.String(), "{") {
		t.Logf("records: %.500s", buf.String())
	}
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var rec compaction.CompactionRecord
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Logf("record %.200s: %v", line, err)
			continue
		}
		lines = append(lines, fmt.Sprintf("%s %d->%d tokens (x%.2f, fixed %d) %d->%d msgs", rec.Tier, rec.TokensBefore, rec.TokensAfter, rec.Calibration, rec.FixedTokens, rec.MsgsBefore, rec.MsgsAfter))
	}
	t.Logf("%d compaction records:\n%s", len(lines), strings.Join(lines, "\n"))
}

// waitForTiers waits for the session's status to count compactions of every tier in want.
func (s *suite) waitForTiers(t *testing.T, name string, want ...compactionv1alpha1.Tier) {
	t.Helper()
	var counts map[compactionv1alpha1.Tier]int64
	testenv.Eventually(t, 30*time.Second, name+" status counting "+fmt.Sprint(want), func() (bool, string) {
		var got compactionv1alpha1.AgentSession
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &got); err != nil {
			return false, err.Error()
		}
		counts = map[compactionv1alpha1.Tier]int64{
			compactionv1alpha1.TierWarn: ptr.Deref(got.Status.Compactions.Warn, 0),
			compactionv1alpha1.TierSoft: ptr.Deref(got.Status.Compactions.Soft, 0),
			compactionv1alpha1.TierFull: ptr.Deref(got.Status.Compactions.Full, 0),
		}
		for _, tier := range want {
			if counts[tier] == 0 {
				return false, fmt.Sprint(counts)
			}
		}
		return true, ""
	})
	t.Logf("session %s: compactions by tier %v", name, counts)
}

func TestAgents(t *testing.T) {
	s := setUp(t)
	t.Run("claude-code", func(t *testing.T) { claudeCode(t, s) })
	t.Run("codex", func(t *testing.T) { codex(t, s) })
	t.Run("gemini-cli", func(t *testing.T) { geminiCLI(t, s) })
	t.Run("opencode", func(t *testing.T) { opencode(t, s, "openai/gpt-5.5") })
	t.Run("opencode-anthropic", func(t *testing.T) { opencode(t, s, "anthropic/claude-sonnet-4-5") })
	t.Run("qwen-code", func(t *testing.T) { qwenCode(t, s) })
	t.Run("agents-sdk", func(t *testing.T) { agentsSDK(t, s, true) })
	t.Run("agents-sdk-plain", func(t *testing.T) { agentsSDK(t, s, false) })
	t.Run("langchain", func(t *testing.T) { langChain(t, s) })
	t.Run("ai-sdk", func(t *testing.T) { aiSDK(t, s, "ai-sdk", "gpt-5.5", true) })
	t.Run("ai-sdk-plain", func(t *testing.T) { aiSDK(t, s, "ai-sdk-plain", "gpt-5.5", false) })
	t.Run("ai-sdk-gpt-4.1", func(t *testing.T) { aiSDK(t, s, "ai-sdk-gpt-4-1", "gpt-4.1", true) })
	t.Run("ai-sdk-gemini", func(t *testing.T) { aiSDK(t, s, "ai-sdk-gemini", "gemini-2.5-pro", true) })
	t.Run("ai-sdk-gemini-plain", func(t *testing.T) { aiSDK(t, s, "ai-sdk-gemini-plain", "gemini-2.5-pro", false) })
}

// claudeCode runs Claude Code (@anthropic-ai/claude-code: its native binary, from the
// platform package the npm package depends on) in print mode.
func claudeCode(t *testing.T, s *suite) {
	const steps, window = 36, 50000
	name := "claude-code"
	_, dir := s.modules(t)
	bin := filepath.Join(dir, "@anthropic-ai", "claude-code-linux-x64", "claude")
	s.modules(t, bin)
	ws := newWorkspace(t, steps)
	m := newModel(t, ws, steps)
	base := s.serve(t, name, window, newAnthropicModel(m), false)
	node := filepath.Join(s.root, "bin", "node")
	env, _ := baseEnv(t, node)
	env = append(env,
		"ANTHROPIC_BASE_URL="+base,
		"ANTHROPIC_API_KEY=sk-ant-agents-e2e",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_BUG_COMMAND=1",
		"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1",
	)
	out := run(t, ws.dir, 5*time.Minute, env, bin,
		"-p", "Check every step log in logs/ with the tools, one step at a time as asked.",
		"--allowedTools", "Bash,Read",
		"--model", "claude-opus-5-5",
		"--max-turns", fmt.Sprint(steps+10),
		"--output-format", "text")
	s.check(t, name, m, out)
	requireSent(t, m, `"type":"thinking"`) // the model's signed thinking, sent back
}

// dumpExchanges writes every request the model received into dir (AGENTS_DUMP=dir: to see
// what an agent sends).
func dumpExchanges(t *testing.T, dir string, main, side []exchange) {
	testenv.Must(t, os.MkdirAll(dir, 0o755))
	write := func(kind string, i int, e exchange) {
		var b bytes.Buffer
		fmt.Fprintf(&b, "%s %s\n", e.method, e.path)
		_ = e.header.Write(&b)
		b.WriteString("\n")
		b.Write(e.raw)
		testenv.Must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%03d.txt", kind, i)), b.Bytes(), 0o644))
	}
	for i, e := range main {
		write("main", i, e)
	}
	for i, e := range side {
		write("side", i, e)
	}
}

// conversationOf is the conversation the proxy names a history by (internal/proxy's
// conversationOf): a hash of its system messages and first other message. The test reads
// the conversation's compaction records with it.
func conversationOf(msgs []compaction.Message) string {
	h := sha256.New()
	for i := range msgs {
		m := &msgs[i]
		part, _ := json.Marshal([]any{m.Role, m.Content, m.ContentParts})
		h.Write(part)
		if m.Role != compaction.RoleSystem {
			break
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// codex runs Codex CLI (@openai/codex: bin/codex.js, which runs the native binary of the
// platform package) with codex exec, its model provider in CODEX_HOME/config.toml pointing
// at the proxy with the Responses API.
func codex(t *testing.T, s *suite) {
	const steps, window = 30, 40000
	name := "codex"
	node, dir := s.modules(t, filepath.Join("@openai", "codex", "bin", "codex.js"), filepath.Join("@openai", "codex-linux-x64", "package.json"))
	ws := newWorkspace(t, steps)
	m := newModel(t, ws, steps)
	base := s.serve(t, name, window, newResponsesModel(m, codexTools), false)
	env, home := baseEnv(t, node)
	codexHome := filepath.Join(home, ".codex")
	testenv.Must(t, os.MkdirAll(codexHome, 0o755))
	config := fmt.Sprintf(`model = "gpt-5.5"
model_provider = "proxied"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.proxied]
name = "compaction-proxy"
base_url = "%s/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[otel]
exporter = "none"
`, base)
	testenv.Must(t, os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o644))
	env = append(env, "CODEX_HOME="+codexHome, "OPENAI_API_KEY=sk-agents-e2e", "RUST_LOG=warn")
	out := run(t, ws.dir, 5*time.Minute, env, node, filepath.Join(dir, "@openai", "codex", "bin", "codex.js"),
		"exec", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "--color", "never",
		"Check every step log in logs/ with your tools, one step at a time as asked.")
	s.check(t, name, m, out)
	requireSent(t, m, `"encrypted_content":"gAAAA`) // the model's reasoning, sent back
}

// geminiCLI runs Gemini CLI (@google/gemini-cli: bundle/gemini.js on the pinned Node) in
// non-interactive mode with an API key, GOOGLE_GEMINI_BASE_URL pointing at the proxy.
func geminiCLI(t *testing.T, s *suite) {
	const steps, window = 30, 40000
	name := "gemini-cli"
	node, dir := s.modules(t, filepath.Join("@google", "gemini-cli", "bundle", "gemini.js"))
	ws := newWorkspace(t, steps)
	m := newModel(t, ws, steps)
	base := s.serve(t, name, window, newGeminiModel(m), true)
	env, home := baseEnv(t, node)
	settings := filepath.Join(home, ".gemini")
	testenv.Must(t, os.MkdirAll(settings, 0o755))
	testenv.Must(t, os.WriteFile(filepath.Join(settings, "settings.json"), []byte(`{
  "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "ide": {"enabled": false}
}
`), 0o644))
	env = append(env, "GOOGLE_GEMINI_BASE_URL="+base, "GEMINI_API_KEY=agents-e2e-key", "GEMINI_CLI_TRUST_WORKSPACE=true",
		"GEMINI_CLI_NO_RELAUNCH=true")
	out := run(t, ws.dir, 5*time.Minute, env, node, filepath.Join(dir, "@google", "gemini-cli", "bundle", "gemini.js"),
		"--yolo", "--model", "gemini-2.5-pro", "--output-format", "text",
		"-p", "Check every step log in logs/ with your tools, one step at a time as asked.")
	s.check(t, name, m, out)
}

// agentsSDK runs node/sdkagent.mjs, an agent of the OpenAI Agents SDK for JavaScript
// (@openai/agents) with one function tool, streamed or not.
func agentsSDK(t *testing.T, s *suite, stream bool) {
	const steps, window = 30, 24000
	name := "agents-sdk"
	if !stream {
		name = "agents-sdk-plain"
	}
	node, dir := s.modules(t, filepath.Join("@openai", "agents", "package.json"), filepath.Join("zod", "package.json"))
	ws := newWorkspace(t, steps)
	m := newModel(t, ws, steps)
	base := s.serve(t, name, window, newResponsesModel(m, sdkTools), false)
	env, _ := baseEnv(t, node)
	args := []string{filepath.Join(filepath.Dir(dir), "sdkagent.mjs"), "--base-url", base + "/v1", "--api-key", "sk-agents-e2e",
		"--task", "Check every step log in " + filepath.Join(ws.dir, "logs") + " with read_log, one step at a time as asked."}
	if stream {
		args = append(args, "--stream")
	}
	out := run(t, ws.dir, 3*time.Minute, env, node, args...)
	s.check(t, name, m, out)
	requireSent(t, m, `"type":"reasoning"`) // the model's reasoning items, sent back with their ids
}

// aiSDK runs node/aisdkagent.mjs, an agent of the Vercel AI SDK on an OpenAI model (the
// Responses API) or a Gemini one with one function tool, streamed or not, configured only by
// the environment the injection sets, as the session name.
func aiSDK(t *testing.T, s *suite, name, modelName string, stream bool) {
	const steps, window = 30, 24000
	gemini := strings.HasPrefix(modelName, "gemini")
	node, dir := s.modules(t, filepath.Join("ai", "package.json"), filepath.Join("@ai-sdk", "openai", "package.json"), filepath.Join("@ai-sdk", "google", "package.json"))
	ws := newWorkspace(t, steps)
	m := newModel(t, ws, steps)
	env, _ := baseEnv(t, node)
	provider := "openai"
	if gemini {
		provider = "google"
		base := s.serve(t, name, window, newGeminiModel(m), true)
		env = append(env, "GOOGLE_GEMINI_BASE_URL="+base, "GOOGLE_GENERATIVE_AI_API_KEY=agents-e2e-key")
	} else {
		base := s.serve(t, name, window, newResponsesModel(m, sdkTools), false)
		env = append(env, "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=sk-agents-e2e")
	}
	args := []string{filepath.Join(filepath.Dir(dir), "aisdkagent.mjs"), "--provider", provider, "--model", modelName,
		"--task", "Check every step log in " + filepath.Join(ws.dir, "logs") + " with read_log, one step at a time as asked."}
	if stream {
		args = append(args, "--stream")
	}
	out := run(t, ws.dir, 3*time.Minute, env, node, args...)
	s.check(t, name, m, out)
	if gemini {
		return
	}
	// With "store" left to its default, the SDK sends the reasoning (of a reasoning model)
	// and the text of the model's earlier outputs as item references: the views must have
	// kept them.
	requireSent(t, m, `{"type":"item_reference","id":"msg_`)
	if strings.HasPrefix(modelName, "gpt-5") {
		requireSent(t, m, `{"type":"item_reference","id":"rs_`)
	}
}

// requireSent fails the test unless some tool-loop request the model received holds what.
func requireSent(t *testing.T, m *model, what string) {
	t.Helper()
	main, _ := m.requests()
	for _, e := range main {
		if bytes.Contains(e.raw, []byte(what)) {
			return
		}
	}
	t.Errorf("no request of the agent holds %s", what)
}

// opencode runs OpenCode (opencode-ai: the native binary of its platform package) with
// opencode run on its OpenAI or Anthropic provider (model is provider/model), configured as
// the injection does (OPENAI_BASE_URL and OPENAI_API_KEY, or ANTHROPIC_BASE_URL and
// ANTHROPIC_API_KEY), without the models.dev catalog fetch (no network).
func opencode(t *testing.T, s *suite, model string) {
	const steps, window = 30, 40000
	provider, _, _ := strings.Cut(model, "/")
	name := "opencode"
	if provider != "openai" {
		name += "-" + provider
	}
	_, dir := s.modules(t)
	bin := filepath.Join(dir, "opencode-linux-x64", "bin", "opencode")
	s.modules(t, bin)
	ws := newWorkspace(t, steps)
	m := newModel(t, ws, steps)
	node := filepath.Join(s.root, "bin", "node")
	env, home := baseEnv(t, node)
	if provider == "anthropic" {
		// The injection's value, for Claude Code: OpenCode's SDK (@ai-sdk/anthropic) appends
		// only /messages to it, which the proxy sends to the upstream's /v1/messages (the
		// scripted model alone, with -direct, needs the /v1).
		base := s.serve(t, name, window, newAnthropicModel(m), false)
		if *direct {
			base += "/v1"
		}
		env = append(env, "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=sk-ant-agents-e2e")
	} else {
		base := s.serve(t, name, window, newResponsesModel(m, opencodeTools), false)
		env = append(env, "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=sk-agents-e2e")
	}
	config := filepath.Join(home, ".config", "opencode")
	testenv.Must(t, os.MkdirAll(config, 0o755))
	testenv.Must(t, os.WriteFile(filepath.Join(config, "opencode.json"), []byte(`{
  "model": "`+model+`",
  "small_model": "`+model+`",
  "autoupdate": false,
  "share": "disabled",
  "permission": {"bash": "allow", "read": "allow", "external_directory": "allow"}
}
`), 0o644))
	env = append(env, "OPENCODE_DISABLE_MODELS_FETCH=true", "OPENCODE_DISABLE_AUTOUPDATE=true",
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_DATA_HOME="+filepath.Join(home, ".local", "share"))
	out := run(t, ws.dir, 5*time.Minute, env, bin, "run", "--model", model,
		"Check every step log in logs/ with your tools, one step at a time as asked.")
	s.check(t, name, m, out)
	if provider == "openai" {
		requireSent(t, m, `"type":"reasoning"`) // the model's reasoning, sent back with store false
	}
}

// qwenCode runs Qwen Code (@qwen-code/qwen-code: cli.js on the pinned Node) in
// non-interactive mode on an OpenAI-compatible provider, configured as the injection does
// (OPENAI_BASE_URL, OPENAI_API_KEY) and with OPENAI_MODEL: Chat Completions.
func qwenCode(t *testing.T, s *suite) {
	const steps, window = 30, 56000
	name := "qwen-code"
	node, dir := s.modules(t, filepath.Join("@qwen-code", "qwen-code", "cli.js"))
	ws := newWorkspace(t, steps)
	m := newModel(t, ws, steps)
	base := s.serve(t, name, window, newChatModel(m, qwenTools), false)
	env, home := baseEnv(t, node)
	settings := filepath.Join(home, ".qwen")
	testenv.Must(t, os.MkdirAll(settings, 0o755))
	testenv.Must(t, os.WriteFile(filepath.Join(settings, "settings.json"), []byte(`{
  "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": false}},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "ide": {"enabled": false}
}
`), 0o644))
	env = append(env, "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=sk-agents-e2e", "OPENAI_MODEL=qwen3-coder-plus")
	out := run(t, ws.dir, 5*time.Minute, env, node, filepath.Join(dir, "@qwen-code", "qwen-code", "cli.js"),
		"--yolo", "--output-format", "text", "-p", "Check every step log in logs/ with your tools, one step at a time as asked.")
	s.check(t, name, m, out)
	// The tool results the view keeps go back as the text parts Qwen Code sent.
	requireLast(t, m, `{"content":[{"type":"text","text":"Command: `)
}

// langChain runs node/lcagent.mjs, an agent of LangChain.js (ChatOpenAI on Chat Completions,
// gpt-5.5) with one tool, configured only by the environment the injection sets. Not
// streamed: streamed, ChatOpenAI first downloads a tiktoken encoding from tiktoken.pages.dev,
// which the test's machine cannot reach.
func langChain(t *testing.T, s *suite) {
	const steps, window = 30, 24000
	name := "langchain"
	node, dir := s.modules(t, filepath.Join("@langchain", "openai", "package.json"), filepath.Join("@langchain", "core", "package.json"))
	ws := newWorkspace(t, steps)
	m := newModel(t, ws, steps)
	base := s.serve(t, name, window, newChatModel(m, sdkTools), false)
	env, _ := baseEnv(t, node)
	env = append(env, "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=sk-agents-e2e")
	out := run(t, ws.dir, 3*time.Minute, env, node, filepath.Join(filepath.Dir(dir), "lcagent.mjs"),
		"--task", "Check every step log in "+filepath.Join(ws.dir, "logs")+" with read_log, one step at a time as asked.")
	s.check(t, name, m, out)
	requireLast(t, m, `"role":"developer"`) // the system prompt, back in its role
}

// requireLast fails the test unless the last tool-loop request the model received (a
// compacted view) holds what.
func requireLast(t *testing.T, m *model, what string) {
	t.Helper()
	main, _ := m.requests()
	if len(main) == 0 || !bytes.Contains(main[len(main)-1].raw, []byte(what)) {
		t.Errorf("the last request of the agent does not hold %s", what)
	}
}
