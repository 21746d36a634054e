package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// nodeTurn is one line loop.mjs prints: a turn's response (not streamed) or the chunks or
// events the SDK yielded and the message it accumulated (streamed), or the end of the loop.
type nodeTurn struct {
	Turn     int               `json:"turn"`
	MS       int               `json:"ms"` // the SDK call's duration
	Response json.RawMessage   `json:"response"`
	Events   []json.RawMessage `json:"events"`
	Message  json.RawMessage   `json:"message"`
	Usage    *sdkUsage         `json:"usage"` // aisdk.mjs, streamed: the step's usage as the AI SDK counted it
	Done     bool              `json:"done"`
	Turns    int               `json:"turns"`
	Text     string            `json:"text"`
}

// sdkUsage is a step's usage as the AI SDK reports it, whatever the provider called it.
type sdkUsage struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// nodeTools is bin/node and test/proxy/node, the directory of loop.mjs and aisdk.mjs,
// failing the test (never skipping it) when `make tools` has not installed Node or the npm
// packages.
func nodeTools(t *testing.T) (node, dir string) {
	t.Helper()
	root := testenv.RepoRoot(t)
	node = filepath.Join(root, "bin", "node")
	dir = filepath.Join(root, "test", "proxy", "node")
	for _, need := range []string{node, filepath.Join(dir, "node_modules", "openai", "package.json"),
		filepath.Join(dir, "node_modules", "@anthropic-ai", "sdk", "package.json"),
		filepath.Join(dir, "node_modules", "ai", "package.json")} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("%v: run `make tools` from the repository root: it fetches Node from the npm registry into bin/ and installs test/proxy/node/node_modules with npm ci", err)
		}
	}
	return node, dir
}

// runNode runs a script (loop.mjs, aisdk.mjs) with the pinned Node and returns the lines it printed.
func runNode(t *testing.T, node, script string, env []string, args ...string) []nodeTurn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = filepath.Dir(script)
	// Nothing from the test's environment reaches the SDKs (OPENAI_BASE_URL,
	// ANTHROPIC_API_KEY and the like would change what they send): only env.
	cmd.Env = append([]string{"PATH=" + filepath.Dir(node), "HOME=" + t.TempDir(), "NODE_OPTIONS="}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s %s: %v\nstderr:\n%s\nstdout (last 2 KB):\n%s", filepath.Base(script), strings.Join(args, " "), err, stderr.String(), tail(stdout.Bytes(), 2048))
	}
	elapsed := time.Since(start)
	var out []nodeTurn
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var line nodeTurn
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("%s printed %q: %v", filepath.Base(script), tail(sc.Bytes(), 300), err)
		}
		out = append(out, line)
	}
	testenv.Must(t, sc.Err())
	if len(out) == 0 || !out[len(out)-1].Done {
		t.Fatalf("%s did not print its end; stderr:\n%s", filepath.Base(script), stderr.String())
	}
	slowest, calls := 0, 0
	for _, l := range out {
		slowest, calls = max(slowest, l.MS), calls+l.MS
	}
	if calls == 0 { // aisdk.mjs: the SDK runs the loop, one call
		t.Logf("%s: %d turns in %v", filepath.Base(script), len(out)-1, elapsed.Round(time.Millisecond))
		return out
	}
	t.Logf("%s: %d turns in %v (%d ms in SDK calls, the slowest %d ms)", filepath.Base(script), len(out)-1, elapsed.Round(time.Millisecond), calls, slowest)
	return out
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// sseData is the JSON of every data line of an SSE body but OpenAI's closing [DONE].
func sseData(t *testing.T, body []byte) []any {
	t.Helper()
	var out []any
	for line := range strings.SplitSeq(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		out = append(out, decode(t, []byte(data)))
	}
	return out
}

func decode(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	testenv.Must(t, json.Unmarshal(data, &v))
	return v
}

// sentBodies is everything the upstream sent, in order.
func (u *upstream) sentBodies() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.sent...)
}

