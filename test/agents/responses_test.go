package agents

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/responses"
)

// responsesModel is the scripted model on the OpenAI Responses API, as Codex, the OpenAI
// Agents SDK and the Vercel AI SDK call it: POST /v1/responses, streamed (the events
// response.created, response.in_progress, response.output_item.added,
// response.output_text.delta, response.function_call_arguments.delta and .done,
// response.output_item.done, response.completed with usage) or not; GET /v1/models. A
// WebSocket upgrade (Codex tries one first) is refused with 426 Upgrade Required, as a
// server without WebSockets does. It answers Chat Completions too (chat_test.go).
//
// Like a reasoning model (gpt-5.5, the o-series), it answers with a reasoning item before
// the call or message, with its encrypted_content when the request includes
// "reasoning.encrypted_content"; every third call comes after a short message, as gpt-5
// models write one. It keeps what OpenAI keeps of a response it stores (see items): a request that refers to an item it does not have, or separates a reasoning
// item from the item it preceded, gets the 400 OpenAI answers.
type responsesModel struct {
	*model
	// tools are the tools the script asks for, in order of preference, each with the
	// arguments of the command or read of a step.
	tools []responsesTool
	items *storedItems
}

// storedItems are the output items of the model's responses: by id, those of every response
// to a request without "store": false (which item_reference may name), and the encrypted
// content of every reasoning item.
type storedItems struct {
	mu        sync.Mutex
	byID      map[string]storedItem
	encrypted map[string]bool // the encrypted_content of every reasoning item
}

