package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

// anchorsReply is what a well-behaved model answers.
const anchorsReply = `## Anchors
- user_intent: migrate the billing service to Postgres 16
- execution_progress: schema ported, 42 of 50 tests pass
- key_decision: use pgx instead of database/sql for COPY support
- tried_solution: logical replication failed because of missing primary keys
- next_step: fix the 8 failing tests in billing/invoice_test.go

## Summary
The agent works in /srv/billing. Run "go test ./..." to check progress.`

// gotRequest is the part of a chat-completions request the tests look at.
type gotRequest struct {
	Path          string
	Method        string
	Authorization string
	ContentType   string
	Raw           map[string]json.RawMessage
	Model         string `json:"model"`
	MaxTokens     int    `json:"max_tokens"`
	Messages      []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

// readRequest reads and decodes the request body. Reading the whole body also matters for
// the blocking handlers: only then does the server notice the client going away and cancel
// r.Context().
func readRequest(t *testing.T, r *http.Request) gotRequest {
	t.Helper()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("server: read body: %v", err)
	}
	g := gotRequest{
		Path:          r.URL.Path,
		Method:        r.Method,
		Authorization: r.Header.Get("Authorization"),
		ContentType:   r.Header.Get("Content-Type"),
	}
	if err := json.Unmarshal(body, &g); err != nil {
		t.Errorf("server: request is not JSON: %v", err)
	}
	if err := json.Unmarshal(body, &g.Raw); err != nil {
		t.Errorf("server: request is not a JSON object: %v", err)
	}
	return g
}

func writeCompletion(w http.ResponseWriter, content string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id":     "chatcmpl-1",
		"object": "chat.completion",
		"model":  "test-model",
		"choices": []map[string]any{{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": content},
			"finish_reason": "stop",
		}},
	})
}

func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newSummarizer builds a summarizer for srv with fast retries and an explicit key, so tests
// do not depend on the environment.
func newSummarizer(t *testing.T, srv *httptest.Server, mutate func(*Config)) *Summarizer {
	t.Helper()
	cfg := Config{BaseURL: srv.URL, Model: "test-model", APIKey: "sk-test", RetryBackoff: time.Millisecond}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func sampleRequest() compaction.SummaryRequest {
	return compaction.SummaryRequest{
		SessionID: "s1",
		Tier:      compaction.TierFull,
		Messages: []compaction.Message{
			{Role: compaction.RoleUser, Content: "please migrate billing to postgres"},
			{Role: compaction.RoleAssistant, Content: "porting the schema now"},
			{Role: compaction.RoleTool, ToolCallID: "call_7", Content: "42 passed, 8 failed"},
		},
		PreviousSummary: "Earlier the agent inspected the MySQL schema.",
		PreviousAnchors: []compaction.Anchor{{Type: compaction.AnchorUserIntent, Content: "move billing off MySQL"}},
		MaxSummaryChars: 2000,
	}
}

func TestName(t *testing.T) {
	s, err := New(Config{BaseURL: "http://localhost:8000/v1", Model: "m", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "openai" {
		t.Fatalf("Name() = %q", s.Name())
	}
}

func TestSummarizeSuccess(t *testing.T) {
	var got gotRequest
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got = readRequest(t, r)
		writeCompletion(w, anchorsReply)
	})
	temp := 0.2
	s := newSummarizer(t, srv, func(c *Config) {
		c.Temperature = &temp
		c.MaxOutputTokens = 777
	})
	temp = 9 // New must have copied it

	text, err := s.Summarize(context.Background(), sampleRequest())
	if err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	if text != anchorsReply {
		t.Errorf("text = %q, want the assistant content verbatim", text)
	}
	if got.Method != http.MethodPost || got.Path != "/v1/chat/completions" {
		t.Errorf("request = %s %s, want POST /v1/chat/completions", got.Method, got.Path)
	}
	if got.Authorization != "Bearer sk-test" {
		t.Errorf("Authorization = %q", got.Authorization)
	}
	if got.ContentType != "application/json" {
		t.Errorf("Content-Type = %q", got.ContentType)
	}
	if got.Model != "test-model" || got.MaxTokens != 777 {
		t.Errorf("model, max_tokens = %q, %d", got.Model, got.MaxTokens)
	}
	if string(got.Raw["temperature"]) != "0.2" {
		t.Errorf("temperature = %s, want 0.2", got.Raw["temperature"])
	}
	if len(got.Messages) != 2 {
		t.Fatalf("got %d messages, want system + user", len(got.Messages))
	}
	if got.Messages[0].Role != "system" || got.Messages[0].Content != compaction.SummaryInstructions {
		t.Errorf("first message is not the SummaryInstructions system prompt: %+v", got.Messages[0])
	}
	user := got.Messages[1]
	if user.Role != "user" {
		t.Errorf("second message role = %q", user.Role)
	}
	for _, want := range []string{
		"please migrate billing to postgres", "porting the schema now", "call_7", "42 passed, 8 failed",
		"Earlier the agent inspected the MySQL schema.", "move billing off MySQL",
	} {
		if !strings.Contains(user.Content, want) {
			t.Errorf("user prompt lacks %q:\n%s", want, user.Content)
		}
	}
}

func TestSummarizeOmitsUnsetOptionalFields(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	var got gotRequest
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got = readRequest(t, r)
		writeCompletion(w, anchorsReply)
	})
	s := newSummarizer(t, srv, func(c *Config) { c.APIKey = "" })
	if _, err := s.Summarize(context.Background(), sampleRequest()); err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	if _, ok := got.Raw["temperature"]; ok {
		t.Errorf("temperature sent although unset: %s", got.Raw["temperature"])
	}
	if got.MaxTokens != defaultMaxOutputTokens {
		t.Errorf("max_tokens = %d, want default %d", got.MaxTokens, defaultMaxOutputTokens)
	}
	if got.Authorization != "" {
		t.Errorf("Authorization = %q, want none without a key", got.Authorization)
	}
}

