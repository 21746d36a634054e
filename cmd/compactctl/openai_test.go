package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

const fakeSummary = `## Anchors
- user_intent: fix the flaky TestEviction in pkg/cache without changing the public API
- execution_progress: read file_0.go to file_9.go; the race is in Evict
- key_decision: guard the eviction list with the cache mutex instead of a channel
- tried_solution: a sync.Map rewrite failed because iteration order broke LRU semantics
- next_step: run go test -race ./pkg/cache and commit

## Summary
The agent inspected the cache package file by file and located a data race in Evict.`

// fakeLLM is an OpenAI-compatible /v1/chat/completions endpoint that answers every request
// with reply (or fails with status when it is set).
type fakeLLM struct {
	t      *testing.T
	key    string
	model  string
	status int
	// tokensField is the only length bound the endpoint accepts, max_tokens or
	// max_completion_tokens (OpenAI's reasoning models refuse max_tokens).
	tokensField string
	calls       atomic.Int64
	bad         atomic.Value // first protocol problem seen, as a string
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	complain := func(msg string) {
		f.bad.CompareAndSwap(nil, msg)
		http.Error(w, msg, http.StatusBadRequest)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		complain("unexpected " + r.Method + " " + r.URL.Path)
		return
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+f.key {
		complain("Authorization " + got)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens           *int `json:"max_tokens"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		complain("bad body: " + err.Error())
		return
	}
	bound, other := req.MaxTokens, req.MaxCompletionTokens
	if f.tokensField == "max_completion_tokens" {
		bound, other = other, bound
	}
	if other != nil || bound == nil || *bound != 777 {
		complain("unexpected length bound: want only " + f.tokensField + " 777")
		return
	}
	if req.Model != f.model || len(req.Messages) != 2 || req.Messages[0].Role != "system" ||
		!strings.Contains(req.Messages[1].Content, "TestEviction") {
		complain("unexpected request: model " + req.Model)
		return
	}
	if f.status != 0 {
		http.Error(w, `{"error":{"message":"overloaded"}}`, f.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "model": f.model,
		"choices": []map[string]any{{
			"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": fakeSummary},
		}},
	})
}

func (f *fakeLLM) check() {
	f.t.Helper()
	if v := f.bad.Load(); v != nil {
		f.t.Fatalf("the summarizer sent a bad request: %s", v)
	}
}

func startFakeLLM(t *testing.T, status int) (*fakeLLM, string, string) {
	t.Helper()
	return startFakeLLMWithField(t, status, "max_tokens")
}

// startFakeLLMWithField starts a fake LLM that accepts only tokensField as the length bound.
func startFakeLLMWithField(t *testing.T, status int, tokensField string) (*fakeLLM, string, string) {
	t.Helper()
	f := &fakeLLM{t: t, key: "sk-test-123", model: "test-model", status: status, tokensField: tokensField}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(f.key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f, srv.URL, keyFile
}

func openaiArgs(url, keyFile string) []string {
	return []string{"--summarizer", "openai", "--openai-base-url", url, "--openai-model", "test-model",
		"--openai-api-key-file", keyFile, "--openai-timeout", "10s", "--openai-max-output-tokens", "777"}
}

func TestCompactWithOpenAISummarizer(t *testing.T) {
	t.Parallel()
	llm, url, keyFile := startFakeLLM(t, 0)
	msgs := genTranscript(genOptions{rounds: 10, bigResult: 6000})
	out, _ := compactAt(t, msgs, 0.87, openaiArgs(url, keyFile)...)
	llm.check()
	if llm.calls.Load() != 1 {
		t.Fatalf("the LLM was called %d times, want 1", llm.calls.Load())
	}
	rec := out.Record
	if rec.Tier != compaction.TierFull || rec.Error != "" {
		t.Fatalf("tier %s, error %q; want Full without error", rec.Tier, rec.Error)
	}
	if n := compaction.CountAvailable(rec.Anchors); n != 5 {
		t.Fatalf("record has %d anchors, want 5: %+v", n, rec.Anchors)
	}
	if !strings.Contains(rec.SummaryText, "data race in Evict") {
		t.Errorf("summary text %q is not the LLM's", rec.SummaryText)
	}
	if msg := out.Messages[2].Content; !strings.Contains(msg, "guard the eviction list with the cache mutex") {
		t.Errorf("compaction message lacks the LLM's anchors:\n%s", msg)
	}
}

// --openai-max-tokens-field max_completion_tokens reaches an endpoint that refuses max_tokens,
// as OpenAI's reasoning models do; the default, max_tokens, does not.
func TestOpenAIMaxTokensField(t *testing.T) {
	t.Parallel()
	msgs := genTranscript(genOptions{rounds: 10, bigResult: 6000})
	llm, url, keyFile := startFakeLLMWithField(t, 0, "max_completion_tokens")
	out, _ := compactAt(t, msgs, 0.87, append(openaiArgs(url, keyFile), "--openai-max-tokens-field", "max_completion_tokens")...)
	llm.check()
	if out.Record.Error != "" || llm.calls.Load() != 1 {
		t.Fatalf("%d calls, record error %q; want one call that succeeded", llm.calls.Load(), out.Record.Error)
	}

	refusing, url, keyFile := startFakeLLMWithField(t, 0, "max_completion_tokens")
	out, _ = compactAt(t, msgs, 0.87, append(openaiArgs(url, keyFile), "--openai-max-retries", "0")...)
	if out.Record.Error == "" || refusing.calls.Load() != 1 {
		t.Errorf("max_tokens to an endpoint that refuses it: %d calls, record error %q; want a refused call", refusing.calls.Load(), out.Record.Error)
	}

	dir := t.TempDir()
	path := writeTranscript(t, dir, "t.jsonl", msgs)
	r := runCLI(t, "", append([]string{"compact", "--store", ""}, append(openaiArgs(url, keyFile), "--openai-max-tokens-field", "maxTokens", path)...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, `max tokens field "maxTokens"`) {
		t.Errorf("an unknown field: %v", r)
	}
}

// A failing LLM makes the engine fall back (spec 6.1); simulate counts the failures.
func TestSimulateCountsSummarizerErrors(t *testing.T) {
	t.Parallel()
	llm, url, keyFile := startFakeLLM(t, http.StatusBadGateway)
	dir := t.TempDir()
	msgs := genTranscript(genOptions{rounds: 20})
	path := writeTranscript(t, dir, "t.jsonl", msgs)
	args := append([]string{"simulate", "--store", "", "--context-window", strconv.Itoa(lastTurnWindow(msgs, 0.9)), "--openai-max-retries", "0"},
		openaiArgs(url, keyFile)...)
	r := runCLI(t, "", append(args, path)...)
	if r.code != exitOK {
		t.Fatalf("simulate: %v", r)
	}
	llm.check()
	calls := llm.calls.Load()
	if calls == 0 {
		t.Fatalf("the LLM was never called:\n%s", r.stdout)
	}
	m := regexp.MustCompile(`summarizer: +([0-9]+) calls, ([0-9]+) errors`).FindStringSubmatch(r.stdout)
	if m == nil || m[1] != strconv.FormatInt(calls, 10) || m[2] != m[1] {
		t.Fatalf("summary does not report %d calls and as many errors:\n%s", calls, r.stdout)
	}
	if !strings.Contains(r.stdout, "fell back to budget truncation") {
		t.Errorf("no notification shows the fallback:\n%s", r.stdout)
	}
}
