// Package anthropic converts an Anthropic Messages API request (POST /v1/messages) to the
// engine's message model and back, so that an Anthropic conversation can be compacted like an
// OpenAI one.
//
// The mapping:
//   - The top-level system prompt (a string or text blocks) is one system message.
//   - A user message's tool_result blocks are tool messages (tool_use_id becomes ToolCallID,
//     the result's text the content); its other blocks (text, image, document, ...) are one
//     user message, in the order they came.
//   - An assistant message is one assistant message: its text blocks are the content, its
//     tool_use blocks the tool calls (input verbatim as the arguments).
//
// Encode goes back. A message of the compacted view that is one the request had (the messages
// a compaction keeps) is written as the request had it, byte for byte: its blocks, their
// cache_control, thinking blocks, images and any block or field this package does not know.
// Only the messages a compaction wrote (the summary, an offloaded result's placeholder) are
// built anew. Consecutive user-side messages (user and tool) make one Anthropic user message,
// as the API wants roles to alternate.
package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/internal/sources"
	"github.com/harness9/compaction-operator/internal/rawjson"
)

// ErrInvalidRequest is wrapped by every error DecodeRequest and Encode return for a request
// or a view they cannot convert.
var ErrInvalidRequest = errors.New("invalid Anthropic Messages request")

// Request is a decoded Messages API request.
type Request struct {
	// Messages is the conversation in the engine's model: the system prompt first (when the
	// request has one), then every message of the request.
	Messages []compaction.Message

	// fields are the request's other top-level fields (model, max_tokens, tools, stream,
	// metadata, ...), verbatim.
	fields map[string]json.RawMessage
	// sources maps an engine message's fingerprint to what it was decoded from, the latest
	// last (see Encode).
	sources sources.Index[source]
	// toolResults maps a tool_use_id to its tool_result block, for the fields (is_error,
	// cache_control) a rebuilt result keeps.
	toolResults map[string]map[string]json.RawMessage
}

// source is how an engine message was written in the request: a string content, or blocks.
type source struct {
	text   *string
	blocks []json.RawMessage
	// extra are the other keys of the request's message object, on the source of its first
	// engine message.
	extra map[string]json.RawMessage
	// role is "system" for a system message inside "messages" (see decodeSystemMessage).
	role string
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// DecodeRequest decodes a Messages API request body.
func DecodeRequest(body []byte) (*Request, error) {
	fields, err := rawjson.DecodeBody(body)
	if err != nil {
		return nil, invalid("%v", err)
	}
	rawMessages, ok := fields["messages"]
	if !ok {
		return nil, invalid(`no "messages"`)
	}
	var messages []map[string]json.RawMessage
	if err := json.Unmarshal(rawMessages, &messages); err != nil {
		return nil, invalid(`"messages" is not an array of message objects: %v`, err)
	}
	r := &Request{fields: fields, sources: sources.New[source](), toolResults: map[string]map[string]json.RawMessage{}}
	if sys, ok := fields["system"]; ok && !rawjson.IsNull(sys) {
		m, src, err := decodeSystem(sys)
		if err != nil {
			return nil, err
		}
		r.add(m, src)
		delete(fields, "system")
	}
	delete(fields, "messages")
	for i, msg := range messages {
		if err := r.decodeMessage(msg); err != nil {
			return nil, invalid("messages[%d]: %v", i, err)
		}
	}
	return r, nil
}

// decodeMessage decodes one message object. Its keys are matched exactly, as the API matches
// them; keys other than role and content are kept with the message's first engine message.
func (r *Request) decodeMessage(msg map[string]json.RawMessage) error {
	var role string
	if err := json.Unmarshal(msg["role"], &role); err != nil {
		return fmt.Errorf(`"role" is not a string`)
	}
	content, ok := msg["content"]
	if !ok {
		return fmt.Errorf(`no "content"`)
	}
	first := len(r.Messages)
	var err error
	switch role {
	case "user":
		err = r.decodeUser(content)
	case "assistant":
		err = r.decodeAssistant(content)
	case "system":
		err = r.decodeSystemMessage(content)
	default:
		err = fmt.Errorf("role %q is neither user, assistant nor system", role)
	}
	if err != nil || len(msg) == 2 || first == len(r.Messages) {
		return err
	}
	extra := make(map[string]json.RawMessage, len(msg)-2)
	for k, v := range msg {
		if k != "role" && k != "content" {
			extra[k] = v
		}
	}
	r.sources.Latest(&r.Messages[first]).extra = extra
	return nil
}

func (r *Request) add(m compaction.Message, src source) {
	r.Messages = append(r.Messages, m)
	r.sources.Add(&m, src)
}

// decodeSystemMessage decodes a system message inside "messages" (Claude Code sends its
// environment that way). The engine keeps only the leading system messages as the system
// prompt, so this one is a user message marked pinned: kept verbatim in every view, after
// the system prompt, once a compaction covers it. Its source remembers the role, and Encode
// writes it back as a system message of its own.
func (r *Request) decodeSystemMessage(raw json.RawMessage) error {
	m, src, err := decodeSystem(raw)
	if err != nil {
		return err
	}
	m.Role, m.Pinned, src.role = compaction.RoleUser, true, "system"
	r.add(m, src)
	return nil
}

func decodeSystem(raw json.RawMessage) (compaction.Message, source, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return compaction.Message{Role: compaction.RoleSystem, Content: s}, source{text: &s}, nil
	}
	blocks, err := decodeBlocks(raw)
	if err != nil {
		return compaction.Message{}, source{}, invalid(`"system": %v`, err)
	}
	return compaction.Message{Role: compaction.RoleSystem, ContentParts: raw}, source{blocks: blocks}, nil
}

