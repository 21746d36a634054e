package agents

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/responses"
)

// responsesModel is the scripted model on the OpenAI Responses API, as Codex and the OpenAI
// Agents SDK call it: POST /v1/responses, streamed (the events response.created,
// response.in_progress, response.output_item.added, response.output_text.delta,
// response.function_call_arguments.delta and .done, response.output_item.done,
// response.completed with usage) or not; GET /v1/models. A WebSocket upgrade (Codex tries
// one first) is refused with 426 Upgrade Required, as a server without WebSockets does.
type responsesModel struct {
	*model
	// tools are the tools the script asks for, in order of preference, each with the
	// arguments of the command or read of a step.
	tools []responsesTool
}

type responsesTool struct {
	name string
	args func(m *model, k int) any
}

// codexTools are Codex's shell tools: exec_command (unified exec), shell_command and shell.
var codexTools = []responsesTool{
	{"exec_command", func(m *model, k int) any { return map[string]any{"cmd": m.command(k), "yield_time_ms": 10000} }},
	{"shell_command", func(m *model, k int) any { return map[string]any{"command": m.command(k), "timeout_ms": 10000} }},
	{"shell", func(m *model, k int) any {
		return map[string]any{"command": []string{"bash", "-lc", m.command(k)}, "timeout_ms": 10000}
	}},
}

// sdkTools is the function tool of the Agents SDK script (node/sdkagent.mjs).
var sdkTools = []responsesTool{
	{"read_log", func(m *model, k int) any { return map[string]any{"path": m.ws.logPath(k)} }},
}

func newResponsesModel(m *model, tools []responsesTool) responsesModel {
	m.decode = func(raw []byte) ([]compaction.Message, error) {
		req, err := responses.DecodeRequest(raw)
		if err != nil {
			return nil, err
		}
		return req.Messages, nil
	}
	return responsesModel{model: m, tools: tools}
}

func (m responsesModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	switch {
	case strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		m.sideRequest(r, raw)
		http.Error(w, "websocket not supported", http.StatusUpgradeRequired)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/responses":
		m.responses(w, r, raw)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		m.sideRequest(r, raw)
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{"id": "gpt-5.5", "object": "model", "created": 1, "owned_by": "openai"}}})
	default:
		m.sideRequest(r, raw)
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"message": "not found: " + r.Method + " " + r.URL.Path, "type": "invalid_request_error"}})
	}
}

func (m responsesModel) responses(w http.ResponseWriter, r *http.Request, raw []byte) {
	var req struct {
		Model  string            `json:"model"`
		Tools  []json.RawMessage `json:"tools"`
		Stream bool              `json:"stream"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		m.problem("POST /v1/responses: undecodable body (%v): %.300s", err, raw)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
		return
	}
	declared := toolNames(req.Tools)
	var tool *responsesTool
	for i := range m.tools {
		if _, ok := declared[m.tools[i].name]; ok {
			tool = &m.tools[i]
			break
		}
	}
	now := time.Now()
	respID := fmt.Sprintf("resp_%d", now.UnixNano())
	var items []map[string]any
	if tool == nil {
		m.sideRequest(r, raw)
		items = []map[string]any{messageItem(respID, "Step log check")}
	} else if ask := m.next(r, raw, tool.name); ask == 0 {
		items = []map[string]any{messageItem(respID, finalText(m.steps))}
	} else {
		items = []map[string]any{{"id": fmt.Sprintf("fc_%s_%d", respID, ask), "type": "function_call", "status": "completed",
			"call_id": fmt.Sprintf("call_step%d_%d", ask, now.UnixNano()%1e6), "name": tool.name, "arguments": mustJSON(tool.args(m.model, ask))}}
	}
	usage := map[string]any{"input_tokens": promptTokens(raw), "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 24, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": promptTokens(raw) + 24}
	response := func(status string, output []map[string]any, usage any) map[string]any {
		return map[string]any{"id": respID, "object": "response", "created_at": now.Unix(), "status": status, "model": req.Model,
			"output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}, "usage": usage,
			"error": nil, "incomplete_details": nil, "instructions": nil, "metadata": map[string]any{}, "temperature": 1.0, "top_p": 1.0,
			"text": map[string]any{"format": map[string]any{"type": "text"}}, "reasoning": map[string]any{"effort": nil, "summary": nil}}
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, response("completed", items, usage))
		return
	}
	var b strings.Builder
	seq := 0
	event := func(v map[string]any) {
		v["sequence_number"] = seq
		seq++
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", v["type"], mustJSON(v))
	}
	event(map[string]any{"type": "response.created", "response": response("in_progress", []map[string]any{}, nil)})
	event(map[string]any{"type": "response.in_progress", "response": response("in_progress", []map[string]any{}, nil)})
	for i, item := range items {
		switch item["type"] {
		case "message":
			text := item["content"].([]map[string]any)[0]["text"].(string)
			event(map[string]any{"type": "response.output_item.added", "output_index": i,
				"item": map[string]any{"id": item["id"], "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			event(map[string]any{"type": "response.content_part.added", "item_id": item["id"], "output_index": i, "content_index": 0, "part": part})
			half := len(text) / 2
			for _, d := range []string{text[:half], text[half:]} {
				event(map[string]any{"type": "response.output_text.delta", "item_id": item["id"], "output_index": i, "content_index": 0, "delta": d, "logprobs": []any{}})
			}
			event(map[string]any{"type": "response.output_text.done", "item_id": item["id"], "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
			event(map[string]any{"type": "response.content_part.done", "item_id": item["id"], "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
		case "function_call":
			args := item["arguments"].(string)
			event(map[string]any{"type": "response.output_item.added", "output_index": i,
				"item": map[string]any{"id": item["id"], "type": "function_call", "status": "in_progress", "call_id": item["call_id"], "name": item["name"], "arguments": ""}})
			half := len(args) / 2
			for _, d := range []string{args[:half], args[half:]} {
				event(map[string]any{"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": i, "delta": d})
			}
			event(map[string]any{"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": i, "arguments": args})
		}
		event(map[string]any{"type": "response.output_item.done", "output_index": i, "item": item})
	}
	event(map[string]any{"type": "response.completed", "response": response("completed", items, usage)})
	writeSSE(w, b.String())
}

func messageItem(respID, text string) map[string]any {
	return map[string]any{"id": "msg_" + respID, "type": "message", "status": "completed", "role": "assistant",
		"content": []map[string]any{{"type": "output_text", "text": text, "annotations": []any{}}}}
}
