// Package proxy drives agents built on the official OpenAI Go SDK through compaction-proxy:
// the manager binary on a real kube-apiserver and MinIO serves the compaction API, an
// in-process fake model endpoint answers from a script and records what it received.
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
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/go-logr/logr/testr"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
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

const (
	ns = "default"
	// window: a 60-turn tool loop with a few KB per result passes Warn, Soft and Full.
	window = 16000
)

// agentSystem is the system prompt of the agents.
const agentSystem = "You are a coding agent. Fix the failing tests."

type suite struct {
	t   *testing.T
	env *devenv.Env
	c   client.Client
	api *compactclient.Client
}

func setUp(t *testing.T) *suite {
	t.Helper()
	root := testenv.RepoRoot(t)
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
	// Soft at 65% and Full at 85%: the tool loop's even turns let the oldest half of the
	// head reach the 54% target from Soft, so all three tiers occur. (At 50% every Soft
	// ended at 50-56% and became Full once the compaction message carried the archive's
	// read-back line: a few dozen tokens are a percent of this small window.)
	testenv.Must(t, c.Create(ctx, builder.Policy(ns, "proxied").Window(window).
		Storage(builder.MinIOStorage(env.MinIO.Endpoint, "agent-context", "", "minio")).
		Spec(func(s *compactionv1alpha1.CompactionPolicySpec) {
			s.Thresholds = compactionv1alpha1.Thresholds{WarnPercent: 55, SoftPercent: 65, FullPercent: 85, EmergencyPercent: 95, TargetPercent: 54, MinSavingPercent: 15}
		}).Build()))
	api, err := compactclient.New(env.APIURL, compactclient.WithTokenFile(env.AgentTokenFile), compactclient.WithCAFile(env.CAFile))
	testenv.Must(t, err)
	return &suite{t: t, env: env, c: c, api: api}
}

// session creates a Ready AgentSession.
func (s *suite) session(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	testenv.Must(t, s.c.Create(ctx, builder.Session(ns, name, "proxied").Build()))
	testenv.Eventually(t, time.Minute, "session "+name+" Ready", func() (bool, string) {
		var got compactionv1alpha1.AgentSession
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &got); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, compactionv1alpha1.ConditionReady), fmt.Sprint(got.Status.Conditions)
	})
}

// proxied creates the Ready session name and serves a proxy for it in front of a new
// scripted upstream (toolTurns tool calls per conversation).
func (s *suite) proxied(t *testing.T, name string, toolTurns int) (*upstream, string, *prometheus.Registry) {
	t.Helper()
	s.session(t, name)
	up := newUpstream(t, toolTurns)
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	proxyURL, reg := s.startProxy(t, name, upSrv)
	return up, proxyURL, reg
}

// startProxy serves a proxy for session name in front of up.
func (s *suite) startProxy(t *testing.T, name string, up *httptest.Server) (string, *prometheus.Registry) {
	t.Helper()
	base, err := url.Parse(up.URL + "/v1")
	testenv.Must(t, err)
	reg := prometheus.NewRegistry()
	m, err := proxy.NewMetrics(reg)
	testenv.Must(t, err)
	srv := httptest.NewUnstartedServer(nil)
	p, err := proxy.New(proxy.Config{Upstream: base, Compactor: proxy.NewAPICompactor(s.api, ns, name), PromptCacheKey: true,
		ReadBackURL: "http://" + srv.Listener.Addr().String(), Metrics: m, Log: testr.New(t)})
	testenv.Must(t, err)
	srv.Config.Handler = p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, reg
}

// toolOutput is the result of the agent's tool on turn i: one or two KB of test log, every
// fifth large enough to be offloaded.
func toolOutput(dir string, i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ pytest -k case%d\n", i)
	lines := 30 + (i%3)*20
	if i%5 == 0 {
		lines = 160
	}
	for j := range lines {
		fmt.Fprintf(&b, "%s/test_case%d.py::test_%d PASSED [%d%%]\n", dir, i, j, 100*j/lines)
	}
	fmt.Fprintf(&b, "==== %d passed, 1 failed: %s/test_edge.py::test_edge%d AssertionError: expected 4, got 5 ====\n", lines-1, dir, i)
	return b.String()
}

