package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/rawjson"
)

// entry is a non-system view message on its way to a content.
type entry struct {
	i     int
	model bool
	src   *source
	parts []json.RawMessage
}

// Encode writes the request with view (a compacted view of Messages) as its system
// instruction and contents; every other field is the request's, verbatim and in its place.
func (r *Request) Encode(view []compaction.Message) ([]byte, error) {
	srcs := r.sources.Match(view)
	var system []int
	var entries []entry
	for i := range view {
		e := entry{i: i, src: srcs[i]}
		switch view[i].Role {
		case compaction.RoleSystem:
			system = append(system, i)
			continue
		case compaction.RoleAssistant:
			e.model = true
		case compaction.RoleUser, compaction.RoleTool:
		default:
			return nil, invalid("view message %d: role %q", i, view[i].Role)
		}
		if e.src != nil {
			e.parts = e.src.parts
		} else {
			var err error
			if e.parts, err = r.rebuild(view, i); err != nil {
				return nil, invalid("view message %d: %v", i, err)
			}
			if len(e.parts) == 0 {
				continue // nothing to say (an assistant message left with no call)
			}
		}
		entries = append(entries, e)
	}
	var sys json.RawMessage
	if len(system) > 0 {
		var err error
		if sys, err = r.encodeSystem(view, srcs, system); err != nil {
			return nil, err
		}
	}
	contents := r.encodeContents(view, entries)

	out := make([]member, 0, len(r.fields)+1)
	for _, m := range r.fields {
		switch {
		case r.systemKey != "" && m.key == r.systemKey:
			switch {
			case sys != nil:
				out = append(out, member{m.key, sys})
			case r.system == nil:
				out = append(out, m) // null, as it came
			}
		case m.key == r.contentsKey:
			if sys != nil && r.systemKey == "" {
				out = append(out, member{"systemInstruction", sys})
			}
			out = append(out, member{m.key, contents})
		default:
			out = append(out, m)
		}
	}
	body := object(out)
	if r.outer == nil {
		return body, nil
	}
	wrapped := make([]member, len(r.outer))
	for i, m := range r.outer {
		if m.key == r.outerKey {
			m.value = body
		}
		wrapped[i] = m
	}
	return object(wrapped), nil
}

// encodeContents groups the entries into contents: one per run of one side, except that the
// request's own consecutive contents of one side stay apart.
func (r *Request) encodeContents(view []compaction.Message, entries []entry) json.RawMessage {
	var groups [][]entry
	for k, e := range entries {
		if k > 0 {
			prev := entries[k-1]
			split := prev.model != e.model ||
				prev.src != nil && e.src != nil && prev.src.content >= 0 && e.src.content == prev.src.content+1
			if !split {
				n := len(groups) - 1
				groups[n] = append(groups[n], e)
				continue
			}
		}
		groups = append(groups, []entry{e})
	}
	out := make([]json.RawMessage, 0, len(groups))
	var calls []string // the calls of the latest model content
	for _, g := range groups {
		if g[0].model {
			calls = calls[:0]
			for _, e := range g {
				for _, tc := range view[e.i].ToolCalls {
					calls = append(calls, tc.ID)
				}
			}
		}
		if raw, ok := r.whole(g); ok {
			out = append(out, raw)
			continue
		}
		role := roleUser
		if g[0].model {
			role = roleModel
		} else {
			// Tool responses first, in the order of the calls they answer, then the rest.
			slices.SortStableFunc(g, func(a, b entry) int {
				return rank(view, calls, a) - rank(view, calls, b)
			})
		}
		var parts []json.RawMessage
		for _, e := range g {
			parts = append(parts, e.parts...)
		}
		out = append(out, object([]member{{"role", rawjson.MustMarshal(role)}, {keyParts, rawjson.JoinArray(parts)}}))
	}
	return rawjson.JoinArray(out)
}

