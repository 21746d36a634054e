package compaction

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// This file writes messages and tool calls as JSON directly, byte for byte what encoding/json
// writes for the map marshalSlow builds (keys sorted, no HTML escaping, unknown fields
// compacted), without the map and reflection. TestEncodeFastAgrees and FuzzDecodeTranscript
// compare the two.

// jsonSize is about the size of m's JSON, escapes aside.
func (m *Message) jsonSize() int {
	n := 64 + len(m.Content) + len(m.ContentParts) + len(m.Role) + len(m.ToolCallID) + len(m.Name)
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		n += 64 + len(tc.ID) + len(tc.Type) + len(tc.Function.Name) + len(tc.Function.Arguments) + extraSize(tc.Extra)
	}
	n += extraSize(m.Extra)
	return n + n/16
}

func extraSize(extra map[string]json.RawMessage) int {
	n := 0
	for k, v := range extra {
		n += len(k) + len(v) + 4
	}
	return n
}

// Message fields in the order encoding/json sorts them.
var messageFieldOrder = [...]string{fieldContent, fieldName, fieldPinned, fieldRole, fieldToolCallID, fieldToolCalls}

// appendJSON appends m's JSON to dst; false when an unknown field is not valid JSON (left to
// marshalSlow for its error).
func (m *Message) appendJSON(dst []byte) ([]byte, bool) {
	present := func(k string) bool {
		switch k {
		case fieldContent, fieldRole:
			return true
		case fieldName:
			return m.Name != ""
		case fieldPinned:
			return m.Pinned
		case fieldToolCallID:
			return m.ToolCallID != ""
		case fieldToolCalls:
			return len(m.ToolCalls) > 0
		}
		return false
	}
	var ok bool
	field := func(dst []byte, k string) ([]byte, bool) {
		switch k {
		case fieldContent:
			switch {
			case m.ContentParts != nil:
				return appendRaw(dst, m.ContentParts)
			case m.nullContent && m.Content == "":
				return append(dst, "null"...), true
			default:
				return appendJSONString(dst, m.Content), true
			}
		case fieldName:
			return appendJSONString(dst, m.Name), true
		case fieldPinned:
			return append(dst, "true"...), true
		case fieldRole:
			return appendJSONString(dst, string(m.Role)), true
		case fieldToolCallID:
			return appendJSONString(dst, m.ToolCallID), true
		case fieldToolCalls:
			dst = append(dst, '[')
			for i := range m.ToolCalls {
				if i > 0 {
					dst = append(dst, ',')
				}
				if dst, ok = m.ToolCalls[i].appendJSON(dst); !ok {
					return dst, false
				}
			}
			return append(dst, ']'), true
		}
		return appendRaw(dst, m.Extra[k])
	}
	return appendObject(dst, messageFieldOrder[:], m.Extra, present, field)
}

// Tool call fields in the order encoding/json sorts them.
var toolCallFieldOrder = [...]string{fieldFunction, fieldID, fieldType}

// appendJSON appends tc's JSON to dst (see Message.appendJSON).
func (tc *ToolCall) appendJSON(dst []byte) ([]byte, bool) {
	present := func(k string) bool { return k == fieldFunction || k == fieldID || k == fieldType }
	field := func(dst []byte, k string) ([]byte, bool) {
		switch k {
		case fieldFunction:
			dst = append(dst, `{"name":`...)
			dst = appendJSONString(dst, tc.Function.Name)
			dst = append(dst, `,"arguments":`...)
			dst = appendJSONString(dst, tc.Function.Arguments)
			return append(dst, '}'), true
		case fieldID:
			return appendJSONString(dst, tc.ID), true
		case fieldType:
			if tc.Type == "" {
				return append(dst, `"function"`...), true
			}
			return appendJSONString(dst, tc.Type), true
		}
		return appendRaw(dst, tc.Extra[k])
	}
	return appendObject(dst, toolCallFieldOrder[:], tc.Extra, present, field)
}

// appendObject appends an object of the known fields (sorted, those present) and the
// unknown ones of extra (a known name in extra is the known field's), keys sorted.
func appendObject(dst []byte, known []string, extra map[string]json.RawMessage,
	present func(string) bool, field func([]byte, string) ([]byte, bool)) ([]byte, bool) {
	keys := make([]string, 0, len(known)+len(extra))
	for _, k := range known {
		if present(k) {
			keys = append(keys, k)
		}
	}
	if len(extra) > 0 {
		for k := range extra {
			if !slices.Contains(known, k) || !present(k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
	}
	dst = append(dst, '{')
	var ok bool
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		if present(k) {
			dst, ok = field(dst, k)
		} else {
			dst, ok = appendRaw(dst, extra[k])
		}
		if !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

// appendRaw appends raw JSON compacted, as encoding/json writes a json.RawMessage (nil is
// null); false when it is not valid JSON.
func appendRaw(dst []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(dst, "null"...), true
	}
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return dst, false
	}
	return buf.Bytes(), true
}

const hexDigits = "0123456789abcdef"

// plainASCII8 reports whether the 8 bytes of s are all ASCII that a JSON string holds
// unescaped (no control character, quote or backslash), testing them as one word.
func plainASCII8(s string) bool {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	// The high bit of a byte of (v - ones) &^ v is set where v's byte is 0 (or where a byte
	// below it is, which only makes the test fail); of (w - 0x20*ones) &^ w, where w's byte is
	// under 0x20.
	hasZero := func(v uint64) uint64 { return (v - ones) &^ v & high }
	special := (w-0x20*ones)&^w | hasZero(w^'"'*ones) | hasZero(w^'\\'*ones)
	return (special|w)&high == 0
}

// appendJSONString appends s as a JSON string exactly as encoding/json does without HTML
// escaping: \b \f \n \r \t and \uXXXX for the other control characters, \u2028 and \u2029,
// invalid UTF-8 as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	word := 0 // where the next test of eight bytes at once may start
	for i := 0; i < len(s); {
		if i >= word && i+8 <= len(s) {
			// Eight bytes that are written as they are, tested at once: tool output is mostly
			// such text, and a session's archive and views encode megabytes of it. After a
			// word that fails, its bytes go one by one.
			if plainASCII8(s[i : i+8]) {
				i += 8
				continue
			}
			word = i + 8
		}
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