// agentLoop is an agent written with the OpenAI SDK: it calls the model, runs the tool calls
// it asks for, and stops at the first answer without any. It returns its history.
func agentLoop(t *testing.T, sdk openai.Client, system, task, dir string, streamed bool, onTurn func(turn int)) []openai.ChatCompletionMessageParamUnion {
	t.Helper()
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(system),
			openai.UserMessage(task),
		},
	}
	if streamed {
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	for turn := 1; turn <= 200; turn++ {
		if onTurn != nil {
			onTurn(turn)
		}
		var msg openai.ChatCompletionMessage
		if streamed {
			stream := sdk.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("turn %d: stream: %v", turn, err)
			}
			msg = acc.Choices[0].Message
		} else {
			resp, err := sdk.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
			msg = resp.Choices[0].Message
		}
		params.Messages = append(params.Messages, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			if msg.Content != "All tests pass. Done." {
				t.Fatalf("turn %d: final answer %q, want the upstream's", turn, msg.Content)
			}
			return params.Messages
		}
		for _, tc := range msg.ToolCalls {
			if want := fmt.Sprintf(`{"cmd":"pytest -k case%d"}`, turn); tc.Function.Arguments != want {
				t.Fatalf("turn %d: tool call arguments %q, want the upstream's %q", turn, tc.Function.Arguments, want)
			}
			params.Messages = append(params.Messages, openai.ToolMessage(toolOutput(dir, turn), tc.ID))
		}
	}
	t.Fatal("the loop did not end")
	return nil
}

// waitForTiers waits for the session's status to count compactions of every tier in want.
func (s *suite) waitForTiers(t *testing.T, name string, want ...compactionv1alpha1.Tier) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, name+" status counting "+fmt.Sprint(want), func() (bool, string) {
		var got compactionv1alpha1.AgentSession
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &got); err != nil {
			return false, err.Error()
		}
		counts := map[compactionv1alpha1.Tier]int64{
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
}

// records reads the session's compaction records.
func (s *suite) records(t *testing.T, name, conversation string) []*compaction.CompactionRecord {
	t.Helper()
	var buf bytes.Buffer
	testenv.Must(t, s.api.Records(context.Background(), ns, name, &buf, compactclient.InConversation(conversation)))
	var out []*compaction.CompactionRecord
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec compaction.CompactionRecord
		testenv.Must(t, json.Unmarshal([]byte(line), &rec))
		out = append(out, &rec)
	}
	return out
}

// checkCompacted: the upstream received compacted views (shorter than the agent's history,
// which has lead messages and then a call and a result per turn, with the summary at Full),
// the agent's key, and (OpenAI) one prompt cache key.
func checkCompacted(t *testing.T, reqs []received, lead int, key string, cacheKey bool) {
	t.Helper()
	shorter, summarized := 0, false
	keys := map[string]bool{}
	for i, r := range reqs {
		if r.auth != key {
			t.Fatalf("request %d reached the upstream with key %q, want the agent's", i, r.auth)
		}
		keys[r.promptCacheKey] = true
		if len(r.messages) < lead+2*i {
			shorter++
		}
		for _, m := range r.messages {
			if strings.Contains(textOf(m["content"]), compaction.CompactionHeader) {
				summarized = true
			}
		}
	}
	if shorter == 0 || !summarized {
		t.Errorf("of %d requests the upstream got %d views shorter than the history; a summary: %v", len(reqs), shorter, summarized)
	}
	if cacheKey && (len(keys) != 1 || keys[""]) {
		t.Errorf("prompt_cache_key values %v, want one per conversation", keys)
	}
}

// textOf is a message content's text: the string, or its text blocks.
func textOf(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, block := range c {
			if m, ok := block.(map[string]any); ok {
				if text, ok := m["text"].(string); ok {
					b.WriteString(text)
				}
			}
		}
		return b.String()
	}
	return ""
}