// block is the part of a content block this package reads.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

func decodeBlocks(raw json.RawMessage) ([]json.RawMessage, error) {
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("content is neither a string nor an array of blocks: %v", err)
	}
	for i, b := range blocks {
		if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
			return nil, fmt.Errorf("content[%d] is not a block object", i)
		}
		var t struct {
			Type *string `json:"type"`
		}
		if err := json.Unmarshal(b, &t); err != nil || t.Type == nil {
			return nil, fmt.Errorf(`content[%d] has no "type"`, i)
		}
	}
	return blocks, nil
}

// textOrBlocks reads a message's content, a string or an array of blocks: a string is added
// as the role's message at once (done), kept as the text it was for Encode; blocks are
// returned checked for the caller to split by type.
func (r *Request) textOrBlocks(role compaction.Role, raw json.RawMessage) (blocks []json.RawMessage, done bool, err error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		r.add(compaction.Message{Role: role, Content: s}, source{text: &s})
		return nil, true, nil
	}
	blocks, err = decodeBlocks(raw)
	return blocks, false, err
}

func (r *Request) decodeUser(raw json.RawMessage) error {
	blocks, done, err := r.textOrBlocks(compaction.RoleUser, raw)
	if done || err != nil {
		return err
	}
	if len(blocks) == 0 { // the API refuses it, but it is the agent's to send
		r.add(compaction.Message{Role: compaction.RoleUser, ContentParts: json.RawMessage("[]")}, source{blocks: blocks})
		return nil
	}
	var pending []json.RawMessage // the non-tool_result blocks of the current run
	flush := func() {
		if len(pending) == 0 {
			return
		}
		r.add(compaction.Message{Role: compaction.RoleUser, ContentParts: rawjson.JoinArray(pending)}, source{blocks: pending})
		pending = nil
	}
	for i, b := range blocks {
		var bl block
		if err := json.Unmarshal(b, &bl); err != nil {
			return fmt.Errorf("content[%d]: %v", i, err)
		}
		if bl.Type != "tool_result" {
			pending = append(pending, b)
			continue
		}
		flush()
		if bl.ToolUseID == "" {
			return fmt.Errorf(`content[%d]: a tool_result block without "tool_use_id"`, i)
		}
		m := compaction.Message{Role: compaction.RoleTool, ToolCallID: bl.ToolUseID}
		text, isText, err := resultText(bl.Content)
		if err != nil {
			return fmt.Errorf("content[%d]: %v", i, err)
		}
		if isText {
			m.Content = text
		} else {
			m.ContentParts = bl.Content
		}
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(b, &fields) // an object: decodeBlocks checked it
		r.toolResults[bl.ToolUseID] = fields
		r.add(m, source{blocks: []json.RawMessage{b}})
	}
	flush()
	return nil
}

