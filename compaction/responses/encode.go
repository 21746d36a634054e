package responses

import (
	"encoding/json"
	"fmt"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/rawjson"
)

// Encode writes the request with view (a compacted view of Messages) as its instructions and
// input; every other field is the request's, verbatim.
func (r *Request) Encode(view []compaction.Message) ([]byte, error) {
	srcs := r.sources.Match(view)
	out := make(map[string]json.RawMessage, len(r.fields)+2)
	for k, v := range r.fields {
		out[k] = v
	}
	items := make([]json.RawMessage, 0, len(view))
	var inputSrc *source // the source of the only item, when it is the string input
	for i := range view {
		m, src := &view[i], srcs[i]
		if !validRole(m.Role) {
			return nil, invalid("view message %d: role %q", i, m.Role)
		}
		switch {
		case src != nil && src.instructions != nil && out["instructions"] == nil:
			out["instructions"] = src.instructions
			continue
		case src != nil && src.instructions != nil:
			items = append(items, messageItem("system", src.instructions))
		case src != nil && src.input != nil:
			inputSrc = src
			items = append(items, messageItem("user", src.input))
		case src != nil && src.items != nil:
			items = append(items, src.items...)
		default:
			built, err := r.build(m)
			if err != nil {
				return nil, invalid("view message %d: %v", i, err)
			}
			items = append(items, built...)
		}
		if inputSrc != nil && len(items) > 1 {
			inputSrc = nil
		}
	}
	switch {
	case inputSrc != nil && len(items) == 1:
		out["input"] = inputSrc.input
	case r.hasInput || len(items) > 0:
		out["input"] = rawjson.JoinArray(items)
	}
	return rawjson.Object(out), nil
}

func validRole(r compaction.Role) bool {
	switch r {
	case compaction.RoleSystem, compaction.RoleUser, compaction.RoleAssistant, compaction.RoleTool:
		return true
	}
	return false
}

// build writes a message a compaction wrote (or changed).
func (r *Request) build(m *compaction.Message) ([]json.RawMessage, error) {
	if m.ContentParts != nil && !json.Valid(m.ContentParts) {
		return nil, fmt.Errorf("content parts are not JSON")
	}
	switch m.Role {
	case compaction.RoleTool:
		return r.buildOutput(m)
	case compaction.RoleAssistant:
		return r.buildAssistant(m)
	}
	var c json.RawMessage
	if m.ContentParts != nil {
		c = m.ContentParts
	} else {
		c = textContent("input_text", m.Content)
	}
	return []json.RawMessage{messageItem(string(m.Role), c)}, nil
}

// messageItem is a message item of role with content c (JSON).
func messageItem(role string, c json.RawMessage) json.RawMessage {
	return rawjson.Object(map[string]json.RawMessage{"type": rawjson.MustMarshal("message"), "role": rawjson.MustMarshal(role), "content": c})
}

// textContent is content made of one text part of type typ.
func textContent(typ, text string) json.RawMessage {
	return rawjson.MustMarshal([]struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{{typ, text}})
}