// anthropicLoop is agentLoop written with the Anthropic SDK.
func anthropicLoop(t *testing.T, sdk anthropic.Client, system, task, dir string, streamed bool) {
	t.Helper()
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 1024,
		System:   []anthropic.TextBlockParam{{Text: system}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(task))},
	}
	for turn := 1; turn <= 200; turn++ {
		var msg anthropic.Message
		if streamed {
			stream := sdk.Messages.NewStreaming(ctx, params)
			for stream.Next() {
				testenv.Must(t, msg.Accumulate(stream.Current()))
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("turn %d: stream: %v", turn, err)
			}
		} else {
			resp, err := sdk.Messages.New(ctx, params)
			if err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
			msg = *resp
		}
		params.Messages = append(params.Messages, msg.ToParam())
		var results []anthropic.ContentBlockParamUnion
		var text strings.Builder
		for _, block := range msg.Content {
			switch block.Type {
			case "tool_use":
				use := block.AsToolUse()
				if want := fmt.Sprintf(`{"cmd":"pytest -k case%d"}`, turn); string(use.Input) != want {
					t.Fatalf("turn %d: tool input %s, want the upstream's %s", turn, use.Input, want)
				}
				results = append(results, anthropic.NewToolResultBlock(use.ID, toolOutput(dir, turn), false))
			case "text":
				text.WriteString(block.Text)
			}
		}
		if len(results) == 0 {
			if text.String() != "All tests pass. Done." {
				t.Fatalf("turn %d: final answer %q, want the upstream's", turn, text.String())
			}
			return
		}
		params.Messages = append(params.Messages, anthropic.NewUserMessage(results...))
	}
	t.Fatal("the loop did not end")
}

