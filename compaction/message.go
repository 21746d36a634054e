package compaction

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Role is the author of a chat message, as in the OpenAI chat format.
type Role string

// The four roles the engine understands; any other role is rejected by Validate.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

func (r Role) valid() bool {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// Message is one chat message in the OpenAI chat-completions format. Fields the engine does
// not know (for example reasoning_content or provider extensions) are kept in Extra and
// written back unchanged, so a transcript survives a round trip.
type Message struct {
	Role       Role
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
	Name       string

	// ContentParts holds content that was sent as an array of parts (multimodal input),
	// verbatim. When it is set, Content is empty.
	ContentParts json.RawMessage

	// Pinned marks a message the agent wants kept verbatim in every view ("pinned": true in
	// JSON). Views the engine returns never carry the mark, so they can go to a provider as
	// they are.
	Pinned bool

	// Extra holds every field the engine does not interpret, verbatim.
	Extra map[string]json.RawMessage

	// nullContent remembers an explicit "content": null so it is written back as null.
	nullContent bool

	// parts is what ContentParts counts for the token estimate, worked out when the message
	// is decoded; it stands only while ContentParts is the slice it was worked out for.
	parts partsCost
}

// partsCost is the estimate's size of a ContentParts slice, and which slice it is for.
type partsCost struct {
	data  *byte
	n     int
	chars int
}

// ToolCall is one function call requested by an assistant message.
type ToolCall struct {
	ID       string
	Type     string
	Function FunctionCall
	Extra    map[string]json.RawMessage
}

// FunctionCall names the function an assistant wants to call and its JSON arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Clone returns a deep copy of m (Extra's raw values are shared: they are never modified).
func (m Message) Clone() Message {
	out := m
	if m.ToolCalls != nil {
		out.ToolCalls = make([]ToolCall, len(m.ToolCalls))
		copy(out.ToolCalls, m.ToolCalls)
	}
	out.Extra = cloneExtra(m.Extra)
	return out
}

func cloneExtra(in map[string]json.RawMessage) map[string]json.RawMessage {
	if in == nil {
		return nil
	}
	out := make(map[string]json.RawMessage, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// Chars is the size the token estimate counts for m: content bytes plus the name and
// arguments of every tool call.
func (m *Message) Chars() int {
	n := len(m.Content) + m.partsChars()
	for i := range m.ToolCalls {
		n += len(m.ToolCalls[i].Function.Name) + len(m.ToolCalls[i].Function.Arguments)
	}
	return n
}

// ImageTokens is what one image in a message's content parts counts for the token estimate,
// whatever its encoded size: about what the providers charge for a large image (Anthropic
// bills width×height/750 tokens, at most about 1,600 for the 1.15-megapixel images it keeps
// whole; OpenAI 765 for a 1024×1024 image in high detail). Counted as its bytes, a
// base64-encoded screenshot would count for a hundred thousand tokens and force an
// Emergency compaction.
const ImageTokens = 1600

// partText is the type of a text content part (OpenAI chat, Anthropic).
const partText = "text"

// imageTypes are the content part types that hold an image: OpenAI chat ("image_url"), OpenAI
// responses ("input_image") and Anthropic ("image").
var imageTypes = map[string]bool{"image_url": true, "input_image": true, "image": true}

// partsChars is the size the estimate counts for m's content parts: a text part its text, an
// image part ImageTokens×4, any other part its JSON.
func (m *Message) partsChars() int {
	if len(m.ContentParts) == 0 {
		return 0
	}
	if c := m.parts; c.n == len(m.ContentParts) && c.data == &m.ContentParts[0] {
		return c.chars
	}
	return contentPartsChars(m.ContentParts)
}

func contentPartsChars(raw json.RawMessage) int {
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return len(raw)
	}
	n := 0
	for _, p := range parts {
		switch kind, text := readPart(p); kind {
		case partIsText:
			n += len(text)
		case partIsImage:
			n += ImageTokens * 4
		default:
			n += len(p)
		}
	}
	return n
}

// partKind is how the engine reads a content part: its text, an image, or its JSON.
type partKind int

const (
	partIsOther partKind = iota
	partIsText
	partIsImage
)

// readPart reads one content part: a text part's text, an image, or another part (or one
// that is not an object).
func readPart(p json.RawMessage) (partKind, string) {
	var part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	switch {
	case json.Unmarshal(p, &part) != nil:
		return partIsOther, ""
	case part.Type == partText:
		return partIsText, part.Text
	case imageTypes[part.Type]:
		return partIsImage, ""
	}
	return partIsOther, ""
}

// EstimateTokens is the spec's estimate: total characters divided by four, where a character
// is a byte as Go's len counts it (so non-ASCII text counts more than one character per
// rune). Tool-call names and arguments count too.
func EstimateTokens(msgs []Message) int {
	total := 0
	for i := range msgs {
		total += msgs[i].Chars()
	}
	return total / 4
}

var messageKeys = map[string]bool{"role": true, "content": true, "tool_calls": true, "tool_call_id": true, "name": true, "pinned": true}

// UnmarshalJSON decodes one OpenAI chat message, keeping unknown fields in Extra.
func (m *Message) UnmarshalJSON(data []byte) error {
	// encoding/json silently replaces invalid UTF-8 with U+FFFD; reject it instead, so bad
	// bytes are reported rather than changed.
	if !utf8.Valid(data) {
		return fmt.Errorf("message is not valid UTF-8")
	}
	if m.decodeFast(data) {
		return nil
	}
	return m.decodeSlow(data)
}

// decodeSlow is UnmarshalJSON through a map of the message's fields: the reference
// decodeFast must agree with, and the path of every message decodeFast does not take (all
// malformed ones, so their errors are encoding/json's).
func (m *Message) decodeSlow(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw == nil {
		return fmt.Errorf("message is null")
	}
	*m = Message{}
	if v, ok := raw["role"]; ok {
		var s string
		if err := unmarshalString(v, &s); err != nil {
			return fmt.Errorf("role: %w", err)
		}
		m.Role = Role(s)
	}
	if v, ok := raw["content"]; ok {
		switch t := bytes.TrimSpace(v); {
		case bytes.Equal(t, []byte("null")):
			m.nullContent = true
		case len(t) > 0 && t[0] == '[':
			m.ContentParts = append(json.RawMessage(nil), t...)
			m.parts = partsCost{data: &m.ContentParts[0], n: len(m.ContentParts), chars: contentPartsChars(m.ContentParts)}
		default:
			if err := unmarshalString(v, &m.Content); err != nil {
				return fmt.Errorf("content must be a string, an array of parts or null: %w", err)
			}
		}
	}
	if v, ok := raw["tool_calls"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		if err := json.Unmarshal(v, &m.ToolCalls); err != nil {
			return fmt.Errorf("tool_calls: %w", err)
		}
	}
	if v, ok := raw["tool_call_id"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		if err := unmarshalString(v, &m.ToolCallID); err != nil {
			return fmt.Errorf("tool_call_id: %w", err)
		}
	}
	if v, ok := raw["name"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		if err := unmarshalString(v, &m.Name); err != nil {
			return fmt.Errorf("name: %w", err)
		}
	}
	if v, ok := raw["pinned"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		if err := json.Unmarshal(v, &m.Pinned); err != nil {
			return fmt.Errorf("pinned must be true or false: %w", err)
		}
	}
	for k, v := range raw {
		if !messageKeys[k] {
			if m.Extra == nil {
				m.Extra = map[string]json.RawMessage{}
			}
			m.Extra[k] = v
		}
	}
	return nil
}

// MarshalJSON writes the message in the OpenAI chat format, with its unknown fields.
func (m Message) MarshalJSON() ([]byte, error) {
	if b, ok := m.appendJSON(make([]byte, 0, m.jsonSize())); ok {
		return b, nil
	}
	return m.marshalSlow()
}

// marshalSlow is MarshalJSON through a map encoded by encoding/json: the reference
// appendJSON must agree with, and the path of a message appendJSON cannot write (an unknown
// field that is not valid JSON: the error is encoding/json's).
func (m Message) marshalSlow() ([]byte, error) {
	out := make(map[string]any, 5+len(m.Extra))
	for k, v := range m.Extra {
		out[k] = v
	}
	out["role"] = m.Role
	switch {
	case m.ContentParts != nil:
		out["content"] = m.ContentParts
	case m.nullContent && m.Content == "":
		out["content"] = nil
	default:
		out["content"] = m.Content
	}
	if len(m.ToolCalls) > 0 {
		out["tool_calls"] = m.ToolCalls
	}
	if m.ToolCallID != "" {
		out["tool_call_id"] = m.ToolCallID
	}
	if m.Name != "" {
		out["name"] = m.Name
	}
	if m.Pinned {
		out["pinned"] = true
	}
	return marshalNoEscape(out)
}

// The JSON names of the fields of messages and tool calls.
const (
	fieldRole       = "role"
	fieldContent    = "content"
	fieldToolCalls  = "tool_calls"
	fieldToolCallID = "tool_call_id"
	fieldName       = "name"
	fieldPinned     = "pinned"
	fieldID         = "id"
	fieldType       = "type"
	fieldFunction   = "function"
)

var toolCallKeys = map[string]bool{"id": true, "type": true, fieldFunction: true}

// UnmarshalJSON decodes a tool call, keeping unknown fields in Extra.
func (tc *ToolCall) UnmarshalJSON(data []byte) error {
	// Invalid UTF-8 is left to encoding/json, which replaces it with U+FFFD.
	if utf8.Valid(data) && tc.decodeFast(data) {
		return nil
	}
	return tc.decodeSlow(data)
}

// decodeSlow is ToolCall.UnmarshalJSON through a map (see Message.decodeSlow).
func (tc *ToolCall) decodeSlow(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*tc = ToolCall{}
	if v, ok := raw["id"]; ok {
		if err := json.Unmarshal(v, &tc.ID); err != nil {
			return fmt.Errorf("tool call id: %w", err)
		}
	}
	if v, ok := raw["type"]; ok {
		if err := json.Unmarshal(v, &tc.Type); err != nil {
			return fmt.Errorf("tool call type: %w", err)
		}
	}
	if v, ok := raw[fieldFunction]; ok {
		if err := json.Unmarshal(v, &tc.Function); err != nil {
			return fmt.Errorf("tool call function: %w", err)
		}
	}
	for k, v := range raw {
		if !toolCallKeys[k] {
			if tc.Extra == nil {
				tc.Extra = map[string]json.RawMessage{}
			}
			tc.Extra[k] = v
		}
	}
	return nil
}

// MarshalJSON writes the tool call with its unknown fields.
func (tc ToolCall) MarshalJSON() ([]byte, error) {
	if b, ok := tc.appendJSON(nil); ok {
		return b, nil
	}
	return tc.marshalSlow()
}

// marshalSlow is ToolCall.MarshalJSON through a map (see Message.marshalSlow).
func (tc ToolCall) marshalSlow() ([]byte, error) {
	out := make(map[string]any, 3+len(tc.Extra))
	for k, v := range tc.Extra {
		out[k] = v
	}
	out["id"] = tc.ID
	out["type"] = tc.Type
	if tc.Type == "" {
		out["type"] = "function"
	}
	out[fieldFunction] = tc.Function
	return marshalNoEscape(out)
}

// marshalNoEscape is json.Marshal without HTML escaping, so tool output such as "<div>" or
// "a && b" is written as the agent sent it.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// unmarshalString decodes a JSON value that should be a string. v comes from a document
// already parsed as valid JSON: a string without escapes is its bytes between the quotes,
// taken without scanning them again (the content of messages is most of a request body).
func unmarshalString(v json.RawMessage, dst *string) error {
	if n := len(v); n >= 2 && v[0] == '"' && v[n-1] == '"' && bytes.IndexByte(v[1:n-1], '\\') < 0 {
		*dst = string(v[1 : n-1])
		return nil
	}
	return json.Unmarshal(v, dst)
}