// The answer's length bound goes in the field the endpoint accepts, and only there: OpenAI's
// reasoning models refuse max_tokens, and servers that predate max_completion_tokens refuse
// or ignore it. Each server below refuses a request with the other field, as they do.
func TestSummarizeSendsTheConfiguredMaxTokensField(t *testing.T) {
	for _, tc := range []struct {
		field       TokenLimitField
		want, other string
	}{
		{"", "max_tokens", "max_completion_tokens"}, // the default
		{MaxTokens, "max_tokens", "max_completion_tokens"},
		{MaxCompletionTokens, "max_completion_tokens", "max_tokens"},
	} {
		t.Run(string(tc.field), func(t *testing.T) {
			var got gotRequest
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				got = readRequest(t, r)
				if _, ok := got.Raw[tc.other]; ok {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, `{"error":{"message":"Unsupported parameter: '`+tc.other+`'","type":"invalid_request_error"}}`)
					return
				}
				writeCompletion(w, anchorsReply)
			})
			s := newSummarizer(t, srv, func(c *Config) {
				c.MaxTokensField = tc.field
				c.MaxOutputTokens = 777
			})
			if _, err := s.Summarize(context.Background(), sampleRequest()); err != nil {
				t.Fatalf("Summarize: %v", err)
			}
			if v := string(got.Raw[tc.want]); v != "777" {
				t.Errorf("%s = %q, want 777 (request %v)", tc.want, v, got.Raw)
			}
		})
	}
	if _, err := New(Config{BaseURL: "http://h/v1", Model: "m", APIKey: "k", MaxTokensField: "maxTokens"}); err == nil ||
		!strings.Contains(err.Error(), `max tokens field "maxTokens"`) {
		t.Errorf("an unknown field: %v", err)
	}
}

