package agents

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/anthropic"
)

// anthropicModel is the scripted model on the Anthropic Messages API, as Claude Code calls
// it: POST /v1/messages (streamed or not), POST /v1/messages/count_tokens, HEAD or GET
// /api/hello (its connectivity check), GET /v1/models.
//
// To a request with thinking on, it answers as Claude does: a signed thinking block first.
// It refuses, as the API does, a thinking block whose signature it did not send, and a
// request with thinking on whose last assistant message, calling a tool, does not start
// with its thinking block.
type anthropicModel struct {
	*model
	signatures *signatures
}

func newAnthropicModel(m *model) anthropicModel {
	m.decode = func(raw []byte) ([]compaction.Message, error) {
		req, err := anthropic.DecodeRequest(raw)
		if err != nil {
			return nil, err
		}
		return req.Messages, nil
	}
	return anthropicModel{model: m, signatures: &signatures{sent: map[string]bool{}}}
}

func (m anthropicModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	path := r.URL.Path
	switch {
	case r.Method == http.MethodPost && path == "/v1/messages":
		m.messages(w, r, raw)
	case r.Method == http.MethodPost && path == "/v1/messages/count_tokens":
		m.sideRequest(r, raw)
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": promptTokens(raw)})
	case path == "/api/hello":
		m.sideRequest(r, raw)
		writeJSON(w, http.StatusOK, map[string]any{"message": "hello"})
	case r.Method == http.MethodGet && path == "/v1/models":
		m.sideRequest(r, raw)
		writeJSON(w, http.StatusOK, map[string]any{"data": []any{map[string]any{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5", "created_at": "2025-09-29T00:00:00Z"}}, "has_more": false, "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"})
	default:
		m.sideRequest(r, raw)
		writeJSON(w, http.StatusNotFound, map[string]any{"type": "error", "error": map[string]any{"type": "not_found_error", "message": "not found: " + r.Method + " " + path}})
	}
}

func (m anthropicModel) messages(w http.ResponseWriter, r *http.Request, raw []byte) {
	var req struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
		Stream   bool              `json:"stream"`
		Thinking struct {
			Type    string `json:"type"`
			Display string `json:"display"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(raw, &req); err != nil || len(req.Messages) == 0 {
		m.problem("POST /v1/messages: undecodable body (%v): %.300s", err, raw)
		writeJSON(w, http.StatusBadRequest, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": fmt.Sprint("bad request: ", err)}})
		return
	}
	thinking := req.Thinking.Type != "" && req.Thinking.Type != "disabled"
	if refused := m.signatures.checkThinking(req.Messages, thinking); refused != "" {
		m.problem("POST /v1/messages: %s", refused)
		writeJSON(w, http.StatusBadRequest, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": refused}})
		return
	}
	tools := toolNames(req.Tools)
	// Claude Code's tools, or OpenCode's.
	shellTool, readTool, pathParam := "Bash", "Read", "file_path"
	if _, ok := tools["bash"]; ok {
		shellTool, readTool, pathParam = "bash", "read", "filePath"
	}
	_, bash := tools[shellTool]
	_, read := tools[readTool]
	var blocks []map[string]any // content blocks of the answer
	stop := "end_turn"
	if !bash && !read {
		m.sideRequest(r, raw)
		blocks = []map[string]any{{"type": "text", "text": "Step log check"}}
	} else {
		ask := 0
		// Read every fourth step when the agent has it, Bash otherwise.
		tool := shellTool
		if k := m.stepOf(raw) + 1; read && (k%4 == 0 || !bash) {
			tool = readTool
		}
		ask = m.next(r, raw, tool)
		if ask == 0 {
			blocks = []map[string]any{{"type": "text", "text": finalText(m.steps)}}
		} else {
			input := map[string]any{"command": m.command(ask), "description": fmt.Sprintf("Print the log of step %d", ask)}
			if tool == readTool {
				input = map[string]any{pathParam: m.ws.logPath(ask)}
			}
			stop = "tool_use"
			blocks = []map[string]any{
				{"type": "text", "text": fmt.Sprintf("Checking the log of step %d.", ask)},
				{"type": "tool_use", "id": fmt.Sprintf("toolu_%02d%s", ask, strings.Repeat("x", 20)), "name": tool, "input": input},
			}
		}
	}
	if thinking {
		text := "The log of the step comes next."
		if req.Thinking.Display == "omitted" {
			text = ""
		}
		blocks = append([]map[string]any{{"type": "thinking", "thinking": text, "signature": m.signatures.sign(m.stepOf(raw) + 1)}}, blocks...)
	}
	model := req.Model
	if model == "" {
		model = "claude-sonnet-4-5"
	}
	id := fmt.Sprintf("msg_%d", time.Now().UnixNano())
	usage := map[string]any{"input_tokens": promptTokens(raw), "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 24}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	var b strings.Builder
	event := func(v map[string]any) {
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", v["type"], mustJSON(v))
	}
	startUsage := map[string]any{"input_tokens": usage["input_tokens"], "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}
	event(map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": startUsage}})
	event(map[string]any{"type": "ping"})
	for i, block := range blocks {
		switch block["type"] {
		case "thinking":
			event(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
			if text := block["thinking"].(string); text != "" {
				event(map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": text}})
			}
			event(map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "signature_delta", "signature": block["signature"]}})
		case "text":
			event(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			text := block["text"].(string)
			half := len(text) / 2
			for _, part := range []string{text[:half], text[half:]} {
				event(map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": part}})
			}
		case "tool_use":
			event(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}})
			input := mustJSON(block["input"])
			half := len(input) / 2
			for _, part := range []string{input[:half], input[half:]} {
				event(map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
			}
		}
		event(map[string]any{"type": "content_block_stop", "index": i})
	}
	event(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": usage["output_tokens"]}})
	event(map[string]any{"type": "message_stop"})
	writeSSE(w, b.String())
}

// checkThinking returns the API's message for messages with a thinking block whose signature
// the model did not send, or, thinking on, whose last assistant message calls a tool without
// starting with a thinking block; "" when neither.
func (s *signatures) checkThinking(messages []json.RawMessage, thinking bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lastAssistant, lastStarts, lastCalls := -1, "", false
	for i, raw := range messages {
		var msg struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &msg) != nil || msg.Role != "assistant" {
			continue
		}
		var blocks []struct {
			Type      string `json:"type"`
			Signature string `json:"signature"`
		}
		_ = json.Unmarshal(msg.Content, &blocks) // a string: no blocks
		for j, b := range blocks {
			if b.Type == "thinking" && !s.sent[b.Signature] {
				return fmt.Sprintf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)
			}
		}
		lastAssistant, lastStarts, lastCalls = i, "", false
		if len(blocks) > 0 {
			lastStarts = blocks[0].Type
		}
		for _, b := range blocks {
			lastCalls = lastCalls || b.Type == "tool_use"
		}
	}
	if thinking && lastCalls && lastStarts != "thinking" && lastStarts != "redacted_thinking" {
		return fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceding the lastmost set of `tool_use` and `tool_result` blocks).", lastAssistant, lastStarts)
	}
	return ""
}
