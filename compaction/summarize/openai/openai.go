// Package openai is a compaction.Summarizer backed by any OpenAI-compatible
// /v1/chat/completions endpoint: OpenAI itself, vLLM, Ollama, LiteLLM and similar servers.
// It is a compaction.ResultSummarizer: its answers carry the prompt and completion tokens
// the server reported, so compaction records count the summarizer's cost.
//
// It uses only the standard library so that embedding the compactor does not pull in a
// vendor SDK. The summarizer is one step of a fail-open pipeline (spec section 6.1: when the
// LLM call fails the engine falls back to truncation), so it prefers failing quickly with a
// precise error over waiting a long time or returning doubtful output.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/harness9/compaction-operator/compaction"
)

const (
	defaultAPIKeyEnv       = "OPENAI_API_KEY"
	defaultTimeout         = 60 * time.Second
	defaultMaxRetries      = 2
	defaultRetryBackoff    = 500 * time.Millisecond
	defaultMaxOutputTokens = 1024
	defaultMaxInputChars   = 120000

	// maxBackoff caps the exponential backoff, so a large MaxRetries cannot produce waits
	// longer than a compaction is worth.
	maxBackoff = 30 * time.Second

	// maxRetryAfter is the longest Retry-After this summarizer honours. Compaction has a
	// fallback, so waiting minutes for a rate limit to clear is worse than failing now.
	maxRetryAfter = 60 * time.Second

	// maxResponseBytes bounds how much of a successful response is read. A summary is a few
	// KiB; the bound only exists so a broken or hostile server cannot exhaust memory.
	maxResponseBytes = 4 << 20

	// maxErrorBodyBytes bounds how much of an error response is read: only a snippet of it
	// ends up in the error, so there is no reason to read more.
	maxErrorBodyBytes = 64 << 10

	// maxErrorSnippet bounds the server text quoted in an error, so errors stay loggable.
	maxErrorSnippet = 512
)

// Config configures a Summarizer. Zero values select the documented defaults.
type Config struct {
	// BaseURL is the API root, for example "http://localhost:8000/v1" (vLLM),
	// "http://localhost:11434/v1" (Ollama) or "https://api.openai.com/v1". The rule is: after
	// trailing slashes are removed, if the path does not end in "/v1", "/v1" is appended;
	// then "/chat/completions" is appended. So "http://host:8000" and "http://host:8000/v1/"
	// both reach "http://host:8000/v1/chat/completions". It must be an http or https URL
	// without query or fragment.
	BaseURL string

	// Model is the model name sent in every request. Required.
	Model string

	// APIKey is sent as "Authorization: Bearer APIKey". It takes precedence over APIKeyFile
	// and APIKeyEnv.
	APIKey string

	// APIKeyFile is a file holding the API key (for example a mounted Kubernetes Secret). It
	// is read once, by New, and surrounding whitespace is trimmed; an empty file is an error.
	// Used when APIKey is empty.
	APIKeyFile string

	// APIKeyEnv names the environment variable holding the API key, read by New when APIKey
	// and APIKeyFile are both empty. Default "OPENAI_API_KEY". When the variable is unset or
	// empty no Authorization header is sent, which is what local servers expect.
	APIKeyEnv string

	// Timeout bounds one attempt, from sending the request to reading the whole response.
	// Default 60s. The caller's context bounds the whole call, retries included.
	Timeout time.Duration

	// MaxRetries is how many times a failed attempt is retried (network error, timeout, 429,
	// 5xx). Default 2, so up to three attempts; a negative value disables retries.
	MaxRetries int

	// RetryBackoff is the delay before the first retry. It doubles for every further retry,
	// is capped at 30s and jittered. Default 500ms. A Retry-After header replaces it.
	RetryBackoff time.Duration

	// MaxOutputTokens bounds the length of the answer, sent in the field MaxTokensField
	// names. Default 1024.
	MaxOutputTokens int

	// MaxTokensField is the request field MaxOutputTokens is sent in. Default MaxTokens, which
	// every OpenAI-compatible server reads; OpenAI's reasoning models refuse it and want
	// MaxCompletionTokens.
	MaxTokensField TokenLimitField

	// MaxInputChars bounds the user prompt, see compaction.BuildSummaryPrompt. Default 120000.
	MaxInputChars int

	// Temperature is sent when set; otherwise the server's default applies.
	Temperature *float64

	// HTTPClient sends the requests. Default: a client using http.DefaultTransport. Its own
	// Timeout, if any, applies in addition to Config.Timeout.
	HTTPClient *http.Client

	// QuietErrors keeps every text of the server's answers out of errors: a status code or a
	// fixed description only. Set it when whoever chooses BaseURL is not whoever reads the
	// errors (the operator: a policy's author picks the endpoint, and errors reach records,
	// events and API answers, so an endpoint pointed at an internal service could be read
	// through them).
	QuietErrors bool
}

