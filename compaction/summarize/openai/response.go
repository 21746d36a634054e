package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction"
)

// StatusError is the (wrapped) error for a non-2xx answer. Use errors.As to get at the
// status code, for example to tell an authentication problem from an overloaded server.
type StatusError struct {
	StatusCode int
	// Message is the server's explanation: error.message (or message) when the body is JSON
	// as OpenAI, vLLM, Ollama and LiteLLM write it, otherwise the start of the body. It is
	// cleaned to a single line of at most about 512 bytes.
	Message string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("status %d", e.StatusCode)
	if text := http.StatusText(e.StatusCode); text != "" {
		s += " " + text
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

type chatResponse struct {
	Choices []chatChoice    `json:"choices"`
	Error   json.RawMessage `json:"error"`
	// Usage is raw so that a malformed usage object never fails the response: the counts
	// are bookkeeping, the summary is the answer.
	Usage json.RawMessage `json:"usage"`
}

type chatChoice struct {
	Message struct {
		// Content is raw because servers send a string, null, or (rarely) an array of parts.
		Content json.RawMessage `json:"content"`
		// The reasoning fields are only looked at to explain an empty content: thinking is
		// not a summary and must never be returned as one.
		ReasoningContent json.RawMessage `json:"reasoning_content"`
		Reasoning        json.RawMessage `json:"reasoning"`
		Refusal          string          `json:"refusal"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// parseCompletion extracts the assistant text of the first choice of a chat completion and
// the usage the server reported with it (see parseUsage).
func parseCompletion(data []byte) (string, compaction.SummaryUsage, error) {
	text, cr, err := parseResponse(data)
	if err != nil {
		return "", compaction.SummaryUsage{}, err
	}
	return text, parseUsage(cr.Usage), nil
}

// parseUsage reads usage.prompt_tokens and usage.completion_tokens. Each count the server
// left out, sent as null, as a string, a fraction, a negative number or one of 2^31 or
// more (no summarizer call is that large: only a broken server sends it) is 0, as when the
// server reports no usage at all.
func parseUsage(raw json.RawMessage) compaction.SummaryUsage {
	var u struct {
		PromptTokens     json.RawMessage `json:"prompt_tokens"`
		CompletionTokens json.RawMessage `json:"completion_tokens"`
	}
	if !hasText(raw) || json.Unmarshal(raw, &u) != nil {
		return compaction.SummaryUsage{}
	}
	return compaction.SummaryUsage{InputTokens: tokenCount(u.PromptTokens), OutputTokens: tokenCount(u.CompletionTokens)}
}

// tokenCount is a JSON integer in [0, 2^31), or 0.
func tokenCount(raw json.RawMessage) int {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int(n)
}

// parseResponse extracts the assistant text of the first choice of a chat completion, and
// returns the decoded response for the rest.
func parseResponse(data []byte) (string, *chatResponse, error) {
	// Checked on the raw bytes because encoding/json silently turns invalid UTF-8 into U+FFFD.
	if !utf8.Valid(data) {
		return "", nil, errors.New("response is not valid UTF-8")
	}
	var cr chatResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		return "", nil, fmt.Errorf("garbage output: response is not chat-completions JSON: %w (body begins %q)", err, snippet(string(data)))
	}
	if len(cr.Choices) == 0 {
		// Some proxies answer 200 with an error object instead of a status code.
		if hasText(cr.Error) {
			return "", nil, fmt.Errorf("empty choices: server reported an error: %s", errorMessage(data))
		}
		return "", nil, errors.New("empty choices: the response has no completion")
	}
	ch := &cr.Choices[0]
	text, err := decodeContent(ch.Message.Content)
	if err != nil {
		return "", nil, fmt.Errorf("garbage output: message.content: %w", err)
	}
	if strings.TrimSpace(text) == "" {
		msg := "empty content"
		switch {
		case ch.Message.Refusal != "":
			msg += ": the model refused: " + snippet(ch.Message.Refusal)
		case hasText(ch.Message.ReasoningContent) || hasText(ch.Message.Reasoning):
			msg += ": the model produced only reasoning, which is not a summary (raise MaxOutputTokens or disable thinking)"
		}
		if ch.FinishReason != "" {
			msg += fmt.Sprintf(" (finish_reason %q)", ch.FinishReason)
		}
		return "", nil, errors.New(msg)
	}
	// encoding/json also turns lone surrogate escapes such as \ud800 into U+FFFD. Every
	// U+FFFD in the text must therefore be accounted for by one in the raw JSON.
	if strings.Count(text, "\uFFFD") > countReplacementChars(ch.Message.Content) {
		return "", nil, errors.New("message.content is not valid UTF-8 (invalid surrogate escapes)")
	}
	return text, &cr, nil
}

// decodeContent reads message.content: a string, null, or an array of text parts.
func decodeContent(raw json.RawMessage) (string, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || isNull(t) {
		return "", nil
	}
	switch t[0] {
	case '"':
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return "", err
		}
		return s, nil
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(t, &parts); err != nil {
			return "", err
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" || p.Type == "" {
				b.WriteString(p.Text)
			}
		}
		return b.String(), nil
	default:
		return "", fmt.Errorf("want a string, null or an array of parts, got %q", snippet(string(t)))
	}
}

func isNull(raw []byte) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// hasText reports whether a raw JSON value carries anything (not absent, null or "").
func hasText(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !isNull(t) && !bytes.Equal(t, []byte(`""`))
}

// countReplacementChars counts the U+FFFD characters a raw JSON value legitimately holds:
// literal ones and \ufffd escapes. Escaped backslashes are skipped so `\\ufffd` is not
// mistaken for an escape.
func countReplacementChars(raw []byte) int {
	n := bytes.Count(raw, []byte("\uFFFD"))
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] == 'u' && i+6 <= len(raw) && strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
			n++
			i += 5
			continue
		}
		i++ // skip the escaped character
	}
	return n
}

// errorMessage extracts the server's explanation from an error body, in the shapes the
// common servers use: {"error":{"message":...}} (OpenAI, LiteLLM, Ollama),
// {"error":"..."} (Ollama), {"message":...} (vLLM), {"detail":...} (FastAPI-based servers).
// Anything else is quoted as the start of the body.
func errorMessage(body []byte) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &env) == nil {
		var nested struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(env.Error, &nested) == nil && nested.Message != "":
			return snippet(nested.Message)
		case json.Unmarshal(env.Error, &s) == nil && s != "":
			return snippet(s)
		case env.Message != "":
			return snippet(env.Message)
		case json.Unmarshal(env.Detail, &s) == nil && s != "":
			return snippet(s)
		case hasText(env.Detail):
			return snippet(string(env.Detail))
		}
	}
	return snippet(string(body))
}

// snippet makes server text safe to put in an error: valid UTF-8, one line, no control
// characters, at most maxErrorSnippet bytes.
func snippet(s string) string {
	if len(s) > 4*maxErrorSnippet {
		s = s[:4*maxErrorSnippet] // bound the work below; cut runes are fixed by ToValidUTF8
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) <= maxErrorSnippet {
		return s
	}
	n := maxErrorSnippet
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// readAtMost reads r to EOF or until limit bytes, whichever comes first.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, limit))
}