// storedItem is a stored output item: its type, and the reasoning item before it or the
// item after it (a reasoning item's).
type storedItem struct {
	typ, reasoning, following string
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

// opencodeTools are OpenCode's bash and read tools.
var opencodeTools = []responsesTool{
	{"bash", func(m *model, k int) any {
		return map[string]any{"command": m.command(k), "description": fmt.Sprintf("Print the log of step %d", k)}
	}},
	{"read", func(m *model, k int) any { return map[string]any{"filePath": m.ws.logPath(k)} }},
}

// qwenTools is Qwen Code's shell tool.
var qwenTools = []responsesTool{
	{"run_shell_command", func(m *model, k int) any {
		return map[string]any{"command": m.command(k), "description": fmt.Sprintf("Print the log of step %d", k)}
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
	return responsesModel{model: m, tools: tools, items: newStoredItems()}
}

func newStoredItems() *storedItems {
	return &storedItems{byID: map[string]storedItem{}, encrypted: map[string]bool{}}
}

// pick is the first of the script's tools the request declares (nil: none).
func (m responsesModel) pick(tools []json.RawMessage) *responsesTool {
	declared := toolNames(tools)
	for i := range m.tools {
		if _, ok := declared[m.tools[i].name]; ok {
			return &m.tools[i]
		}
	}
	return nil
}

func (m responsesModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	switch {
	case strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		m.sideRequest(r, raw)
		http.Error(w, "websocket not supported", http.StatusUpgradeRequired)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/responses":
		m.responses(w, r, raw)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		m.complete(w, r, raw)
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
		Model   string            `json:"model"`
		Tools   []json.RawMessage `json:"tools"`
		Stream  bool              `json:"stream"`
		Store   *bool             `json:"store"`
		Include []string          `json:"include"`
		Input   json.RawMessage   `json:"input"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		m.problem("POST /v1/responses: undecodable body (%v): %.300s", err, raw)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
		return
	}
	if refused := m.items.check(req.Input); refused != "" {
		m.problem("POST /v1/responses: %s", refused)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": refused, "type": "invalid_request_error", "param": "input"}})
		return
	}
	tool := m.pick(req.Tools)
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
		if ask%3 == 0 {
			// A preamble before the call now and then, as gpt-5 models write one.
			items = append([]map[string]any{messageItem(respID+"_c", fmt.Sprintf("Reading the log of step %d.", ask))}, items...)
		}
	}
	reasons := strings.HasPrefix(req.Model, "gpt-5") || strings.HasPrefix(req.Model, "o")
	items = m.items.answer(respID, items, reasons, slices.Contains(req.Include, "reasoning.encrypted_content"), req.Store == nil || *req.Store)
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
		case "reasoning":
			event(map[string]any{"type": "response.output_item.added", "output_index": i,
				"item": map[string]any{"id": item["id"], "type": "reasoning", "summary": []any{}}})
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

// answer puts a reasoning item before the items of the response respID when the model
// reasons, as a reasoning model answers, with its encrypted content when include asks for
// it, and stores the items unless the request said "store": false.
func (s *storedItems) answer(respID string, items []map[string]any, reasons, include, store bool) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reasons {
		id := "rs_" + respID
		rs := map[string]any{"id": id, "type": "reasoning", "summary": []any{}}
		enc := "gAAAA" + hex.EncodeToString([]byte(respID))
		s.encrypted[enc] = true
		if include {
			rs["encrypted_content"] = enc
		}
		items = append([]map[string]any{rs}, items...)
	}
	if store {
		for i, it := range items {
			stored := storedItem{typ: it["type"].(string)}
			if stored.typ == "reasoning" {
				stored.following = items[i+1]["id"].(string)
			}
			if i > 0 && items[i-1]["type"] == "reasoning" {
				stored.reasoning = items[i-1]["id"].(string)
			}
			s.byID[it["id"].(string)] = stored
		}
	}
	return items
}

// check checks a request's input as OpenAI does against what it stored: an item_reference
// names a stored item; a stored reasoning item is followed by the item it preceded, and that
// item preceded by it when it has an id; a reasoning item's encrypted content is the one the
// model sent. Of a response to a request with "store": false (Codex) only the encrypted
// content is checked: OpenAI keeps nothing else of it. It returns OpenAI's message for a request it refuses, "" for one it accepts.
func (s *storedItems) check(input json.RawMessage) string {
	var raws []json.RawMessage
	if len(input) == 0 || input[0] != '[' {
		return "" // a string: one user message
	}
	if err := json.Unmarshal(input, &raws); err != nil {
		return "input: " + err.Error()
	}
	type item struct {
		Type             string  `json:"type"`
		ID               string  `json:"id"`
		EncryptedContent *string `json:"encrypted_content"`
	}
	items := make([]item, len(raws))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &items[i]); err != nil {
			return fmt.Sprintf("input[%d]: %v", i, err)
		}
		it := &items[i]
		switch it.Type {
		case "":
			it.Type = "message" // an item with a role only
		case "item_reference":
			stored, ok := s.byID[it.ID]
			if !ok {
				return fmt.Sprintf("Item with id '%s' not found.", it.ID)
			}
			it.Type = stored.typ
		case "reasoning":
			// By its content: a client may send the item without its id (OpenCode does).
			if it.EncryptedContent != nil && !s.encrypted[*it.EncryptedContent] {
				return fmt.Sprintf("The encrypted content for item %s could not be verified.", it.ID)
			}
		}
	}
	for i, it := range items {
		stored, ok := s.byID[it.ID]
		if !ok || it.ID == "" {
			continue
		}
		// The following item is the one stored, or one of its type without an id (the AI SDK
		// sends function calls without theirs), as OpenAI accepts.
		if stored.following != "" && (i+1 == len(items) || !s.follows(items[i+1].ID, items[i+1].Type, stored.following)) {
			return fmt.Sprintf("Item '%s' of type '%s' was provided without its required following item.", it.ID, it.Type)
		}
		if stored.reasoning != "" && (i == 0 || items[i-1].ID != stored.reasoning) {
			return fmt.Sprintf("Item '%s' of type '%s' was provided without its required 'reasoning' item: '%s'.", it.ID, it.Type, stored.reasoning)
		}
	}
	return ""
}

// follows reports whether an input item of id and typ can be the stored item following.
func (s *storedItems) follows(id, typ, following string) bool {
	if id != "" {
		return id == following
	}
	return typ == s.byID[following].typ
}

func messageItem(respID, text string) map[string]any {
	return map[string]any{"id": "msg_" + respID, "type": "message", "status": "completed", "role": "assistant",
		"content": []map[string]any{{"type": "output_text", "text": text, "annotations": []any{}}}}
}