// TokenLimitField is the chat-completions request field that bounds the answer's length.
type TokenLimitField string

const (
	// MaxTokens is "max_tokens", the field vLLM, Ollama, llama.cpp, LiteLLM and OpenAI's
	// non-reasoning models read (OpenAI has deprecated it, but still accepts it there).
	MaxTokens TokenLimitField = "max_tokens"
	// MaxCompletionTokens is "max_completion_tokens", the only one OpenAI's reasoning models
	// (o1, o3, o4-mini, gpt-5) accept; servers that do not know it ignore it or refuse the
	// request.
	MaxCompletionTokens TokenLimitField = "max_completion_tokens"
)

// Summarizer calls an OpenAI-compatible chat-completions endpoint to produce the anchors
// and summary text that compaction.ParseAnchorsAndSummary reads. It is immutable after New
// and safe for concurrent use.
type Summarizer struct {
	endpoint        string
	model           string
	apiKey          string
	timeout         time.Duration
	maxRetries      int
	retryBackoff    time.Duration
	maxOutputTokens int
	maxTokensField  TokenLimitField
	maxInputChars   int
	temperature     *float64 // a private copy, so the caller cannot change it under us
	client          *http.Client
	quiet           bool
}

var _ compaction.ResultSummarizer = (*Summarizer)(nil)

// New validates cfg, applies the defaults and resolves the API key.
func New(cfg Config) (*Summarizer, error) {
	endpoint, err := chatCompletionsURL(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("openai summarizer: %w", err)
	}
	model := strings.TrimSpace(cfg.Model)
	if model == "" {
		return nil, errors.New("openai summarizer: model is required")
	}
	key, err := resolveAPIKey(cfg)
	if err != nil {
		return nil, fmt.Errorf("openai summarizer: %w", err)
	}
	switch {
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("openai summarizer: timeout must not be negative, got %s", cfg.Timeout)
	case cfg.RetryBackoff < 0:
		return nil, fmt.Errorf("openai summarizer: retry backoff must not be negative, got %s", cfg.RetryBackoff)
	case cfg.MaxOutputTokens < 0:
		return nil, fmt.Errorf("openai summarizer: max output tokens must not be negative, got %d", cfg.MaxOutputTokens)
	case cfg.MaxInputChars < 0:
		return nil, fmt.Errorf("openai summarizer: max input chars must not be negative, got %d", cfg.MaxInputChars)
	}
	field := cfg.MaxTokensField
	switch field {
	case "":
		field = MaxTokens
	case MaxTokens, MaxCompletionTokens:
	default:
		return nil, fmt.Errorf("openai summarizer: max tokens field %q must be %s or %s", field, MaxTokens, MaxCompletionTokens)
	}
	s := &Summarizer{
		endpoint:        endpoint,
		model:           model,
		apiKey:          key,
		timeout:         orDefault(cfg.Timeout, defaultTimeout),
		maxRetries:      cfg.MaxRetries,
		retryBackoff:    orDefault(cfg.RetryBackoff, defaultRetryBackoff),
		maxOutputTokens: orDefault(cfg.MaxOutputTokens, defaultMaxOutputTokens),
		maxTokensField:  field,
		maxInputChars:   orDefault(cfg.MaxInputChars, defaultMaxInputChars),
		client:          cfg.HTTPClient,
		quiet:           cfg.QuietErrors,
	}
	switch {
	case cfg.MaxRetries == 0:
		s.maxRetries = defaultMaxRetries
	case cfg.MaxRetries < 0:
		s.maxRetries = 0
	}
	if cfg.Temperature != nil {
		t := *cfg.Temperature
		// JSON cannot encode NaN or infinities, and no server accepts a negative temperature.
		if math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			return nil, fmt.Errorf("openai summarizer: temperature must be a non-negative number, got %v", t)
		}
		s.temperature = &t
	}
	if s.client == nil {
		// Not http.DefaultClient: callers may mutate that one. Per-attempt deadlines come
		// from the context, so the client itself has no Timeout.
		s.client = &http.Client{}
	}
	return s, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// chatCompletionsURL applies the BaseURL rule documented on Config.
