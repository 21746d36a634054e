// Package gemini converts a Gemini API GenerateContentRequest (the body of POST
// /v1beta/models/{model}:generateContent and :streamGenerateContent, and of :countTokens in
// either of its forms) to the engine's message model and back, so that a Gemini CLI
// conversation can be compacted like an OpenAI one.
//
// The mapping:
//   - systemInstruction (a Content; a plain string is accepted too) is one system message.
//   - A "model" content is one assistant message: its text parts (thoughts excepted) are the
//     content, its functionCall parts the tool calls (args verbatim as the arguments; the
//     call's id, or "gemini-<content>-<part>" when it has none).
//   - A "user" (or legacy "function") content's functionResponse parts are tool messages, one
//     each, paired with the calls of the model content before them: by id when the ids
//     agree, else by position (the i-th response answers the i-th call), else by name. Its
//     other parts are one user message after them: its text when it has only text parts, else
//     content parts in which an inlineData or fileData part counts as an image.
//
// Encode goes back. A message of the compacted view that is one the request had is written
// as the request had it, byte for byte: its parts with their thoughtSignature, thought parts,
// images and any part or field this package does not know; a content kept whole is written
// whole. Only the messages a compaction wrote (the summary, an offloaded result's
// placeholder, a closed call's result) are built anew. Consecutive user-side messages (user
// and tool) make one user content, so roles alternate as the API wants; the request's own
// consecutive contents of one role stay apart.
package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/internal/sources"
	"github.com/harness9/compaction-operator/internal/rawjson"
)

// ErrInvalidRequest is wrapped by every error DecodeRequest and Encode return for a request
// or a view they cannot convert.
var ErrInvalidRequest = errors.New("invalid Gemini GenerateContent request")

// SyntheticThoughtSignature is the signature a rebuilt model content's first function call
// gets when it has none, in a request that carries signatures: the value Gemini CLI uses for
// the calls it writes itself, which the API accepts in place of a real signature.
const SyntheticThoughtSignature = "skip_thought_signature_validator"

// Request is a decoded GenerateContentRequest.
type Request struct {
	// Messages is the conversation in the engine's model: the system instruction first (when
	// the request has one), then every content of the request.
	Messages []compaction.Message

	// outer are the members of a countTokens body that wraps the request in
	// "generateContentRequest" (outerKey), verbatim; nil for a bare request.
	outer    []member
	outerKey string
	// fields are the request's members in their order, verbatim; the values of the system
	// instruction's and the contents' keys are rewritten by Encode.
	fields      []member
	systemKey   string
	contentsKey string

	system   *content  // the systemInstruction, when there is one
	contents []content // the request's contents
	// sources maps an engine message's fingerprint to what it was decoded from, the latest
	// last (see Encode).
	sources sources.Index[*source]
	// calls maps a tool call's engine id to what the request says of it.
	calls map[string]*call
	// signatures is whether any part of the request has a thoughtSignature.
	signatures bool
}

type member struct {
	key   string
	value json.RawMessage
}

// content is one content of the request (or its system instruction), verbatim.
type content struct {
	raw  json.RawMessage
	role json.RawMessage // the "role" member as it came, nil when absent
	msgs int             // the engine messages decoded from it
}

// source is what an engine message was decoded from: some parts of one content.
type source struct {
	content int // index in contents; -1 for the system instruction
	ordinal int // the message's place among those of its content
	parts   []json.RawMessage
	text    *string // a system instruction sent as a plain string
}

// call is a function call of the request and the response that answers it.
type call struct {
	name   string
	realID string // the functionCall's own id, "" when it has none
	args   string
	part   json.RawMessage
	resp   *response
}

type response struct {
	part   json.RawMessage
	fields []member // the functionResponse object's members
	key    string   // the member of "response" the tool message's content is, "" when the whole
}

// Member names of the API's objects.
const (
	keyText     = "text"
	keyName     = "name"
	keyParts    = "parts"
	keyResponse = "response"
)

// The roles of a content.
const (
	roleUser  = "user"
	roleModel = "model"
)