// rank orders a user-side content's entries: a tool response by the place of its call, then
// everything else.
func rank(view []compaction.Message, calls []string, e entry) int {
	if m := &view[e.i]; m.Role == compaction.RoleTool {
		if k := slices.Index(calls, m.ToolCallID); k >= 0 {
			return k
		}
		return len(calls)
	}
	return len(calls) + 1
}

// whole is the request's content the group is, all of it in its order, verbatim.
func (r *Request) whole(g []entry) (json.RawMessage, bool) {
	c := -1
	for k, e := range g {
		if e.src == nil || e.src.content < 0 || e.src.ordinal != k || k > 0 && e.src.content != c {
			return nil, false
		}
		c = e.src.content
	}
	if len(g) != r.contents[c].msgs {
		return nil, false
	}
	return r.contents[c].raw, true
}

func (r *Request) encodeSystem(view []compaction.Message, srcs []*source, idx []int) (json.RawMessage, error) {
	if len(idx) == 1 && srcs[idx[0]] != nil && srcs[idx[0]].content == -1 && r.system != nil {
		return r.system.raw, nil
	}
	var parts []json.RawMessage
	for _, i := range idx {
		switch src := srcs[i]; {
		case src != nil && src.text != nil:
			parts = append(parts, textPart(*src.text))
		case src != nil:
			parts = append(parts, src.parts...)
		default:
			ps, err := userParts(&view[i])
			if err != nil {
				return nil, invalid("view message %d: %v", i, err)
			}
			parts = append(parts, ps...)
		}
	}
	members := []member{{keyParts, rawjson.JoinArray(parts)}}
	if r.system != nil && r.system.role != nil {
		members = append([]member{{"role", r.system.role}}, members...)
	}
	return object(members), nil
}

// rebuild is the parts of a view message the request does not have: one a compaction wrote
// or changed.
func (r *Request) rebuild(view []compaction.Message, i int) ([]json.RawMessage, error) {
	m := &view[i]
	switch m.Role {
	case compaction.RoleTool:
		p, err := r.responsePart(view, i)
		if err != nil {
			return nil, err
		}
		return []json.RawMessage{p}, nil
	case compaction.RoleAssistant:
		return r.modelParts(m)
	}
	return userParts(m)
}

// responsePart is a functionResponse part with a compaction's content for a call (an
// offload placeholder, or the result that closes a call the history does not answer),
// keeping the request's other fields of that response.
func (r *Request) responsePart(view []compaction.Message, i int) (json.RawMessage, error) {
	m := &view[i]
	c := r.calls[m.ToolCallID]
	if c != nil && c.resp != nil && m.ContentParts != nil {
		return c.resp.part, nil // a multimodal response is never rewritten: the request's
	}
	name, id, key := "", "", "output"
	var fields []member
	if c != nil {
		name, id = c.name, c.realID
		if c.resp != nil {
			fields = c.resp.fields
			if c.resp.key != "" {
				key = c.resp.key
			}
		}
	} else {
		for k := i - 1; k >= 0 && name == ""; k-- {
			for _, tc := range view[k].ToolCalls {
				if tc.ID == m.ToolCallID {
					name, id = tc.Function.Name, tc.ID
				}
			}
		}
	}
	if name == "" {
		return nil, fmt.Errorf("a tool result for %q, a call neither the request nor the view makes", m.ToolCallID)
	}
	text := m.Content
	if m.ContentParts != nil {
		text = partsText(m.ContentParts)
	}
	out := make([]member, 0, len(fields)+3)
	for _, f := range fields {
		switch f.key {
		case keyName, "id", keyResponse, keyParts:
		default:
			out = append(out, f)
		}
	}
	if id == "" {
		for _, f := range fields {
			if f.key == "id" {
				_ = json.Unmarshal(f.value, &id)
			}
		}
	}
	if id != "" {
		out = append(out, member{"id", rawjson.MustMarshal(id)})
	}
	out = append(out, member{keyName, rawjson.MustMarshal(name)},
		member{keyResponse, object([]member{{key, rawjson.MustMarshal(text)}})})
	return object([]member{{"functionResponse", object(out)}}), nil
}