func chatCompletionsURL(base string) (string, error) {
	raw := strings.TrimSpace(base)
	if raw == "" {
		return "", errors.New("base URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("base URL %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return "", fmt.Errorf("base URL %q: missing host", u.Redacted())
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", fmt.Errorf("base URL %q: must not have a query or fragment", u.Redacted())
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p + "/chat/completions"
	u.RawPath = "" // let url re-escape the path we built
	return u.String(), nil
}

// resolveAPIKey picks the key by the precedence documented on Config.
func resolveAPIKey(cfg Config) (string, error) {
	var key string
	switch {
	case strings.TrimSpace(cfg.APIKey) != "":
		key = strings.TrimSpace(cfg.APIKey)
	case cfg.APIKeyFile != "":
		b, err := os.ReadFile(cfg.APIKeyFile)
		if err != nil {
			return "", fmt.Errorf("read API key file: %w", err)
		}
		key = strings.TrimSpace(string(b))
		if key == "" {
			// A key file that was configured but is empty is a deployment mistake; sending no
			// key would only surface later as a confusing 401.
			return "", fmt.Errorf("API key file %s is empty", cfg.APIKeyFile)
		}
	default:
		env := cfg.APIKeyEnv
		if env == "" {
			env = defaultAPIKeyEnv
		}
		key = strings.TrimSpace(os.Getenv(env))
	}
	// Control characters would make the header invalid; the key itself is never quoted in
	// errors.
	if strings.ContainsFunc(key, unicode.IsControl) {
		return "", errors.New("API key contains control characters")
	}
	return key, nil
}

// Name identifies the summarizer in records and logs.
func (s *Summarizer) Name() string { return "openai" }

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatRequest is a chat-completions request; exactly one of the two length bounds is set
// (the output bound is always at least 1), so the other is omitted.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	MaxTokens           int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens int           `json:"max_completion_tokens,omitempty"`
	Temperature         *float64      `json:"temperature,omitempty"`
}

// Summarize asks the model for the anchors-plus-summary text of req and returns the raw
// assistant text. Network errors, per-attempt timeouts, 429 and 5xx are retried; other
// errors, and the caller's context ending, end the call at once.
func (s *Summarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	text, _, err := s.SummarizeWithUsage(ctx, req)
	return text, err
}

// SummarizeResult is SummarizeWithUsage as the engine calls it: the text, parsed by the
// engine, and the tokens the server reported.
func (s *Summarizer) SummarizeResult(ctx context.Context, req compaction.SummaryRequest) (compaction.SummaryResult, error) {
	text, usage, err := s.SummarizeWithUsage(ctx, req)
	return compaction.SummaryResult{Text: text, Usage: usage}, err
}

// SummarizeWithUsage is Summarize that also returns the tokens the server reported for the
// successful attempt: usage.prompt_tokens and usage.completion_tokens of the chat completion.
// A count the server did not send, or sent as anything but a non-negative integer below
// 2^31, is 0; it never fails the call. Failed attempts are not counted.
func (s *Summarizer) SummarizeWithUsage(ctx context.Context, req compaction.SummaryRequest) (string, compaction.SummaryUsage, error) {
	var none compaction.SummaryUsage
	chat := chatRequest{
		Model: s.model,
		Messages: []chatMessage{
			{Role: "system", Content: compaction.SummaryInstructions},
			{Role: "user", Content: compaction.BuildSummaryPrompt(req, s.maxInputChars)},
		},
		Temperature: s.temperature,
	}
	if s.maxTokensField == MaxCompletionTokens {
		chat.MaxCompletionTokens = s.maxOutputTokens
	} else {
		chat.MaxTokens = s.maxOutputTokens
	}
	body, err := json.Marshal(chat)
	if err != nil {
		return "", none, fmt.Errorf("openai summarizer: encode request: %w", err)
	}
	attempts := s.maxRetries + 1
	for attempt := 1; ; attempt++ {
		if cerr := ctx.Err(); cerr != nil {
			return "", none, fmt.Errorf("openai summarizer: model %q: before attempt %d of %d: %w", s.model, attempt, attempts, cerr)
		}
		text, usage, err := s.attempt(ctx, body)
		if err == nil {
			return text, usage, nil
		}
		err = fmt.Errorf("openai summarizer: model %q: attempt %d of %d: %w", s.model, attempt, attempts, err)
		if cerr := ctx.Err(); cerr != nil {
			// The caller gave up; make sure errors.Is(err, ctx.Err()) holds whatever the
			// transport reported.
			return "", none, withCause(cerr, err)
		}
		var re *retryableError
		if !errors.As(err, &re) || attempt >= attempts {
			return "", none, err
		}
		wait := s.backoff(attempt)
		if re.hasRetryAfter {
			if re.retryAfter > maxRetryAfter {
				return "", none, fmt.Errorf("%w (not retrying: server asked to wait %s, more than the %s limit)", err, re.retryAfter, maxRetryAfter)
			}
			wait = re.retryAfter
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= wait {
			return "", none, fmt.Errorf("%w (not retrying: waiting %s would pass the context deadline)", err, wait.Round(time.Millisecond))
		}
		if werr := sleep(ctx, wait); werr != nil {
			return "", none, fmt.Errorf("openai summarizer: %w while waiting to retry (last error: %w)", werr, err)
		}
	}
}

// attempt sends one request, bounded by the per-attempt timeout, and decodes the answer.
// Errors worth retrying are wrapped in *retryableError.
func (s *Summarizer) attempt(ctx context.Context, body []byte) (string, compaction.SummaryUsage, error) {
	var none compaction.SummaryUsage
	attemptCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(attemptCtx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return "", none, fmt.Errorf("build request: %w", err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	if s.apiKey != "" {
		httpReq.Header.Set("Authorization", "Bearer "+s.apiKey)
	}
	resp, err := s.client.Do(httpReq)
	if err != nil {
		return "", none, s.transportError(ctx, attemptCtx, "send request to "+s.endpoint, err)
	}
	// Closing the body only releases the connection: whatever is needed from it has been
	// read by the time this runs.
	defer func() { _ = resp.Body.Close() }()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Best effort: a failed read only makes the snippet shorter, the status is the news.
		data, _ := readAtMost(resp.Body, maxErrorBodyBytes)
		serr := &StatusError{StatusCode: resp.StatusCode, Message: errorMessage(data)}
		if s.quiet {
			serr.Message = ""
		}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			return "", none, &retryableError{err: serr, retryAfter: d, hasRetryAfter: ok}
		}
		return "", none, serr
	}

	if resp.ContentLength > maxResponseBytes {
		return "", none, fmt.Errorf("response of %d bytes exceeds the %d MiB limit", resp.ContentLength, maxResponseBytes>>20)
	}
	data, err := readAtMost(resp.Body, maxResponseBytes+1)
	if err != nil {
		return "", none, s.transportError(ctx, attemptCtx, "read response", err)
	}
	if len(data) > maxResponseBytes {
		return "", none, fmt.Errorf("response exceeds the %d MiB limit", maxResponseBytes>>20)
	}
	text, usage, err := parseCompletion(data)
	if err != nil && s.quiet {
		err = quietError(err)
	}
	return text, usage, err
}

// quietError keeps the kind of a response that is no usable completion and drops the rest,
// which may quote the response.
func quietError(err error) error {
	msg := err.Error()
	for _, kind := range []string{"garbage output", "empty choices", "empty content", "response is not valid UTF-8", "message.content is not valid UTF-8"} {
		if strings.HasPrefix(msg, kind) {
			return errors.New(kind + " (the response's text is not shown)")
		}
	}
	return errors.New("unusable response (its text is not shown)")
}

// transportError classifies a failure to exchange the request: the caller's cancellation is
// final, everything else (including this attempt's own timeout) is retried.
func (s *Summarizer) transportError(ctx, attemptCtx context.Context, op string, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // the URL is already in op or in the caller's prefix
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", op, withCause(ctx.Err(), err))
	case attemptCtx.Err() != nil:
		return &retryableError{err: fmt.Errorf("%s: timed out after %s (per-attempt timeout): %w", op, s.timeout, withCause(context.DeadlineExceeded, err))}
	default:
		return &retryableError{err: fmt.Errorf("%s: %w", op, err)}
	}
}

// withCause returns err, making sure errors.Is(result, cause) holds.
func withCause(cause, err error) error {
	if errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w: %w", cause, err)
}

// retryableError marks an attempt failure worth retrying; it is transparent in messages.
type retryableError struct {
	err           error
	retryAfter    time.Duration
	hasRetryAfter bool
}

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// backoff is the delay before retry number n (1-based): exponential from RetryBackoff,
// capped, with "equal jitter" — at least half the delay so retries really back off, the
// rest random so many sessions hitting one overloaded server do not retry in lockstep.
func (s *Summarizer) backoff(n int) time.Duration {
	d := s.retryBackoff
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	half := d / 2
	return half + rand.N(d-half+1)
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(h, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		// Clamp before multiplying so a huge value cannot overflow into a short wait.
		const day = 24 * 60 * 60
		return time.Duration(min(secs, day)) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