// The kinds of a part (part.kind); contentParts writes them as the content parts' "type".
const (
	kindText     = "text"
	kindThought  = "thought"
	kindCall     = "call"
	kindResponse = "response"
	kindMedia    = "media"
	kindCode     = "code"
	kindOther    = "other"
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// Field names, camelCase as the SDK writes them; the API also takes the proto's snake_case.
var aliases = map[string]string{
	"system_instruction":       "systemInstruction",
	"generate_content_request": "generateContentRequest",
	"function_call":            "functionCall",
	"function_response":        "functionResponse",
	"inline_data":              "inlineData",
	"file_data":                "fileData",
	"executable_code":          "executableCode",
	"code_execution_result":    "codeExecutionResult",
	"thought_signature":        "thoughtSignature",
	"mime_type":                "mimeType",
}

func canonicalKey(k string) string {
	if a, ok := aliases[k]; ok {
		return a
	}
	return k
}

// DecodeRequest decodes a GenerateContentRequest body, or a countTokens body in either form
// ({"contents": ...} or {"generateContentRequest": {...}}).
func DecodeRequest(body []byte) (*Request, error) {
	if !utf8.Valid(body) {
		return nil, invalid("the body is not valid UTF-8")
	}
	fields, err := decodeObject(body)
	if err != nil {
		return nil, invalid("the body is not a JSON object: %v", err)
	}
	r := &Request{sources: sources.New[*source](), calls: map[string]*call{}}
	if _, ok := find(fields, "contents"); !ok {
		if k, inner, ok := findKey(fields, "generateContentRequest"); ok {
			r.outer, r.outerKey = fields, k
			if fields, err = decodeObject(inner); err != nil {
				return nil, invalid("%q is not a JSON object: %v", k, err)
			}
		}
	}
	r.fields = fields
	rawContents, ok := find(fields, "contents")
	if !ok {
		return nil, invalid(`no "contents"`)
	}
	r.contentsKey = "contents"
	var contents []json.RawMessage
	if err := json.Unmarshal(rawContents, &contents); err != nil || rawjson.IsNull(rawContents) {
		return nil, invalid(`"contents" is not an array of contents`)
	}
	if err := r.decodeSystem(); err != nil {
		return nil, err
	}
	d := decoder{r: r}
	for i, c := range contents {
		if err := d.decodeContent(i, c); err != nil {
			return nil, invalid("contents[%d]: %v", i, err)
		}
	}
	return r, nil
}

func (r *Request) decodeSystem() error {
	var key string
	var raw json.RawMessage
	for _, m := range r.fields {
		if canonicalKey(m.key) != "systemInstruction" {
			continue
		}
		if key != "" && key != m.key {
			return invalid("both %q and %q", key, m.key)
		}
		key, raw = m.key, m.value
	}
	if key == "" {
		return nil
	}
	r.systemKey = key
	if rawjson.IsNull(raw) {
		return nil
	}
	c := content{raw: raw, msgs: 1}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		r.system = &c
		r.add(compaction.Message{Role: compaction.RoleSystem, Content: s}, &source{content: -1, text: &s})
		return nil
	}
	role, parts, err := decodeContentObject(raw)
	if err != nil {
		return invalid("%q: %v", key, err)
	}
	c.role = role
	r.system = &c
	m := compaction.Message{Role: compaction.RoleSystem}
	ps := make([]part, len(parts))
	for i, p := range parts {
		if ps[i], err = parsePart(p); err != nil {
			return invalid("%q.parts[%d]: %v", key, i, err)
		}
		r.signatures = r.signatures || ps[i].signed
	}
	setUserContent(&m, ps)
	r.add(m, &source{content: -1, parts: parts})
	return nil
}