// modelParts is a model content for an assistant message the request does not have as it
// is (the engine dropped a call it found unanswered): its text, then its calls, each the
// request's own part when the call is the request's.
func (r *Request) modelParts(m *compaction.Message) ([]json.RawMessage, error) {
	var parts []json.RawMessage
	if m.Content != "" {
		parts = append(parts, textPart(m.Content))
	}
	first := true
	for _, tc := range m.ToolCalls {
		c := r.calls[tc.ID]
		if c != nil && c.name == tc.Function.Name && c.args == tc.Function.Arguments {
			p := c.part
			if first {
				p = r.signed(p)
			}
			parts = append(parts, p)
			first = false
			continue
		}
		args := json.RawMessage(tc.Function.Arguments)
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage("{}")
		}
		if t := bytes.TrimSpace(args); !json.Valid(t) || t[0] != '{' {
			return nil, fmt.Errorf("tool call %s: arguments are not a JSON object", tc.ID)
		}
		fc := []member{{keyName, rawjson.MustMarshal(tc.Function.Name)}, {"args", args}}
		switch {
		case c != nil && c.realID != "":
			fc = append(fc, member{"id", rawjson.MustMarshal(c.realID)})
		case c == nil:
			fc = append(fc, member{"id", rawjson.MustMarshal(tc.ID)})
		}
		p := object([]member{{"functionCall", object(fc)}})
		if first {
			p = r.signed(p)
		}
		parts = append(parts, p)
		first = false
	}
	return parts, nil
}

// signed is a rebuilt model content's first function call part, with the synthetic
// signature when it has none and the request carries signatures (the API wants one there).
// The part's own bytes are kept; the signature is written after its last member.
func (r *Request) signed(p json.RawMessage) json.RawMessage {
	if !r.signatures {
		return p
	}
	members, err := decodeObject(p)
	if err != nil || len(members) == 0 {
		return p
	}
	for _, m := range members {
		if canonicalKey(m.key) == "thoughtSignature" {
			return p
		}
	}
	t := bytes.TrimSpace(p)
	out := make(json.RawMessage, 0, len(t)+64)
	out = append(out, t[:len(t)-1]...)
	out = append(out, `,"thoughtSignature":`...)
	out = append(out, rawjson.MustMarshal(SyntheticThoughtSignature)...)
	return append(out, '}')
}

// userParts is the parts of a user message the request does not have: its text, or its
// content parts (as contentParts writes them, or OpenAI-style text parts).
func userParts(m *compaction.Message) ([]json.RawMessage, error) {
	if m.ContentParts == nil {
		if m.Content == "" {
			return nil, nil
		}
		return []json.RawMessage{textPart(m.Content)}, nil
	}
	var items []struct {
		Type string          `json:"type"`
		Text string          `json:"text"`
		Part json.RawMessage `json:"part"`
	}
	if err := json.Unmarshal(m.ContentParts, &items); err != nil {
		return nil, fmt.Errorf("content parts: %v", err)
	}
	out := make([]json.RawMessage, 0, len(items))
	for k, it := range items {
		switch {
		case len(it.Part) > 0 && !rawjson.IsNull(it.Part):
			out = append(out, it.Part)
		case it.Type == kindText:
			out = append(out, textPart(it.Text))
		default:
			return nil, fmt.Errorf("content part %d (%q) has no Gemini part", k, it.Type)
		}
	}
	return out, nil
}

// partsText is the text of content parts: their text parts, joined.
func partsText(raw json.RawMessage) string {
	var items []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &items) != nil {
		return string(raw)
	}
	var b strings.Builder
	for _, it := range items {
		b.WriteString(it.Text)
	}
	return b.String()
}

func textPart(text string) json.RawMessage {
	return object([]member{{keyText, rawjson.MustMarshal(text)}})
}