func TestProxy(t *testing.T) {
	s := setUp(t)

	for _, streamed := range []bool{false, true} {
		name := "agent-plain"
		if streamed {
			name = "agent-streamed"
		}
		t.Run(name, func(t *testing.T) {
			up, proxyURL, reg := s.proxied(t, name, 60)
			sdk := openai.NewClient(option.WithBaseURL(proxyURL+"/v1/"), option.WithAPIKey("sk-agent-key"), option.WithMaxRetries(0))
			agentLoop(t, sdk, agentSystem, "Fix the failing test_edge cases in tests/", "tests", streamed, nil)
			checkCompacted(t, up.requests(), 2, "Bearer sk-agent-key", true)
			s.waitForTiers(t, name, compactionv1alpha1.TierWarn, compactionv1alpha1.TierSoft, compactionv1alpha1.TierFull)
			if n := counted(t, reg, "openai", "compacted"); n != float64(len(up.requests())) {
				t.Errorf("%v requests counted compacted, want every one of %d", n, len(up.requests()))
			}
			// The upstream's usage reached the engine: it calibrates the estimate upwards.
			calibrated := false
			// The proxy names the conversation in its prompt cache key.
			conversation := strings.TrimPrefix(up.requests()[0].promptCacheKey, "compaction-")
			for _, rec := range s.records(t, name, conversation) {
				if rec.Calibration > 1.05 {
					calibrated = true
				}
			}
			if !calibrated {
				t.Errorf("no record shows a calibration from the reported usage")
			}

			// A sub-agent through the same proxy: its own conversation, compacted on its
			// own, never shown the first agent's context.
			first := len(up.requests())
			agentLoop(t, sdk, "You are a sub-agent. Review the documentation.", "Review docs/ for stale examples", "docs", streamed, nil)
			subReqs := up.requests()[first:]
			checkCompacted(t, subReqs, 2, "Bearer sk-agent-key", true)
			for i, r := range subReqs {
				if bytes.Contains(r.raw, []byte("tests/")) || bytes.Contains(r.raw, []byte("Fix the failing")) {
					t.Fatalf("sub-agent request %d carries the first agent's context", i)
				}
			}
		})
	}

	for _, streamed := range []bool{false, true} {
		name := "claude-plain"
		if streamed {
			name = "claude-streamed"
		}
		t.Run(name, func(t *testing.T) {
			up, proxyURL, reg := s.proxied(t, name, 60)
			sdk := anthropic.NewClient(aoption.WithBaseURL(proxyURL), aoption.WithAPIKey("sk-ant-agent-key"), aoption.WithMaxRetries(0))
			anthropicLoop(t, sdk, agentSystem, "Fix the failing test_edge cases in tests/", "tests", streamed)
			checkCompacted(t, up.requests(), 1, "Bearer sk-ant-agent-key", false)
			s.waitForTiers(t, name, compactionv1alpha1.TierWarn, compactionv1alpha1.TierSoft, compactionv1alpha1.TierFull)
			if n := counted(t, reg, "anthropic", "compacted"); n != float64(len(up.requests())) {
				t.Errorf("%v requests counted compacted, want every one of %d", n, len(up.requests()))
			}
		})
	}

	t.Run("bytes", func(t *testing.T) {
		up, proxyURL, _ := s.proxied(t, "agent-bytes", 1)
		for _, req := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hello"}]}`},
			{"/v1/chat/completions", `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`},
			{"/v1/messages", `{"model":"claude-test","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`},
			{"/v1/messages", `{"model":"claude-test","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello"}]}`},
		} {
			resp, err := http.Post(proxyURL+req.path, "application/json", strings.NewReader(req.body))
			testenv.Must(t, err)
			got, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			testenv.Must(t, err)
			if want := up.lastSent(); !bytes.Equal(got, want) {
				t.Errorf("the agent got\n%s\nthe upstream sent\n%s", got, want)
			}
		}
		// Other routes pass through.
		resp, err := http.Get(proxyURL + "/v1/models")
		testenv.Must(t, err)
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), "gpt-test") {
			t.Errorf("GET /v1/models: %s %s", resp.Status, got)
		}
	})

	t.Run("offload-on-entry", func(t *testing.T) { offloadOnEntry(t, s) })
	t.Run("recall", func(t *testing.T) { recallThroughProxy(t, s) })
	t.Run("images", func(t *testing.T) { imagesThroughProxy(t, s) })

	// Last: it stops the manager.
	t.Run("operator-down", func(t *testing.T) {
		up, proxyURL, reg := s.proxied(t, "agent-outage", 12)
		sdk := openai.NewClient(option.WithBaseURL(proxyURL+"/v1/"), option.WithAPIKey("sk-agent-key"), option.WithMaxRetries(0))
		history := agentLoop(t, sdk, agentSystem, "Fix the flaky tests", "tests", false, func(turn int) {
			if turn == 6 {
				testenv.Must(t, s.env.Manager().Stop(5*time.Second))
			}
		})
		reqs := up.requests()
		if len(reqs) != 13 {
			t.Fatalf("%d requests reached the upstream, want 13", len(reqs))
		}
		// From turn 6 on the agent's requests went upstream as it sent them.
		last := reqs[len(reqs)-1]
		if len(last.messages) != len(history)-1 {
			t.Errorf("the last request had %d messages during the outage, want the agent's %d", len(last.messages), len(history)-1)
		}
		if n := counted(t, reg, "openai", "failed_open"); n != 8 {
			t.Errorf("%v requests counted failed_open, want 8", n)
		}
	})
}