// decodeContentObject reads a Content: its role member (raw) and its parts.
func decodeContentObject(raw json.RawMessage) (json.RawMessage, []json.RawMessage, error) {
	members, err := decodeObject(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("not a content object: %v", err)
	}
	role, _ := find(members, "role")
	rawParts, ok := find(members, keyParts)
	if !ok || rawjson.IsNull(rawParts) {
		return role, nil, nil
	}
	if t := bytes.TrimSpace(rawParts); len(t) > 0 && t[0] == '{' {
		return role, []json.RawMessage{t}, nil // one part for the repeated field, as proto JSON allows
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(rawParts, &parts); err != nil {
		return nil, nil, fmt.Errorf(`"parts" is not an array of parts`)
	}
	return role, parts, nil
}

// part is one part of a content, with what this package reads of it.
type part struct {
	raw    json.RawMessage
	kind   string // one of the kind constants
	text   string // text, code or output
	plain  bool   // a text part with no other member
	signed bool   // has a thoughtSignature
	call   struct {
		name, id string
		args     json.RawMessage
	}
	resp struct {
		name, id string
		response json.RawMessage
		parts    []json.RawMessage
		fields   []member
	}
}

func parsePart(raw json.RawMessage) (part, error) {
	p := part{raw: raw, kind: kindOther}
	members, err := decodeObject(raw)
	if err != nil {
		return p, fmt.Errorf("not a part object: %v", err)
	}
	var thought, text, media, code, isCall, isResp bool
	for _, m := range members {
		v := m.value
		switch canonicalKey(m.key) {
		case keyText:
			if err := json.Unmarshal(v, &p.text); err != nil || rawjson.IsNull(v) {
				return p, fmt.Errorf(`"text" is not a string`)
			}
			text = true
		case "thought":
			if !rawjson.IsNull(v) && json.Unmarshal(v, &thought) != nil {
				return p, fmt.Errorf(`"thought" is not a boolean`)
			}
		case "thoughtSignature":
			p.signed = true
		case "functionCall":
			if err := p.parseCall(v); err != nil {
				return p, fmt.Errorf("functionCall: %v", err)
			}
			isCall = true
		case "functionResponse":
			if err := p.parseResponse(v); err != nil {
				return p, fmt.Errorf("functionResponse: %v", err)
			}
			isResp = true
		case "inlineData", "fileData":
			media = true
		case "executableCode", "codeExecutionResult":
			var c struct {
				Code   string `json:"code"`
				Output string `json:"output"`
			}
			_ = json.Unmarshal(v, &c) // other shapes are the API's to judge
			code, p.text = true, c.Code+c.Output
		}
	}
	switch {
	case isCall && isResp:
		return p, fmt.Errorf("both a functionCall and a functionResponse")
	case isCall:
		p.kind = kindCall
	case isResp:
		p.kind = kindResponse
	case media:
		p.kind = kindMedia
	case code && !text:
		p.kind = kindCode
	case text && thought:
		p.kind = kindThought
	case text:
		p.kind, p.plain = kindText, len(members) == 1
	}
	return p, nil
}

func (p *part) parseCall(v json.RawMessage) error {
	if _, err := parseFunction(v, &p.call.name, &p.call.id, "args", &p.call.args, nil); err != nil {
		return err
	}
	if p.call.name == "" {
		return fmt.Errorf(`no "name"`)
	}
	return nil
}

func (p *part) parseResponse(v json.RawMessage) error {
	members, err := parseFunction(v, &p.resp.name, &p.resp.id, keyResponse, &p.resp.response, func(m member) error {
		if m.key == keyParts && !rawjson.IsNull(m.value) && json.Unmarshal(m.value, &p.resp.parts) != nil {
			return fmt.Errorf(`"parts" is not an array`)
		}
		return nil
	})
	p.resp.fields = members
	return err
}

// parseFunction decodes a functionCall or functionResponse object and reads the members both
// have: name and id (strings, null for none) and objKey (args, response: an object, null for
// none). Every other member goes to more, in order; the first error ends it.
func parseFunction(v json.RawMessage, name, id *string, objKey string, obj *json.RawMessage, more func(member) error) ([]member, error) {
	members, err := decodeObject(v)
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		switch m.key {
		case keyName:
			if err := json.Unmarshal(m.value, name); err != nil {
				return members, fmt.Errorf(`"name" is not a string`)
			}
		case "id":
			if !rawjson.IsNull(m.value) && json.Unmarshal(m.value, id) != nil {
				return members, fmt.Errorf(`"id" is not a string`)
			}
		case objKey:
			if !rawjson.IsNull(m.value) {
				if t := bytes.TrimSpace(m.value); len(t) == 0 || t[0] != '{' {
					return members, fmt.Errorf("%q is not an object", objKey)
				}
				*obj = m.value
			}
		default:
			if more != nil {
				if err := more(m); err != nil {
					return members, err
				}
			}
		}
	}
	return members, nil
}

// decoder decodes the contents in order, pairing responses with the calls before them.
type decoder struct {
	r *Request
	// pending are the calls of the latest model content; answered counts the responses seen
	// since it, for pairing by position.
	pending  []*pendingCall
	answered int
	ids      map[string]bool
}

type pendingCall struct {
	id   string
	c    *call
	done bool
}