func TestSummarizeOutputParsesIntoFiveAnchors(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		writeCompletion(w, anchorsReply)
	})
	text, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
	if err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	anchors, summary, err := compaction.ParseAnchorsAndSummary(text)
	if err != nil {
		t.Fatalf("ParseAnchorsAndSummary: %v", err)
	}
	if len(anchors) != 5 || compaction.CountAvailable(anchors) != 5 {
		t.Fatalf("anchors = %+v, want five available", anchors)
	}
	for i, typ := range compaction.AnchorTypes {
		if anchors[i].Type != typ {
			t.Errorf("anchor %d type = %s, want %s", i, anchors[i].Type, typ)
		}
	}
	if anchors[3].Content != "logical replication failed because of missing primary keys" {
		t.Errorf("tried_solution = %q", anchors[3].Content)
	}
	if !strings.Contains(summary, "/srv/billing") {
		t.Errorf("summary = %q", summary)
	}
}

func TestBaseURLForms(t *testing.T) {
	var path atomic.Value
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		path.Store(r.URL.Path)
		writeCompletion(w, "ok")
	})
	for _, tc := range []struct{ base, wantPath string }{
		{srv.URL, "/v1/chat/completions"},
		{srv.URL + "/", "/v1/chat/completions"},
		{srv.URL + "/v1", "/v1/chat/completions"},
		{srv.URL + "/v1/", "/v1/chat/completions"},
		{srv.URL + "/proxy/openai", "/proxy/openai/v1/chat/completions"},
		{srv.URL + "/proxy/v1", "/proxy/v1/chat/completions"},
	} {
		t.Run(tc.base, func(t *testing.T) {
			s := newSummarizer(t, srv, func(c *Config) { c.BaseURL = tc.base })
			if _, err := s.Summarize(context.Background(), sampleRequest()); err != nil {
				t.Fatalf("Summarize: %v", err)
			}
			if p := path.Load(); p != tc.wantPath {
				t.Errorf("path = %v, want %s", p, tc.wantPath)
			}
		})
	}
}

// authServer records the Authorization header of the last request.
func authServer(t *testing.T) (*httptest.Server, func() string) {
	var mu sync.Mutex
	var auth string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		mu.Lock()
		auth = r.Header.Get("Authorization")
		mu.Unlock()
		writeCompletion(w, "ok")
	})
	return srv, func() string {
		mu.Lock()
		defer mu.Unlock()
		return auth
	}
}

