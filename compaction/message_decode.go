package compaction

import (
	"encoding/json"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file decodes messages and tool calls in one pass over their JSON, without the map of
// raw fields decodeSlow builds (which scans the text twice more, copies every field and
// decodes strings with escapes through encoding/json again). The fast path takes only what
// it fully checks itself: an object, its keys without escapes, the values of the known
// fields in the types they have, and every other value valid JSON nested at most
// maxFastDepth deep. Anything else (every malformed message among them) goes to
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

// maxFastDepth is the deepest nesting the fast path checks itself (encoding/json's limit,
// 10,000, is left to decodeSlow).
const maxFastDepth = 256

// decodeFast decodes data into m when data is a message the fast path takes, and reports
// whether it did; m is unchanged when it did not.
func (m *Message) decodeFast(data []byte) bool {
	var role, content, toolCalls, toolCallID, name, pinned []byte
	var extra map[string]json.RawMessage
	ok := eachField(data, func(key, value []byte) bool {
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
		out.Content = decodeString(content)
	default:
		return false
	}
	if toolCalls != nil && toolCalls[0] != 'n' {
		if toolCalls[0] != '[' {
			return false
		}
		out.ToolCalls = []ToolCall{}
		if !eachElement(toolCalls, func(v []byte) bool {
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
	ok := eachField(data, func(key, value []byte) bool {
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
		if !eachField(function, func(key, value []byte) bool {
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
		*dst = decodeString(v)
		return true
	case 'n':
		return true
	}
	return false
}

// eachField calls f with every key and value of the JSON object data, in order, after
// checking the whole object: false when data is not an object the fast path takes, or f
// said so. Values are exact (no surrounding space) sub-slices of data.
func eachField(data []byte, f func(key, value []byte) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	type field struct{ k0, k1, v0, v1 int }
	var buf [16]field
	fields := buf[:0]
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return false
			}
			end, escaped, ok := scanString(data, i)
			if !ok || escaped {
				return false
			}
			k0, k1 := i+1, end-1
			i = skipSpace(data, end)
			if i >= len(data) || data[i] != ':' {
				return false
			}
			i = skipSpace(data, i+1)
			v0 := i
			if i, ok = skipValue(data, i, 1); !ok {
				return false
			}
			fields = append(fields, field{k0, k1, v0, i})
			i = skipSpace(data, i)
			if i < len(data) && data[i] == ',' {
				i = skipSpace(data, i+1)
				continue
			}
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			return false
		}
	}
	if skipSpace(data, i) != len(data) {
		return false
	}
	for _, fd := range fields {
		if !f(data[fd.k0:fd.k1], data[fd.v0:fd.v1]) {
			return false
		}
	}
	return true
}

// eachElement calls f with every element of the JSON array data (a value eachField
// checked), in order, while f returns true.
func eachElement(data []byte, f func(v []byte) bool) bool {
	i := skipSpace(data, 1)
	if data[i] == ']' {
		return true
	}
	for {
		v0 := i
		end, ok := skipValue(data, i, 1)
		if !ok || !f(data[v0:end]) {
			return false
		}
		i = skipSpace(data, end)
		if data[i] == ']' {
			return true
		}
		i = skipSpace(data, i+1) // the comma
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue checks the JSON value at data[i] (depth: the nesting of the object or array
// holding it) and returns the index after it.
func skipValue(data []byte, i, depth int) (int, bool) {
	if i >= len(data) {
		return i, false
	}
	switch c := data[i]; c {
	case '"':
		end, _, ok := scanString(data, i)
		return end, ok
	case '{', '[':
		if depth >= maxFastDepth {
			return i, false
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipSpace(data, i+1)
		if i < len(data) && data[i] == closing {
			return i + 1, true
		}
		for {
			var ok bool
			if c == '{' {
				if i >= len(data) || data[i] != '"' {
					return i, false
				}
				if i, _, ok = scanString(data, i); !ok {
					return i, false
				}
				i = skipSpace(data, i)
				if i >= len(data) || data[i] != ':' {
					return i, false
				}
				i = skipSpace(data, i+1)
			}
			if i, ok = skipValue(data, i, depth+1); !ok {
				return i, false
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return i, false
			}
			if data[i] == closing {
				return i + 1, true
			}
			if data[i] != ',' {
				return i, false
			}
			i = skipSpace(data, i+1)
		}
	case 't':
		return literal(data, i, "true")
	case 'f':
		return literal(data, i, "false")
	case 'n':
		return literal(data, i, "null")
	default:
		return skipNumber(data, i)
	}
}

func literal(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// skipNumber checks a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(data []byte, i int) (int, bool) {
	digits := func(i int) (int, bool) {
		start := i
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		return i, i > start
	}
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i, _ = digits(i)
	default:
		return i, false
	}
	var ok bool
	if i < len(data) && data[i] == '.' {
		if i, ok = digits(i + 1); !ok {
			return i, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i, ok = digits(i); !ok {
			return i, false
		}
	}
	return i, true
}

// scanString checks the JSON string at data[i] (its opening quote) and returns the index
// after its closing quote and whether it holds escapes. (UTF-8 is checked by the caller.)
func scanString(data []byte, i int) (end int, escaped, ok bool) {
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, escaped, true
		case c < 0x20:
			return i, false, false
		case c == '\\':
			escaped = true
			if i+1 >= len(data) {
				return i, false, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if getu4(data[i:]) < 0 {
					return i, false, false
				}
				i += 5
			default:
				return i, false, false
			}
		}
	}
	return i, false, false
}

// decodeString is the text of the JSON string v (checked by scanString, valid UTF-8),
// unescaped as encoding/json does: an unpaired surrogate becomes U+FFFD.
func decodeString(v []byte) string {
	s := v[1 : len(v)-1]
	i := 0
	for i < len(s) && s[i] != '\\' {
		i++
	}
	if i == len(s) {
		return string(s)
	}
	b := make([]byte, i, len(s))
	copy(b, s[:i])
	for i < len(s) {
		c := s[i]
		if c != '\\' {
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			b = append(b, s[i:j]...)
			i = j
			continue
		}
		switch e := s[i+1]; e {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			rr := getu4(s[i:])
			i += 6
			if utf16.IsSurrogate(rr) {
				if dec := utf16.DecodeRune(rr, getu4(s[i:])); dec != unicode.ReplacementChar {
					i += 6
					b = utf8.AppendRune(b, dec)
					continue
				}
				rr = unicode.ReplacementChar
			}
			b = utf8.AppendRune(b, rr)
			continue
		default: // '"', '\\', '/'
			b = append(b, e)
		}
		i += 2
	}
	return string(b)
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