func (d *decoder) decodeContent(ci int, raw json.RawMessage) error {
	r := d.r
	roleRaw, parts, err := decodeContentObject(raw)
	if err != nil {
		return err
	}
	role := roleUser // the API's default for a content without a role
	if roleRaw != nil && !rawjson.IsNull(roleRaw) {
		if err := json.Unmarshal(roleRaw, &role); err != nil {
			return fmt.Errorf(`"role" is not a string`)
		}
		if role == "" {
			role = roleUser
		}
	}
	ps := make([]part, len(parts))
	for i, p := range parts {
		if ps[i], err = parsePart(p); err != nil {
			return fmt.Errorf("parts[%d]: %v", i, err)
		}
		r.signatures = r.signatures || ps[i].signed
	}
	first := len(r.Messages)
	switch role {
	case roleModel:
		err = d.decodeModel(ci, ps)
	case roleUser, "function":
		err = d.decodeUser(ci, ps)
	default:
		err = fmt.Errorf("role %q is neither user nor model", role)
	}
	if err != nil {
		return err
	}
	r.contents = append(r.contents, content{raw: raw, role: roleRaw, msgs: len(r.Messages) - first})
	return nil
}

func (d *decoder) decodeModel(ci int, ps []part) error {
	m := compaction.Message{Role: compaction.RoleAssistant}
	var text strings.Builder
	d.pending, d.answered = nil, 0
	for pi, p := range ps {
		switch p.kind {
		case kindText:
			text.WriteString(p.text)
		case kindCode:
			text.WriteString("\n" + p.text + "\n")
		case kindResponse:
			return fmt.Errorf("parts[%d]: a functionResponse in a model content", pi)
		case kindCall:
			id := d.uniqueID(p.call.id, "gemini-"+strconv.Itoa(ci)+"-"+strconv.Itoa(pi))
			args := "{}"
			if p.call.args != nil {
				args = string(p.call.args)
			}
			c := &call{name: p.call.name, realID: p.call.id, args: args, part: p.raw}
			d.r.calls[id] = c
			d.pending = append(d.pending, &pendingCall{id: id, c: c})
			m.ToolCalls = append(m.ToolCalls, compaction.ToolCall{ID: id, Type: "function",
				Function: compaction.FunctionCall{Name: p.call.name, Arguments: args}})
		}
		// Thoughts, media and unknown parts have no place in the engine's model: they stay in
		// the source, written back with the message.
	}
	m.Content = text.String()
	d.r.add(m, &source{content: ci, parts: raws(ps)})
	return nil
}

// uniqueID is the call's own id when it has one no other call has, else the synthetic one
// (made unique too).
func (d *decoder) uniqueID(own, synthetic string) string {
	if d.ids == nil {
		d.ids = map[string]bool{}
	}
	id := own
	if id == "" || d.ids[id] {
		id = synthetic
		for n := 2; d.ids[id]; n++ {
			id = synthetic + "#" + strconv.Itoa(n)
		}
	}
	d.ids[id] = true
	return id
}

func (d *decoder) decodeUser(ci int, ps []part) error {
	r := d.r
	var rest []part
	ordinal := 0
	for pi, p := range ps {
		switch p.kind {
		case kindCall:
			return fmt.Errorf("parts[%d]: a functionCall in a user content", pi)
		case kindResponse:
		default:
			rest = append(rest, p)
			continue
		}
		pc := d.pair(&p)
		if pc == nil {
			return fmt.Errorf("parts[%d]: functionResponse %q (id %q) answers no call of the model content before it", pi, p.resp.name, p.resp.id)
		}
		pc.done = true
		d.answered++
		resp := &response{part: p.raw, fields: p.resp.fields}
		pc.c.resp = resp
		m := compaction.Message{Role: compaction.RoleTool, ToolCallID: pc.id}
		m.Content, resp.key = responseText(p.resp.response)
		if len(p.resp.parts) > 0 { // multimodal response: its images count as images
			nested := make([]part, 0, len(p.resp.parts)+1)
			nested = append(nested, part{kind: kindText, text: m.Content, plain: true})
			for j, np := range p.resp.parts {
				q, err := parsePart(np)
				if err != nil {
					return fmt.Errorf("parts[%d].functionResponse.parts[%d]: %v", pi, j, err)
				}
				nested = append(nested, q)
			}
			m.Content, m.ContentParts = "", contentParts(nested)
		}
		r.add(m, &source{content: ci, ordinal: ordinal, parts: []json.RawMessage{p.raw}})
		ordinal++
	}
	if len(rest) > 0 || ordinal == 0 {
		m := compaction.Message{Role: compaction.RoleUser}
		setUserContent(&m, rest)
		r.add(m, &source{content: ci, ordinal: ordinal, parts: raws(rest)})
	}
	return nil
}

