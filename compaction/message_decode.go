package compaction

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/internal/jsonscan"
)

// This file decodes messages and tool calls in one pass over their JSON, without the map of
// raw fields decodeSlow builds (which scans the text twice more, copies every field and
// decodes strings with escapes through encoding/json again). The fast path takes only what
// it fully checks itself: an object, its keys without escapes, the values of the known
// fields in the types they have, and every other value valid JSON nested at most
// jsonscan.MaxDepth deep. Anything else (every malformed message among them) goes to
// decodeSlow, so errors and odd inputs (escaped keys, a null tool call, a tool call's
// function named "Name") decode exactly as before. TestDecodeFastAgrees and
// FuzzDecodeTranscript compare the two.

// keepExtra adds a field the engine does not interpret to extra (made on first use), a copy
// of its raw value.
func keepExtra(extra map[string]json.RawMessage, key, value []byte) map[string]json.RawMessage {
	if extra == nil {
		extra = map[string]json.RawMessage{}
	}
	extra[string(key)] = append(json.RawMessage(nil), value...)
	return extra
}

// decodeFast decodes data into m when data is a message the fast path takes, and reports
// whether it did; m is unchanged when it did not.
func (m *Message) decodeFast(data []byte) bool {
	var role, content, toolCalls, toolCallID, name, pinned []byte
	var extra map[string]json.RawMessage
	ok := jsonscan.EachField(data, func(key, value []byte) bool {
		switch string(key) {
		case fieldRole:
			role = value
		case fieldContent:
			content = value
		case fieldToolCalls:
			toolCalls = value
		case fieldToolCallID:
			toolCallID = value
		case fieldName:
			name = value
		case fieldPinned:
			pinned = value
		default:
			extra = keepExtra(extra, key, value)
		}
		return true
	})
	if !ok {
		return false
	}
	out := Message{Extra: extra}
	var r string
	if role != nil && !stringOrNull(role, &r) {
		return false
	}
	out.Role = Role(r)
	switch {
	case content == nil:
	case content[0] == 'n':
		out.nullContent = true
	case content[0] == '[':
		out.ContentParts = append(json.RawMessage(nil), content...)
		out.parts = partsCost{data: &out.ContentParts[0], n: len(out.ContentParts), chars: contentPartsChars(out.ContentParts)}
	case content[0] == '"':
		out.Content = jsonscan.DecodeString(content)
	default:
		return false
	}
	if toolCalls != nil && toolCalls[0] != 'n' {
		if toolCalls[0] != '[' {
			return false
		}
		out.ToolCalls = []ToolCall{}
		if !jsonscan.EachElement(toolCalls, func(v []byte) bool {
			var tc ToolCall
			if !tc.decodeFast(v) {
				return false
			}
			out.ToolCalls = append(out.ToolCalls, tc)
			return true
		}) {
			return false
		}
	}
	if toolCallID != nil && !stringOrNull(toolCallID, &out.ToolCallID) {
		return false
	}
	if name != nil && !stringOrNull(name, &out.Name) {
		return false
	}
	switch {
	case pinned == nil || pinned[0] == 'n':
	case pinned[0] == 't':
		out.Pinned = true
	case pinned[0] == 'f':
	default:
		return false
	}
	*m = out
	return true
}

// decodeFast decodes data into tc when the fast path takes it (see Message.decodeFast).
func (tc *ToolCall) decodeFast(data []byte) bool {
	var id, typ, function []byte
	var extra map[string]json.RawMessage
	ok := jsonscan.EachField(data, func(key, value []byte) bool {
		switch string(key) {
		case fieldID:
			id = value
		case fieldType:
			typ = value
		case fieldFunction:
			function = value
		default:
			extra = keepExtra(extra, key, value)
		}
		return true
	})
	if !ok {
		return false
	}
	out := ToolCall{Extra: extra}
	if id != nil && !stringOrNull(id, &out.ID) {
		return false
	}
	if typ != nil && !stringOrNull(typ, &out.Type) {
		return false
	}
	if function != nil && function[0] != 'n' {
		// encoding/json's struct decoding: fields matched case-insensitively (left to
		// decodeSlow), a null leaves the field as it is, other fields are ignored.
		if !jsonscan.EachField(function, func(key, value []byte) bool {
			switch string(key) {
			case fieldName:
				return stringOrNull(value, &out.Function.Name)
			case "arguments":
				return stringOrNull(value, &out.Function.Arguments)
			}
			return !equalFoldASCII(key, fieldName) && !equalFoldASCII(key, "arguments")
		}) {
			return false
		}
	}
	*tc = out
	return true
}

// equalFoldASCII reports whether key is name in any case of its letters, or would be
// matched to it by encoding/json's case folding (keys with other than ASCII letters are
// counted as matching, so they go to decodeSlow).
func equalFoldASCII(key []byte, name string) bool {
	if len(key) < len(name)-1 || len(key) > 3*len(name) {
		return false
	}
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return true // 'ſ' (U+017F) and the Kelvin sign fold to ASCII letters
		}
	}
	if len(key) != len(name) {
		return false
	}
	for i := range key {
		if key[i]|0x20 != name[i]|0x20 {
			return false
		}
	}
	return true
}

// stringOrNull sets *dst to the JSON string v, leaves it for null, and reports false for
// anything else. v is a value eachField checked.
func stringOrNull(v []byte, dst *string) bool {
	switch v[0] {
	case '"':
		*dst = jsonscan.DecodeString(v)
		return true
	case 'n':
		return true
	}
	return false
}