// checkReceived: the Node client got, turn by turn, exactly what the upstream sent (the
// parsed response, or every chunk or event of the stream), usage included.
func checkReceived(t *testing.T, turns []nodeTurn, sent [][]byte, streamed bool) {
	t.Helper()
	end := turns[len(turns)-1]
	turns = turns[:len(turns)-1]
	if len(turns) != len(sent) || end.Turns != len(sent) || end.Text != "All tests pass. Done." {
		t.Fatalf("the Node agent saw %d turns (end %+v), the upstream answered %d requests", len(turns), end, len(sent))
	}
	for i, turn := range turns {
		if turn.Turn != i+1 {
			t.Fatalf("line %d is turn %d", i, turn.Turn)
		}
		if !streamed {
			if got, want := decode(t, turn.Response), decode(t, sent[i]); !reflect.DeepEqual(got, want) {
				t.Fatalf("turn %d: the Node agent got\n%s\nthe upstream sent\n%s", turn.Turn, turn.Response, sent[i])
			}
			continue
		}
		want := sseData(t, sent[i])
		got := make([]any, 0, len(turn.Events))
		for _, e := range turn.Events {
			got = append(got, decode(t, e))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("turn %d: the Node agent's stream yielded\n%v\nthe upstream sent\n%s", turn.Turn, got, sent[i])
		}
		wantUsage := streamUsage(want)
		if turn.Usage != nil {
			// The AI SDK counted the tokens the upstream reported, under its own names.
			in, out := wantUsage["prompt_tokens"], wantUsage["completion_tokens"]
			if in == nil {
				in, out = wantUsage["input_tokens"], wantUsage["output_tokens"]
			}
			if got := map[string]any{"input": turn.Usage.Input, "output": turn.Usage.Output}; in == nil || !reflect.DeepEqual(got, map[string]any{"input": in, "output": out}) {
				t.Fatalf("turn %d: the AI SDK counted usage %v, the upstream reported %v", turn.Turn, got, wantUsage)
			}
			continue
		}
		// The SDK's stream helper accumulated the usage the upstream reported.
		var msg struct {
			Usage map[string]any `json:"usage"`
		}
		testenv.Must(t, json.Unmarshal(turn.Message, &msg))
		if !reflect.DeepEqual(pick(msg.Usage, wantUsage), wantUsage) || len(wantUsage) == 0 {
			t.Fatalf("turn %d: the accumulated message's usage %v, the upstream reported %v", turn.Turn, msg.Usage, wantUsage)
		}
	}
}

// streamUsage is the usage a stream reported: OpenAI's usage chunk, or Anthropic's input
// tokens from message_start and output tokens from message_delta.
func streamUsage(events []any) map[string]any {
	usage := map[string]any{}
	for _, e := range events {
		m, _ := e.(map[string]any)
		if u, ok := m["usage"].(map[string]any); ok { // OpenAI's last chunk, Anthropic's message_delta
			for k, v := range u {
				usage[k] = v
			}
		}
		if msg, ok := m["message"].(map[string]any); ok { // Anthropic's message_start
			if u, ok := msg["usage"].(map[string]any); ok {
				usage["input_tokens"] = u["input_tokens"]
			}
		}
	}
	return usage
}

