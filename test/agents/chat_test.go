package agents

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

// newChatModel is the scripted OpenAI model (responsesModel) of an agent on Chat
// Completions (Qwen Code): POST /v1/chat/completions, streamed (chat.completion.chunk
// events, the tool call's arguments in pieces, usage last when stream_options asks for it,
// then [DONE]) or not.
func newChatModel(m *model, tools []responsesTool) responsesModel {
	m.decode = func(raw []byte) ([]compaction.Message, error) {
		var req struct {
			Messages []compaction.Message `json:"messages"`
		}
		if err := json.Unmarshal(raw, &req); err != nil {
			return nil, err
		}
		for i := range req.Messages {
			if req.Messages[i].Role == "developer" { // as the proxy reads it
				req.Messages[i].Role = compaction.RoleSystem
			}
		}
		return req.Messages, nil
	}
	return responsesModel{model: m, tools: tools, items: newStoredItems()}
}

func (m responsesModel) complete(w http.ResponseWriter, r *http.Request, raw []byte) {
	var req struct {
		Model         string            `json:"model"`
		Tools         []json.RawMessage `json:"tools"`
		Stream        bool              `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		m.problem("POST /v1/chat/completions: undecodable body (%v): %.300s", err, raw)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
		return
	}
	tool := m.pick(req.Tools)
	now := time.Now()
	id := fmt.Sprintf("chatcmpl-%d", now.UnixNano())
	text, finish := "", "stop"
	var call map[string]any
	if tool == nil {
		m.sideRequest(r, raw)
		text = "Step log check"
	} else if ask := m.next(r, raw, tool.name); ask == 0 {
		text = finalText(m.steps)
	} else {
		finish = "tool_calls"
		call = map[string]any{"id": fmt.Sprintf("call_step%d_%d", ask, now.UnixNano()%1e6), "type": "function",
			"function": map[string]any{"name": tool.name, "arguments": mustJSON(tool.args(m.model, ask))}}
	}
	prompt := promptTokens(raw)
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": 24, "total_tokens": prompt + 24}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": text}
		if call != nil {
			msg["content"], msg["tool_calls"] = nil, []any{call}
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "chat.completion", "created": now.Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	var b strings.Builder
	chunk := func(delta map[string]any, finish any) {
		fmt.Fprintf(&b, "data: %s\n\n", mustJSON(map[string]any{"id": id, "object": "chat.completion.chunk", "created": now.Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}))
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	if call != nil {
		fn := call["function"].(map[string]any)
		args := fn["arguments"].(string)
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": call["id"], "type": "function",
			"function": map[string]any{"name": fn["name"], "arguments": ""}}}}, nil)
		half := len(args) / 2
		for _, part := range []string{args[:half], args[half:]} {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": part}}}}, nil)
		}
	} else {
		half := len(text) / 2
		for _, part := range []string{text[:half], text[half:]} {
			chunk(map[string]any{"content": part}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if req.StreamOptions.IncludeUsage {
		fmt.Fprintf(&b, "data: %s\n\n", mustJSON(map[string]any{"id": id, "object": "chat.completion.chunk", "created": now.Unix(), "model": req.Model,
			"choices": []any{}, "usage": usage}))
	}
	b.WriteString("data: [DONE]\n\n")
	writeSSE(w, b.String())
}
