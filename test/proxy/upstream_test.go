package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// upstream is an in-process OpenAI-compatible model endpoint: it answers from a script (a
// tool call for each of the first toolTurns requests of a conversation, then text) and
// records what it received and what it sent.
type upstream struct {
	t         *testing.T
	toolTurns int

	mu       sync.Mutex
	received []received
	sent     [][]byte
	turns    map[string]int // requests per conversation (its first user message)
}

type received struct {
	auth           string
	promptCacheKey string
	messages       []map[string]any
	raw            []byte
}

func newUpstream(t *testing.T, toolTurns int) *upstream {
	return &upstream{t: t, toolTurns: toolTurns, turns: map[string]int{}}
}

func (u *upstream) requests() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.received...)
}

func (u *upstream) lastSent() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sent[len(u.sent)-1]
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-test","object":"model"}]}`)
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/v1/messages" {
		u.messages(w, r)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages       []map[string]any `json:"messages"`
		Stream         bool             `json:"stream"`
		PromptCacheKey string           `json:"prompt_cache_key"`
		StreamOptions  struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	conv := ""
	for _, m := range req.Messages {
		if m["role"] == "user" {
			conv, _ = m["content"].(string)
			break
		}
	}
	u.mu.Lock()
	u.received = append(u.received, received{auth: r.Header.Get("Authorization"), promptCacheKey: req.PromptCacheKey, messages: req.Messages, raw: body})
	u.turns[conv]++
	turn := u.turns[conv]
	u.mu.Unlock()

	// The prompt as a provider would count it: a token per 3.6 characters of content, a
	// little more than the engine's estimate (a quarter), so the reported usage visibly
	// calibrates the session.
	chars := 0
	for _, m := range req.Messages {
		c, _ := json.Marshal(m["content"])
		if parts, ok := m["content"].([]any); ok {
			c = nil
			chars += partsChars(parts)
		}
		calls, _ := json.Marshal(m["tool_calls"])
		chars += len(c) + len(calls)
	}
	prompt := chars * 10 / 36
	id := fmt.Sprintf("call_%d_%d", len(conv)%97, turn)
	var out []byte
	if req.Stream {
		var b strings.Builder
		chunk := func(delta, finish string) {
			fin := "null"
			if finish != "" {
				fin = `"` + finish + `"`
			}
			fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-%d\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", turn, delta, fin)
		}
		chunk(`{"role":"assistant","content":""}`, "")
		if turn <= u.toolTurns {
			chunk(fmt.Sprintf(`{"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":"run","arguments":""}}]}`, id), "")
			chunk(fmt.Sprintf(`{"tool_calls":[{"index":0,"function":{"arguments":%q}}]}`, fmt.Sprintf(`{"cmd":"pytest -k case%d"}`, turn)), "")
			chunk(`{}`, "tool_calls")
		} else {
			chunk(`{"content":"All tests pass. "}`, "")
			chunk(`{"content":"Done."}`, "")
			chunk(`{}`, "stop")
		}
		if req.StreamOptions.IncludeUsage {
			fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-%d\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":12,\"total_tokens\":%d}}\n\n", turn, prompt, prompt+12)
		}
		b.WriteString("data: [DONE]\n\n")
		out = []byte(b.String())
		w.Header().Set("Content-Type", "text/event-stream")
		// Sent in pieces, flushed, as a provider streams.
		for len(out) > 0 {
			n := min(len(out), 97)
			_, _ = w.Write(out[:n])
			w.(http.Flusher).Flush()
			out = out[n:]
		}
		out = []byte(b.String())
	} else {
		var msg string
		if turn <= u.toolTurns {
			msg = fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":"run","arguments":%q}}]}`,
				id, fmt.Sprintf(`{"cmd":"pytest -k case%d"}`, turn))
		} else {
			msg = `{"role":"assistant","content":"All tests pass. Done."}`
		}
		finish := "stop"
		if turn <= u.toolTurns {
			finish = "tool_calls"
		}
		out = fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":%s,"finish_reason":%q}],"usage":{"prompt_tokens":%d,"completion_tokens":12,"total_tokens":%d}}`,
			turn, msg, finish, prompt, prompt+12)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}
	u.mu.Lock()
	u.sent = append(u.sent, out)
	u.mu.Unlock()
}

// messages answers Anthropic's POST /v1/messages from the same script: a tool_use block for
// each of the first toolTurns requests of a conversation, then text.
func (u *upstream) messages(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		System   json.RawMessage  `json:"system"`
		Messages []map[string]any `json:"messages"`
		Stream   bool             `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		http.Error(w, fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":"%v"}}`, err), http.StatusBadRequest)
		return
	}
	// A compacted view starts with the summary, not the task: the system prompt names the
	// conversation.
	conv := string(req.System)
	u.mu.Lock()
	auth := r.Header.Get("X-Api-Key") // or Authorization, as the Go SDK v2 sends the key
	if auth == "" {
		auth = r.Header.Get("Authorization")
	}
	u.received = append(u.received, received{auth: auth, messages: req.Messages, raw: body})
	u.turns[conv]++
	turn := u.turns[conv]
	u.mu.Unlock()

	chars := 0
	for _, m := range req.Messages {
		c, _ := json.Marshal(m["content"])
		chars += len(c)
	}
	prompt := chars * 10 / 36
	id := fmt.Sprintf("toolu_%d_%d", len(conv)%97, turn)
	input := fmt.Sprintf(`{"cmd":"pytest -k case%d"}`, turn)
	var out []byte
	if req.Stream {
		var b strings.Builder
		event := func(name, data string) { fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", name, data) }
		event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_%d","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, turn, prompt))
		stop := "end_turn"
		if turn <= u.toolTurns {
			stop = "tool_use"
			event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":%q,"name":"run","input":{}}}`, id))
			event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":%q}}`, input))
		} else {
			event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"All tests pass. "}}`)
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Done."}}`)
		}
		event("content_block_stop", `{"type":"content_block_stop","index":0}`)
		event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":12}}`, stop))
		event("message_stop", `{"type":"message_stop"}`)
		out = []byte(b.String())
		w.Header().Set("Content-Type", "text/event-stream")
		for rest := out; len(rest) > 0; {
			n := min(len(rest), 89)
			_, _ = w.Write(rest[:n])
			w.(http.Flusher).Flush()
			rest = rest[n:]
		}
	} else {
		content, stop := `[{"type":"text","text":"All tests pass. Done."}]`, "end_turn"
		if turn <= u.toolTurns {
			content, stop = fmt.Sprintf(`[{"type":"tool_use","id":%q,"name":"run","input":%s}]`, id, input), "tool_use"
		}
		out = fmt.Appendf(nil, `{"id":"msg_%d","type":"message","role":"assistant","model":"claude-test","content":%s,"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":12}}`,
			turn, content, stop, prompt)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}
	u.mu.Lock()
	u.sent = append(u.sent, out)
	u.mu.Unlock()
}

// partsChars is what content parts count for the upstream's usage: their text, and an image
// as a provider bills one (about 1,600 tokens, whatever its encoded size).
func partsChars(parts []any) int {
	n := 0
	for _, p := range parts {
		part, _ := p.(map[string]any)
		switch part["type"] {
		case "image_url", "input_image", "image":
			n += 1600 * 36 / 10
		default:
			text, _ := part["text"].(string)
			n += len(text)
		}
	}
	return n
}