// resultText is a tool_result's content as text when it is text only: a string, or text
// blocks (joined by newlines). Content with other blocks (an image) is not text.
func resultText(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || rawjson.IsNull(raw) {
		return "", true, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true, nil
	}
	blocks, err := decodeBlocks(raw)
	if err != nil {
		return "", false, err
	}
	texts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		var bl block
		if err := json.Unmarshal(b, &bl); err != nil {
			return "", false, err
		}
		if bl.Type != "text" {
			return "", false, nil
		}
		texts = append(texts, bl.Text)
	}
	return strings.Join(texts, "\n"), true, nil
}

func (r *Request) decodeAssistant(raw json.RawMessage) error {
	blocks, done, err := r.textOrBlocks(compaction.RoleAssistant, raw)
	if done || err != nil {
		return err
	}
	m := compaction.Message{Role: compaction.RoleAssistant}
	var texts []string
	for i, b := range blocks {
		var bl block
		if err := json.Unmarshal(b, &bl); err != nil {
			return fmt.Errorf("content[%d]: %v", i, err)
		}
		switch bl.Type {
		case "text":
			texts = append(texts, bl.Text)
		case "tool_use":
			if bl.ID == "" || bl.Name == "" {
				return fmt.Errorf(`content[%d]: a tool_use block needs "id" and "name"`, i)
			}
			args := "{}"
			if len(bl.Input) > 0 && !rawjson.IsNull(bl.Input) {
				args = string(bl.Input)
			}
			m.ToolCalls = append(m.ToolCalls, compaction.ToolCall{ID: bl.ID, Type: "function",
				Function: compaction.FunctionCall{Name: bl.Name, Arguments: args}})
		case "tool_result":
			return fmt.Errorf("content[%d]: a tool_result block in an assistant message", i)
		}
		// Other blocks (thinking, redacted_thinking, server tool use, ...) have no place in
		// the engine's model: they stay in the source, written back with the message.
	}
	m.Content = strings.Join(texts, "\n\n")
	r.add(m, source{blocks: blocks})
	return nil
}

// Encode writes the request with view (a compacted view of Messages) as its system prompt
// and messages; every other field is the request's, verbatim.
func (r *Request) Encode(view []compaction.Message) ([]byte, error) {
	srcs := r.sources.Match(view)
	out := make(map[string]json.RawMessage, len(r.fields)+2)
	for k, v := range r.fields {
		out[k] = v
	}
	var system []int
	type group struct {
		role    string
		members []int
	}
	var groups []group
	for i := range view {
		var role string
		switch view[i].Role {
		case compaction.RoleSystem:
			system = append(system, i)
			continue
		case compaction.RoleAssistant:
			role = "assistant"
		case compaction.RoleUser, compaction.RoleTool:
			role = "user"
			if srcs[i].role == "system" {
				// A system message of "messages": on its own, as it came.
				groups = append(groups, group{role: srcs[i].role, members: []int{i}})
				continue
			}
		default:
			return nil, invalid("view message %d: role %q", i, view[i].Role)
		}
		if n := len(groups); n > 0 && groups[n-1].role == role {
			groups[n-1].members = append(groups[n-1].members, i)
		} else {
			groups = append(groups, group{role: role, members: []int{i}})
		}
	}
	if len(system) > 0 {
		sys, err := r.encodeSystem(view, srcs, system)
		if err != nil {
			return nil, err
		}
		out["system"] = sys
	}
	messages := make([]json.RawMessage, 0, len(groups))
	for _, g := range groups {
		var content json.RawMessage
		if text, ok := plainText(view, srcs, g.members); ok {
			content = rawjson.MustMarshal(text)
		} else {
			var blocks []json.RawMessage
			for _, i := range g.members {
				bs, err := r.blocksOf(&view[i], srcs[i])
				if err != nil {
					return nil, invalid("view message %d: %v", i, err)
				}
				blocks = append(blocks, bs...)
			}
			content = rawjson.JoinArray(blocks)
		}
		msg := map[string]json.RawMessage{}
		for k, v := range srcs[g.members[0]].extra {
			msg[k] = v
		}
		msg["role"], msg["content"] = rawjson.MustMarshal(g.role), content
		messages = append(messages, rawjson.Object(msg))
	}
	out["messages"] = rawjson.JoinArray(messages)
	return rawjson.Object(out), nil
}