func TestAPIKeySources(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("  sk-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-from-default-env")
	t.Setenv("MY_LLM_KEY", "sk-from-custom-env")

	srv, lastAuth := authServer(t)
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"explicit key wins", func(c *Config) { c.APIKey = "sk-explicit"; c.APIKeyFile = keyFile }, "Bearer sk-explicit"},
		{"file, trimmed", func(c *Config) { c.APIKey = ""; c.APIKeyFile = keyFile; c.APIKeyEnv = "MY_LLM_KEY" }, "Bearer sk-from-file"},
		{"default env", func(c *Config) { c.APIKey = "" }, "Bearer sk-from-default-env"},
		{"custom env", func(c *Config) { c.APIKey = ""; c.APIKeyEnv = "MY_LLM_KEY" }, "Bearer sk-from-custom-env"},
		{"unset env means no key", func(c *Config) { c.APIKey = ""; c.APIKeyEnv = "UNSET_LLM_KEY_FOR_TEST" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSummarizer(t, srv, tc.cfg)
			if _, err := s.Summarize(context.Background(), sampleRequest()); err != nil {
				t.Fatalf("Summarize: %v", err)
			}
			if got := lastAuth(); got != tc.want {
				t.Errorf("Authorization = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewValidation(t *testing.T) {
	emptyFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(emptyFile, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	neg := -1.0
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"empty base URL", Config{Model: "m"}, "base URL is required"},
		{"bad scheme", Config{BaseURL: "ftp://host/v1", Model: "m"}, "http or https"},
		{"no scheme", Config{BaseURL: "localhost:8000", Model: "m"}, "http or https"},
		{"no host", Config{BaseURL: "http:///v1", Model: "m"}, "missing host"},
		{"query", Config{BaseURL: "http://h/v1?x=1", Model: "m"}, "query"},
		{"unparsable", Config{BaseURL: "http://h:bad port/", Model: "m"}, "invalid base URL"},
		{"no model", Config{BaseURL: "http://h/v1", Model: "  "}, "model is required"},
		{"missing key file", Config{BaseURL: "http://h/v1", Model: "m", APIKeyFile: "/nonexistent/key"}, "read API key file"},
		{"empty key file", Config{BaseURL: "http://h/v1", Model: "m", APIKeyFile: emptyFile}, "is empty"},
		{"control chars in key", Config{BaseURL: "http://h/v1", Model: "m", APIKey: "sk\r\nX-Evil: 1"}, "control characters"},
		{"negative timeout", Config{BaseURL: "http://h/v1", Model: "m", APIKey: "k", Timeout: -time.Second}, "timeout"},
		{"negative backoff", Config{BaseURL: "http://h/v1", Model: "m", APIKey: "k", RetryBackoff: -1}, "backoff"},
		{"negative max tokens", Config{BaseURL: "http://h/v1", Model: "m", APIKey: "k", MaxOutputTokens: -1}, "max output tokens"},
		{"negative input chars", Config{BaseURL: "http://h/v1", Model: "m", APIKey: "k", MaxInputChars: -1}, "max input chars"},
		{"negative temperature", Config{BaseURL: "http://h/v1", Model: "m", APIKey: "k", Temperature: &neg}, "temperature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error = %v, want one containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "X-Evil") {
				t.Errorf("error leaks the API key: %v", err)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	s, err := New(Config{BaseURL: "https://api.example.com", Model: " gpt ", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if s.endpoint != "https://api.example.com/v1/chat/completions" || s.model != "gpt" {
		t.Errorf("endpoint, model = %q, %q", s.endpoint, s.model)
	}
	if s.timeout != defaultTimeout || s.maxRetries != defaultMaxRetries || s.retryBackoff != defaultRetryBackoff ||
		s.maxOutputTokens != defaultMaxOutputTokens || s.maxInputChars != defaultMaxInputChars || s.client == nil {
		t.Errorf("defaults not applied: %+v", s)
	}
	s, err = New(Config{BaseURL: "https://api.example.com", Model: "gpt", APIKey: "k", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if s.maxRetries != 0 {
		t.Errorf("MaxRetries -1 gave %d retries, want 0", s.maxRetries)
	}
}

func TestErrorBodySnippetIsBounded(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "<html>\n\x1b[31m"+strings.Repeat("x", 100000)+"</html>")
	})
	_, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
	if err == nil {
		t.Fatal("Summarize succeeded")
	}
	msg := err.Error()
	if len(msg) > 1000 || strings.ContainsAny(msg, "\n\x1b") {
		t.Errorf("error message not bounded/cleaned (%d bytes): %.200q", len(msg), msg)
	}
	if !strings.Contains(msg, "401") {
		t.Errorf("error %q lacks the status", msg)
	}
}

// TestBadResponses covers 200 answers that carry no usable summary. None is retried.
func TestBadResponses(t *testing.T) {
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"garbage body", "<html>502 Bad Gateway</html>", "garbage output"},
		{"truncated JSON", `{"choices":[{"message":{"content":"abc`, "garbage output"},
		{"JSON array", `[1,2,3]`, "garbage output"},
		{"content is a number", `{"choices":[{"message":{"content":42}}]}`, "garbage output"},
		{"empty choices", `{"choices":[]}`, "empty choices"},
		{"no choices field", `{"id":"x"}`, "empty choices"},
		{"error object in 200", `{"error":{"message":"model not loaded"}}`, "model not loaded"},
		{"null content", `{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}`, "empty content"},
		{"blank content", `{"choices":[{"message":{"role":"assistant","content":"  \n"}}]}`, "empty content"},
		{"reasoning only", `{"choices":[{"message":{"role":"assistant","content":"","reasoning_content":"Let me think... user_intent: secret"},"finish_reason":"length"}]}`, "empty content: the model produced only reasoning"},
		{"refusal", `{"choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't help"}}]}`, "refused"},
		{"invalid UTF-8 bytes", "{\"choices\":[{\"message\":{\"content\":\"bad \xff\xfe byte\"}}]}", "not valid UTF-8"},
		{"lone surrogate escape", `{"choices":[{"message":{"content":"bad \ud800 escape"}}]}`, "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				readRequest(t, r)
				attempts.Add(1)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, tc.body)
			})
			text, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Summarize = %q, %v; want error containing %q", text, err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error leaks reasoning content: %v", err)
			}
			if n := attempts.Load(); n != 1 {
				t.Errorf("attempts = %d, want 1", n)
			}
		})
	}
}