// buildAssistant writes an assistant message that is not one of the request's, typically one
// the compaction changed: a call dropped (its output was cut), its text shortened. When its
// calls come from one turn of the request, that turn's items are the base: reasoning and
// hosted tool items are kept in their order, the calls still there written as they came,
// and the text replaced when it changed. Anything else is built anew.
func (r *Request) buildAssistant(m *compaction.Message) ([]json.RawMessage, error) {
	var base *source
	for _, tc := range m.ToolCalls {
		if base = r.turns[tc.ID]; base != nil {
			break
		}
	}
	calls := make(map[string]*compaction.ToolCall, len(m.ToolCalls))
	for i := range m.ToolCalls {
		calls[m.ToolCalls[i].ID] = &m.ToolCalls[i]
	}
	var out []json.RawMessage
	newText := func() json.RawMessage {
		if m.ContentParts != nil {
			return messageItem("assistant", m.ContentParts)
		}
		return messageItem("assistant", textContent("output_text", m.Content))
	}
	wroteText := m.Content == "" && m.ContentParts == nil
	if base != nil {
		sameText := m.ContentParts == nil && m.Content == base.content
		for i, raw := range base.items {
			switch base.kinds[i] {
			case kindAssistant:
				if sameText {
					out = append(out, raw)
				} else if !wroteText {
					out = append(out, newText())
				}
				wroteText = true
			case kindCall:
				id := base.callIDs[i]
				if tc := calls[id]; tc != nil && r.sameCall(tc) {
					out = append(out, raw)
					delete(calls, id)
				}
			default:
				out = append(out, raw)
			}
		}
	}
	if !wroteText {
		out = append([]json.RawMessage{newText()}, out...)
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		if calls[tc.ID] == nil {
			continue // written from the base
		}
		if r.sameCall(tc) {
			out = append(out, r.calls[tc.ID].raw)
			continue
		}
		out = append(out, rawjson.MustMarshal(struct {
			Type      string `json:"type"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}{typeFunctionCall, tc.ID, tc.Function.Name, tc.Function.Arguments}))
	}
	return out, nil
}

// sameCall reports whether tc is the request's call of that id, unchanged.
func (r *Request) sameCall(tc *compaction.ToolCall) bool {
	c := r.calls[tc.ID]
	return c != nil && c.name == tc.Function.Name && c.args == tc.Function.Arguments
}

// buildOutput writes a tool message the compaction wrote: an offloaded output's placeholder,
// or the synthetic result of a call the view closes. It is an output item of the type the
// call is answered with, keeping the request's other fields of that output (status, caller,
// max_output_length) but its id, which names the original output. An output type that
// cannot hold text (a screenshot, an approval, a tool list) is written as the request had it,
// or not at all when the request has none: the call is then as unanswered as it was.
func (r *Request) buildOutput(m *compaction.Message) ([]json.RawMessage, error) {
	id := m.ToolCallID
	callType := typeFunctionCall
	if c := r.calls[id]; c != nil {
		callType = c.typ
	}
	orig := r.outputs[id]
	typ := defaultOutput[callType]
	switch {
	case orig != nil:
		typ = orig.typ
	case r.outputTypes[callType] != "":
		typ = r.outputTypes[callType]
	}
	fields := map[string]json.RawMessage{}
	if orig != nil {
		for k, v := range orig.fields {
			fields[k] = v
		}
		if _, ok := fields["call_id"]; ok || typ != typeLocalShellCallOutput {
			delete(fields, "id") // local_shell_call_output's id may be the call's id
		}
	}
	text := m.Content
	if text == "" && m.ContentParts != nil {
		text = string(m.ContentParts)
	}
	fields["type"] = rawjson.MustMarshal(typ)
	if _, ok := fields["id"]; !ok {
		fields["call_id"] = rawjson.MustMarshal(id)
	}
	switch typ {
	case "function_call_output", "custom_tool_call_output":
		if m.ContentParts != nil && m.Content == "" {
			fields["output"] = m.ContentParts
		} else {
			fields["output"] = rawjson.MustMarshal(text)
		}
	case typeLocalShellCallOutput:
		fields["output"] = rawjson.MustMarshal(text)
	case "apply_patch_call_output":
		fields["output"] = rawjson.MustMarshal(text)
		if _, ok := fields["status"]; !ok {
			fields["status"] = rawjson.MustMarshal("completed")
		}
	case "program_output":
		fields["result"] = rawjson.MustMarshal(text)
		if _, ok := fields["status"]; !ok {
			fields["status"] = rawjson.MustMarshal("completed")
		}
	case "shell_call_output":
		outcome := json.RawMessage(`{"type":"exit","exit_code":0}`)
		if orig != nil {
			var chunks []struct {
				Outcome json.RawMessage `json:"outcome"`
			}
			if json.Unmarshal(orig.fields["output"], &chunks) == nil && len(chunks) > 0 && len(chunks[len(chunks)-1].Outcome) > 0 {
				outcome = chunks[len(chunks)-1].Outcome
			}
		}
		fields["output"] = rawjson.MustMarshal([]struct {
			Stdout  string          `json:"stdout"`
			Stderr  string          `json:"stderr"`
			Outcome json.RawMessage `json:"outcome"`
		}{{text, "", outcome}})
	default: // no text fits
		if orig != nil {
			return []json.RawMessage{orig.raw}, nil
		}
		return nil, nil
	}
	return []json.RawMessage{rawjson.Object(fields)}, nil
}