// plainText is the string content of a message made of one view message that was a string
// in the request, or is a user message a compaction wrote (the summary).
func plainText(view []compaction.Message, srcs []source, members []int) (string, bool) {
	if len(members) != 1 {
		return "", false
	}
	m, src := &view[members[0]], srcs[members[0]]
	switch {
	case src.text != nil:
		return *src.text, true
	case src.blocks == nil && m.Role == compaction.RoleUser && m.ContentParts == nil:
		return m.Content, true
	}
	return "", false
}

func (r *Request) encodeSystem(view []compaction.Message, srcs []source, idx []int) (json.RawMessage, error) {
	if len(idx) == 1 && srcs[idx[0]].text != nil {
		return rawjson.MustMarshal(*srcs[idx[0]].text), nil
	}
	var blocks []json.RawMessage
	for _, i := range idx {
		bs, err := r.blocksOf(&view[i], srcs[i])
		if err != nil {
			return nil, invalid("view message %d: %v", i, err)
		}
		blocks = append(blocks, bs...)
	}
	return rawjson.JoinArray(blocks), nil
}

// blocksOf is the content blocks of a view message: its source's, or new ones.
func (r *Request) blocksOf(m *compaction.Message, src source) ([]json.RawMessage, error) {
	switch {
	case src.blocks != nil:
		return src.blocks, nil
	case src.text != nil:
		return []json.RawMessage{textBlock(*src.text)}, nil
	}
	switch m.Role {
	case compaction.RoleTool:
		return []json.RawMessage{r.toolResultBlock(m)}, nil
	case compaction.RoleAssistant:
		var blocks []json.RawMessage
		if m.Content != "" {
			blocks = append(blocks, textBlock(m.Content))
		}
		for _, tc := range m.ToolCalls {
			input := json.RawMessage(tc.Function.Arguments)
			if !json.Valid(input) {
				return nil, fmt.Errorf("tool call %s: arguments are not JSON", tc.ID)
			}
			blocks = append(blocks, rawjson.MustMarshal(struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			}{"tool_use", tc.ID, tc.Function.Name, input}))
		}
		return blocks, nil
	}
	if m.ContentParts != nil {
		return decodeBlocks(m.ContentParts)
	}
	return []json.RawMessage{textBlock(m.Content)}, nil
}

// toolResultBlock is a tool_result with a compaction's new content (an offload placeholder),
// keeping the request's other fields of that result (is_error, cache_control).
func (r *Request) toolResultBlock(m *compaction.Message) json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range r.toolResults[m.ToolCallID] {
		out[k] = v
	}
	out["type"] = rawjson.MustMarshal("tool_result")
	out["tool_use_id"] = rawjson.MustMarshal(m.ToolCallID)
	if m.ContentParts != nil {
		out["content"] = m.ContentParts
	} else {
		out["content"] = rawjson.MustMarshal(m.Content)
	}
	return rawjson.MustMarshal(out)
}

func textBlock(text string) json.RawMessage {
	return rawjson.MustMarshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{"text", text})
}