func TestContentVariantsAccepted(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"escaped replacement char is legitimate", `{"choices":[{"message":{"content":"a \ufffd b"}}]}`, "a \uFFFD b"},
		{"literal replacement char is legitimate", `{"choices":[{"message":{"content":"a ` + "\uFFFD" + ` b"}}]}`, "a \uFFFD b"},
		{"surrogate pair", `{"choices":[{"message":{"content":"ok \ud83d\ude00"}}]}`, "ok 😀"},
		{"array of text parts", `{"choices":[{"message":{"content":[{"type":"text","text":"part one, "},{"type":"text","text":"part two"}]}}]}`, "part one, part two"},
		{"reasoning ignored when content present", `{"choices":[{"message":{"content":"the summary","reasoning_content":"thinking"}}]}`, "the summary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				readRequest(t, r)
				fmt.Fprint(w, tc.body)
			})
			text, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
			if err != nil || text != tc.want {
				t.Fatalf("Summarize = %q, %v; want %q", text, err, tc.want)
			}
		})
	}
}

func TestOversizedResponseIsRejected(t *testing.T) {
	for _, withLength := range []bool{true, false} {
		t.Run(fmt.Sprintf("content-length=%v", withLength), func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				readRequest(t, r)
				big := strings.Repeat("a", maxResponseBytes+1024)
				body := `{"choices":[{"message":{"content":"` + big + `"}}]}`
				if withLength {
					w.Header().Set("Content-Length", fmt.Sprint(len(body)))
				}
				// Without Content-Length and flushed, the response is chunked and the limit
				// has to be enforced while reading.
				if !withLength {
					w.(http.Flusher).Flush()
				}
				_, _ = io.WriteString(w, body)
			})
			_, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
			if err == nil || !strings.Contains(err.Error(), "4 MiB limit") {
				t.Fatalf("error = %v, want the size limit", err)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		g := readRequest(t, r)
		writeCompletion(w, "summary for "+g.Model)
	})
	s := newSummarizer(t, srv, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			text, err := s.Summarize(context.Background(), sampleRequest())
			if err != nil || text != "summary for test-model" {
				t.Errorf("Summarize = %q, %v", text, err)
			}
		})
	}
	wg.Wait()
}

func TestCountReplacementChars(t *testing.T) {
	for in, want := range map[string]int{
		`"plain"`:                       0,
		`"\ufffd"`:                      1,
		`"\uFFFD and ` + "\uFFFD" + `"`: 2,
		`"\\ufffd"`:                     0, // an escaped backslash followed by the letters ufffd
		`"\\\ufffd"`:                    1,
	} {
		if got := countReplacementChars([]byte(in)); got != want {
			t.Errorf("countReplacementChars(%s) = %d, want %d", in, got, want)
		}
	}
}