// counted is the proxy's request count for protocol and result.
func counted(t *testing.T, reg *prometheus.Registry, protocol, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	testenv.Must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "compaction_proxy_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["protocol"] == protocol && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// toolMessage is the content of the tool result for id in a request the upstream received
// ("" when the view has none).
func toolMessage(r received, id string) (string, bool) {
	for _, m := range r.messages {
		if m["role"] == "tool" && m["tool_call_id"] == id {
			return textOf(m["content"]), true
		}
	}
	return "", false
}

// offloadOnEntry: a 15 KB tool result reaches the upstream as its placeholder on the very
// next request (the proxy's OffloadHook); the agent's tool runs the read-back command the
// placeholder ends with, and what it read reaches the upstream whole on the request after,
// never offloaded again.
func offloadOnEntry(t *testing.T, s *suite) {
	// 16 tool turns: after the read-back the view passes Warn, where compaction offloads
	// the large results of the head.
	up, proxyURL, reg := s.proxied(t, "agent-hook", 16)
	sdk := openai.NewClient(option.WithBaseURL(proxyURL+"/v1/"), option.WithAPIKey("sk-agent-key"), option.WithMaxRetries(0))
	var big strings.Builder
	for i := 0; big.Len() < 15000; i++ {
		fmt.Fprintf(&big, "tests/test_big.py::test_%d FAILED AssertionError: expected %d, got %d\n", i, i, i+1)
	}
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(agentSystem), openai.UserMessage("Fix the big test file"),
	}}
	ids := map[int]string{}
	var readBack string
	for turn := 1; ; turn++ {
		resp, err := sdk.Chat.Completions.New(ctx, params)
		testenv.Must(t, err)
		msg := resp.Choices[0].Message
		params.Messages = append(params.Messages, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			break
		}
		id := msg.ToolCalls[0].ID
		ids[turn] = id
		out := toolOutput("tests", turn)
		switch turn {
		case 1:
			out = big.String()
		case 2:
			// The model read the placeholder and asked for the full result: the agent's
			// tool (a shell) runs the command the placeholder ends with.
			ph, _ := toolMessage(up.requests()[1], ids[1])
			_, cmd, ok := strings.Cut(ph, "read it back with: curl -s '")
			target, _, _ := strings.Cut(cmd, "'")
			if !ok || !strings.HasPrefix(target, proxyURL+proxy.ReadBackPath) {
				t.Fatalf("the placeholder names no read-back command on the proxy:\n%s", ph)
			}
			res, err := http.Get(target)
			testenv.Must(t, err)
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if res.StatusCode != http.StatusOK || !strings.HasSuffix(string(body), big.String()) {
				t.Fatalf("read back: %s %.200q", res.Status, body)
			}
			readBack, out = string(body), string(body)
		}
		params.Messages = append(params.Messages, openai.ToolMessage(out, id))
	}
	reqs := up.requests()
	if len(reqs) != 17 {
		t.Fatalf("%d requests reached the upstream, want 17", len(reqs))
	}
	// The very next request carries the placeholder, not the 15 KB (a line from the middle that is
	// neither in its preview nor among the latest failure lines it shows).
	first, _ := toolMessage(reqs[1], ids[1])
	if !strings.HasPrefix(first, compaction.PlaceholderPrefix) || bytes.Contains(reqs[1].raw, []byte("test_big.py::test_100 ")) {
		t.Fatalf("request 2 carried the 15 KB result:\n%.300s", first)
	}
	// Every later view that shows it shows the same bytes (the provider's cache holds).
	for i, r := range reqs[2:] {
		if got, ok := toolMessage(r, ids[1]); ok && got != first {
			t.Errorf("request %d shows the placeholder as\n%s\nwant\n%s", i+3, got, first)
		}
	}
	// What was read back reaches the upstream whole on the next request.
	if got, ok := toolMessage(reqs[2], ids[2]); !ok || got != readBack || !compaction.IsReadBack(got) {
		t.Errorf("request 3 carried the result read back as %.200q", got)
	}
	conversation := strings.TrimPrefix(reqs[0].promptCacheKey, "compaction-")
	tiers := map[compaction.Tier]int{}
	for _, rec := range s.records(t, "agent-hook", conversation) {
		tiers[rec.Tier]++
		for _, e := range rec.Offloaded {
			if e.ToolCallID == ids[2] {
				t.Errorf("compaction (%s) offloaded the result read back", rec.Tier)
			}
		}
	}
	t.Logf("the conversation's compactions by tier: %v", tiers)
	if tiers[compaction.TierWarn]+tiers[compaction.TierSoft]+tiers[compaction.TierFull] == 0 {
		t.Errorf("no compaction past None (tiers %v): the read-back was never exposed to offload", tiers)
	}
	if n := counted(t, reg, "openai", "compacted"); n != 17 {
		t.Errorf("%v requests counted compacted, want 17", n)
	}
}