// pair finds the call a functionResponse answers: the pending call with its id, else the
// call at its position, else the first unanswered call of its name.
func (d *decoder) pair(p *part) *pendingCall {
	if p.resp.id != "" {
		for _, pc := range d.pending {
			if !pc.done && pc.c.realID == p.resp.id {
				return pc
			}
		}
	}
	if d.answered < len(d.pending) {
		if pc := d.pending[d.answered]; !pc.done && (p.resp.name == "" || pc.c.name == p.resp.name) {
			return pc
		}
	}
	for _, pc := range d.pending {
		if !pc.done && pc.c.name == p.resp.name {
			return pc
		}
	}
	if d.answered < len(d.pending) && !d.pending[d.answered].done {
		return d.pending[d.answered] // a name the call does not have: its place decides
	}
	for _, pc := range d.pending {
		if !pc.done {
			return pc
		}
	}
	return nil
}

// responseText is a functionResponse's response as the tool message's content: the text of
// its only member when that is "output", "error", "content" or "result" and a string (Gemini
// CLI sends {"output": ...} or {"error": ...}), else its JSON.
func responseText(raw json.RawMessage) (string, string) {
	if raw == nil {
		return "", ""
	}
	if members, err := decodeObject(raw); err == nil && len(members) == 1 {
		switch k := members[0].key; k {
		case "output", "error", "content", "result":
			var s string
			if json.Unmarshal(members[0].value, &s) == nil {
				return s, k
			}
		}
	}
	return string(raw), ""
}

// setUserContent sets a user or system message's content from its parts: their text when
// they are all plain text parts, else content parts.
func setUserContent(m *compaction.Message, ps []part) {
	var text strings.Builder
	for _, p := range ps {
		if !p.plain {
			m.ContentParts = contentParts(ps)
			return
		}
		text.WriteString(p.text)
	}
	m.Content = text.String()
}

// contentParts are parts as the engine counts and renders them: a text part as
// {"type":"text","text":...}, inline data and file data as {"type":"image"} (whatever their
// size, as a base64 image is not its bytes), any other part as {"type":<kind>}; each keeps
// the Gemini part in "part", so the message can be written back from them alone.
func contentParts(ps []part) json.RawMessage {
	items := make([]json.RawMessage, 0, len(ps))
	for _, p := range ps {
		var item struct {
			Type string          `json:"type"`
			Text *string         `json:"text,omitempty"`
			Part json.RawMessage `json:"part,omitempty"`
		}
		item.Type, item.Part = p.kind, p.raw
		switch p.kind {
		case kindText:
			item.Text = &p.text
			if p.plain {
				item.Part = nil
			}
		case kindMedia:
			item.Type = "image"
		}
		items = append(items, rawjson.MustMarshal(item))
	}
	return rawjson.JoinArray(items)
}

func raws(ps []part) []json.RawMessage {
	out := make([]json.RawMessage, len(ps))
	for i := range ps {
		out[i] = ps[i].raw
	}
	return out
}

func (r *Request) add(m compaction.Message, src *source) {
	r.Messages = append(r.Messages, m)
	r.sources.Add(&m, src)
}

// decodeObject reads a JSON object's members in their order, values verbatim. Of a key
// given twice the last value is kept, in the first one's place, as encoding/json would
// read it.
func decodeObject(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if t != json.Delim('{') {
		return nil, fmt.Errorf("not an object")
	}
	var out []member
	seen := map[string]int{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string) // an object's keys are strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if k, ok := seen[key]; ok {
			out[k].value = v
			continue
		}
		seen[key] = len(out)
		out = append(out, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the object")
	}
	return out, nil
}

func find(members []member, key string) (json.RawMessage, bool) {
	_, v, ok := findKey(members, key)
	return v, ok
}

// findKey finds a member by its camelCase name or its snake_case alias.
func findKey(members []member, key string) (string, json.RawMessage, bool) {
	for _, m := range members {
		if canonicalKey(m.key) == key {
			return m.key, m.value, true
		}
	}
	return "", nil, false
}

// object writes members as a JSON object, in their order, values verbatim.
func object(members []member) json.RawMessage {
	n := 2
	for _, m := range members {
		n += len(m.key) + len(m.value) + 4
	}
	out := make(json.RawMessage, 0, n)
	out = append(out, '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, rawjson.MustMarshal(m.key)...)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	return append(out, '}')
}