// pick is the entries of m with the keys of like.
func pick(m, like map[string]any) map[string]any {
	out := map[string]any{}
	for k := range like {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// TestNode drives agents written with the official Node SDKs (the openai and
// @anthropic-ai/sdk npm packages: loop.mjs) and with the Vercel AI SDK (ai, @ai-sdk/openai,
// @ai-sdk/anthropic: aisdk.mjs), pinned in test/proxy/node/package-lock.json, unmodified, on
// the Node make tools fetches, through the proxy: the same 60-turn tool loops as TestProxy's
// Go SDK agents.
func TestNode(t *testing.T) {
	node, dir := nodeTools(t)
	s := setUp(t)

	for _, tc := range []struct {
		sdk      string // loop (the official SDKs) or aisdk
		protocol string
		streamed bool
	}{
		{"loop", "openai", false}, {"loop", "openai", true}, {"loop", "anthropic", false}, {"loop", "anthropic", true},
		{"aisdk", "openai", false}, {"aisdk", "openai", true}, {"aisdk", "anthropic", false}, {"aisdk", "anthropic", true},
	} {
		name := "node-" + tc.protocol + "-plain"
		if tc.streamed {
			name = "node-" + tc.protocol + "-streamed"
		}
		if tc.sdk == "aisdk" {
			name = strings.Replace(name, "node-", "aisdk-", 1)
		}
		t.Run(name, func(t *testing.T) {
			up, proxyURL, reg := s.proxied(t, name, 60)
			// The official SDKs send the key as a bearer token (@anthropic-ai/sdk 1.x does
			// too); @ai-sdk/anthropic sends it as x-api-key.
			key, lead := "sk-agent-key", 2
			wantAuth := "Bearer " + key
			if tc.protocol == "anthropic" {
				key, lead = "sk-ant-agent-key", 1
				wantAuth = "Bearer " + key
				if tc.sdk == "aisdk" {
					wantAuth = key
				}
			}
			script := filepath.Join(dir, tc.sdk+".mjs")
			args := []string{"--protocol", tc.protocol,
				"--system", agentSystem, "--task", "Fix the failing test_edge cases in tests/", "--dir", "tests"}
			var env []string
			switch {
			case tc.sdk == "loop":
				args = append(args, "--base-url", proxyURL, "--api-key", key)
			case tc.protocol == "openai":
				// What the injection sets in a pod (docs/agents.md, SDK base URLs).
				env = []string{"OPENAI_BASE_URL=" + proxyURL + "/v1", "OPENAI_API_KEY=" + key}
			default:
				env = []string{"ANTHROPIC_BASE_URL=" + proxyURL, "ANTHROPIC_API_KEY=" + key}
			}
			if tc.streamed {
				args = append(args, "--stream")
			}
			turns := runNode(t, node, script, env, args...)

			reqs := up.requests()
			checkCompacted(t, reqs, lead, wantAuth, tc.protocol == "openai")
			if tc.sdk == "aisdk" && tc.protocol == "openai" {
				// The AI SDK sends a reasoning model's system prompt as a developer message:
				// the engine reads it as the system prompt, and the upstream gets it back.
				for i, r := range reqs {
					if role, _ := r.messages[0]["role"].(string); role != "developer" {
						t.Fatalf("request %d reached the upstream with a first message of role %q, want the SDK's developer", i, role)
					}
				}
			}
			checkReceived(t, turns, up.sentBodies(), tc.streamed)
			s.waitForTiers(t, name, compactionv1alpha1.TierWarn, compactionv1alpha1.TierSoft, compactionv1alpha1.TierFull)
			if n := counted(t, reg, tc.protocol, "compacted"); n != float64(len(reqs)) {
				t.Errorf("%v requests counted compacted, want every one of %d", n, len(reqs))
			}
			checkUsageReached(t, s, name, reqs, tc.protocol)
		})
	}
}

// checkUsageReached: the usage the upstream reported reached the session. The status shows
// the calibrated context usage; for OpenAI the records, found by the conversation the proxy
// names in prompt_cache_key, show the calibration (the upstream counts a token per 3.6
// characters, more than the engine's estimate).
func checkUsageReached(t *testing.T, s *suite, name string, reqs []received, protocol string) {
	t.Helper()
	var got compactionv1alpha1.AgentSession
	testenv.Must(t, s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &got))
	if got.Status.ContextUsage == "" {
		t.Errorf("the session's status has no contextUsage: %+v", got.Status)
	}
	if protocol != "openai" {
		return
	}
	conversation := strings.TrimPrefix(reqs[0].promptCacheKey, "compaction-")
	for _, rec := range s.records(t, name, conversation) {
		if rec.Calibration > 1.05 {
			return
		}
	}
	t.Errorf("no record of conversation %s shows a calibration from the reported usage", conversation)
}