// TestSummarizeWithUsage: the tokens the server reports come back with the summary; a
// missing or malformed usage is zero and never an error, and Summarize returns the same text.
func TestSummarizeWithUsage(t *testing.T) {
	const choices = `"choices":[{"index":0,"message":{"role":"assistant","content":"the summary"},"finish_reason":"stop"}]`
	for _, tc := range []struct {
		name  string
		usage string // the "usage" member, empty for none
		want  compaction.SummaryUsage
	}{
		{"present", `"usage":{"prompt_tokens":1234,"completion_tokens":56,"total_tokens":1290}`, compaction.SummaryUsage{InputTokens: 1234, OutputTokens: 56}},
		{"with details", `"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}`, compaction.SummaryUsage{InputTokens: 10, OutputTokens: 2}},
		{"absent", ``, compaction.SummaryUsage{}},
		{"null", `"usage":null`, compaction.SummaryUsage{}},
		{"empty object", `"usage":{}`, compaction.SummaryUsage{}},
		{"only prompt tokens", `"usage":{"prompt_tokens":99}`, compaction.SummaryUsage{InputTokens: 99}},
		{"zero", `"usage":{"prompt_tokens":0,"completion_tokens":0}`, compaction.SummaryUsage{}},
		{"negative", `"usage":{"prompt_tokens":-5,"completion_tokens":-1}`, compaction.SummaryUsage{}},
		{"one negative", `"usage":{"prompt_tokens":40,"completion_tokens":-1}`, compaction.SummaryUsage{InputTokens: 40}},
		{"strings", `"usage":{"prompt_tokens":"12","completion_tokens":"3"}`, compaction.SummaryUsage{}},
		{"fractions", `"usage":{"prompt_tokens":12.5,"completion_tokens":1e3}`, compaction.SummaryUsage{}},
		{"too large", `"usage":{"prompt_tokens":2147483648,"completion_tokens":99999999999999999999999}`, compaction.SummaryUsage{}},
		{"largest", `"usage":{"prompt_tokens":2147483647,"completion_tokens":1}`, compaction.SummaryUsage{InputTokens: 2147483647, OutputTokens: 1}},
		{"usage is a string", `"usage":"lots"`, compaction.SummaryUsage{}},
		{"usage is an array", `"usage":[1,2]`, compaction.SummaryUsage{}},
		{"counts are objects", `"usage":{"prompt_tokens":{"n":1},"completion_tokens":[2]}`, compaction.SummaryUsage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"id":"chatcmpl-1","object":"chat.completion",` + choices
			if tc.usage != "" {
				body += "," + tc.usage
			}
			body += "}"
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				readRequest(t, r)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, body)
			})
			s := newSummarizer(t, srv, nil)
			text, usage, err := s.SummarizeWithUsage(context.Background(), sampleRequest())
			if err != nil || text != "the summary" {
				t.Fatalf("SummarizeWithUsage = %q, %v; want the summary and no error", text, err)
			}
			if usage != tc.want {
				t.Errorf("usage = %+v, want %+v", usage, tc.want)
			}
			if text, err := s.Summarize(context.Background(), sampleRequest()); err != nil || text != "the summary" {
				t.Errorf("Summarize = %q, %v; want the summary", text, err)
			}
		})
	}
}

// TestSummarizeWithUsageCountsTheSuccessfulAttempt: after a retried 503, the usage is the
// answer's; a failed call reports no usage.
func TestSummarizeWithUsageCountsTheSuccessfulAttempt(t *testing.T) {
	var calls atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"message":"overloaded"},"usage":{"prompt_tokens":7,"completion_tokens":7}}`)
			return
		}
		fmt.Fprint(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":300,"completion_tokens":20}}`)
	})
	text, usage, err := newSummarizer(t, srv, nil).SummarizeWithUsage(context.Background(), sampleRequest())
	if err != nil || text != "ok" {
		t.Fatalf("SummarizeWithUsage = %q, %v", text, err)
	}
	if want := (compaction.SummaryUsage{InputTokens: 300, OutputTokens: 20}); usage != want {
		t.Errorf("usage = %+v, want %+v", usage, want)
	}

	failing := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"bad"},"usage":{"prompt_tokens":7,"completion_tokens":7}}`)
	})
	_, usage, err = newSummarizer(t, failing, nil).SummarizeWithUsage(context.Background(), sampleRequest())
	if err == nil || usage != (compaction.SummaryUsage{}) {
		t.Errorf("failed call: usage %+v, error %v; want zero usage and an error", usage, err)
	}
	// A garbage body with a usage member is still garbage.
	garbage := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		fmt.Fprint(w, `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":7}}`)
	})
	_, usage, err = newSummarizer(t, garbage, nil).SummarizeWithUsage(context.Background(), sampleRequest())
	if err == nil || !strings.Contains(err.Error(), "empty choices") || usage != (compaction.SummaryUsage{}) {
		t.Errorf("empty choices: usage %+v, error %v; want zero usage and the empty choices error", usage, err)
	}
}
