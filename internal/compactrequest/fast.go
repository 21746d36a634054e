package compactrequest

import (
	"strconv"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// decodeCompactFast decodes the body of a compaction in one pass over its top level, each
// message by its own UnmarshalJSON, and reports whether it did. encoding/json scans a body
// twice before a message's UnmarshalJSON sees it (once to find the end of the object, once
// more to find each message's end). The fast path takes only a body it checks completely:
// one object with each of the CompactRequest fields at most once, spelled exactly, in the
// types they have, messages that are objects each decoded without error, nothing but
// space after it. Anything else (every malformed body among them) is left to Decode, so
// errors are encoding/json's as before. FuzzDecodeCompactRequest compares the two.
func decodeCompactFast(body []byte, req *compactclient.CompactRequest) bool {
	var out compactclient.CompactRequest
	var seen [7]bool
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		i++
	} else {
		for {
			key, end, ok := plainString(body, i)
			if !ok {
				return false
			}
			i = skipSpace(body, end)
			if i >= len(body) || body[i] != ':' {
				return false
			}
			i = skipSpace(body, i+1)
			field := -1
			switch key {
			case "messages":
				field = 0
				i, ok = decodeMessages(body, i, &out.Messages)
			case "force":
				field = 1
				i, ok = decodeBool(body, i, &out.Force)
			case "usage":
				field = 2
				i, ok = decodeUsage(body, i, &out.Usage)
			case "watermark":
				field = 3
				i, ok = decodeInt(body, i, &out.Watermark)
			case "prefixHash":
				field = 4
				var s string
				if i < len(body) && body[i] == 'n' {
					i, ok = literal(body, i, "null")
				} else if s, i, ok = plainString(body, i); ok {
					out.PrefixHash = s
				}
			case "omitEcho":
				field = 5
				i, ok = decodeBool(body, i, &out.OmitEcho)
			case "seen":
				field = 6
				i, ok = decodeInt(body, i, &out.Seen)
			}
			if field < 0 || !ok || seen[field] {
				return false
			}
			seen[field] = true
			i = skipSpace(body, i)
			if i < len(body) && body[i] == ',' {
				i = skipSpace(body, i+1)
				continue
			}
			if i < len(body) && body[i] == '}' {
				i++
				break
			}
			return false
		}
	}
	if skipSpace(body, i) != len(body) {
		return false
	}
	*req = out
	return true
}

// DecodeMessages decodes raw, a JSON array of message objects that encoding/json has
// checked already as part of a larger document (compaction-proxy's chat requests), in one
// pass: each element is found by counting brackets and decoded by its own UnmarshalJSON,
// instead of encoding/json validating the array again and scanning it once more. false:
// anything else (null, an element that is not an object, a message that does not decode),
// for encoding/json to decode or refuse.
func DecodeMessages(raw []byte) ([]compaction.Message, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	var msgs []compaction.Message
	end, ok := decodeMessages(raw, i, &msgs)
	return msgs, ok && skipSpace(raw, end) == len(raw)
}

// decodeMessages decodes the messages array (or null) at body[i].
func decodeMessages(body []byte, i int, dst *[]compaction.Message) (int, bool) {
	if i < len(body) && body[i] == 'n' {
		return literal(body, i, "null")
	}
	if i >= len(body) || body[i] != '[' {
		return i, false
	}
	msgs := []compaction.Message{}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == ']' {
		*dst = msgs
		return i + 1, true
	}
	for {
		end, ok := objectEnd(body, i)
		if !ok {
			return i, false
		}
		var m compaction.Message
		if err := m.UnmarshalJSON(body[i:end]); err != nil {
			return i, false
		}
		msgs = append(msgs, m)
		i = skipSpace(body, end)
		if i < len(body) && body[i] == ']' {
			*dst = msgs
			return i + 1, true
		}
		if i >= len(body) || body[i] != ',' {
			return i, false
		}
		i = skipSpace(body, i+1)
	}
}

// objectEnd is the index after the object that starts at body[i], found by counting
// brackets outside strings; the object itself is checked by whoever decodes it.
func objectEnd(body []byte, i int) (int, bool) {
	if i >= len(body) || body[i] != '{' {
		return i, false
	}
	depth := 0
	for ; i < len(body); i++ {
		switch body[i] {
		case '"':
			for i++; i < len(body) && body[i] != '"'; i++ {
				if body[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if depth++; depth > maxFastDepth {
				return i, false // encoding/json's depth limit is left to Decode
			}
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return i, false
}

// maxFastDepth is the deepest nesting of a message the fast path takes.
const maxFastDepth = 1000

// decodeUsage decodes {"promptTokens": N} (or null) at body[i].
func decodeUsage(body []byte, i int, dst **compactclient.Usage) (int, bool) {
	if i < len(body) && body[i] == 'n' {
		*dst = nil
		return literal(body, i, "null")
	}
	if i >= len(body) || body[i] != '{' {
		return i, false
	}
	u := &compactclient.Usage{}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		*dst = u
		return i + 1, true
	}
	key, end, ok := plainString(body, i)
	if !ok || key != "promptTokens" {
		return i, false
	}
	i = skipSpace(body, end)
	if i >= len(body) || body[i] != ':' {
		return i, false
	}
	if i, ok = decodeInt(body, skipSpace(body, i+1), &u.PromptTokens); !ok {
		return i, false
	}
	i = skipSpace(body, i)
	if i >= len(body) || body[i] != '}' {
		return i, false
	}
	*dst = u
	return i + 1, true
}

// decodeInt decodes an integer without fraction or exponent (or null: no change) at body[i].
func decodeInt(body []byte, i int, dst *int) (int, bool) {
	if i < len(body) && body[i] == 'n' {
		return literal(body, i, "null")
	}
	start := i
	if i < len(body) && body[i] == '-' {
		i++
	}
	digits := i
	for i < len(body) && body[i] >= '0' && body[i] <= '9' {
		i++
	}
	if i == digits || (body[digits] == '0' && i > digits+1) {
		return i, false
	}
	if i < len(body) && (body[i] == '.' || body[i] == 'e' || body[i] == 'E') {
		return i, false
	}
	n, err := strconv.Atoi(string(body[start:i]))
	if err != nil {
		return i, false
	}
	*dst = n
	return i, true
}

// decodeBool decodes true or false (or null: no change) at body[i].
func decodeBool(body []byte, i int, dst *bool) (int, bool) {
	if i >= len(body) {
		return i, false
	}
	switch body[i] {
	case 't':
		*dst = true
		return literal(body, i, "true")
	case 'f':
		*dst = false
		return literal(body, i, "false")
	case 'n':
		return literal(body, i, "null")
	}
	return i, false
}

// plainString is the JSON string at body[i] when it has no escapes, no control characters
// and is valid UTF-8 (what the fast path takes), and the index after it.
func plainString(body []byte, i int) (string, int, bool) {
	if i >= len(body) || body[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(body); j++ {
		switch c := body[j]; {
		case c == '"':
			s := body[i+1 : j]
			if !utf8.Valid(s) {
				return "", j, false
			}
			return string(s), j + 1, true
		case c == '\\' || c < 0x20:
			return "", j, false
		}
	}
	return "", len(body), false
}

func literal(body []byte, i int, lit string) (int, bool) {
	if len(body)-i < len(lit) || string(body[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

func skipSpace(body []byte, i int) int {
	for i < len(body) {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// DecodeOffload decodes the body of an offload ({"message": {...}}) as Decode does: in one
// pass when the body is exactly one object with one "message" field holding a message
// object that decodes without error, else by Decode (every malformed body, so its error is
// encoding/json's).
func DecodeOffload(body []byte, req *compactclient.OffloadRequest) error {
	if decodeOffloadFast(body, req) {
		return nil
	}
	return Decode(body, req)
}

func decodeOffloadFast(body []byte, req *compactclient.OffloadRequest) bool {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	key, end, ok := plainString(body, skipSpace(body, i+1))
	if !ok || key != "message" {
		return false
	}
	i = skipSpace(body, end)
	if i >= len(body) || body[i] != ':' {
		return false
	}
	i = skipSpace(body, i+1)
	if end, ok = objectEnd(body, i); !ok {
		return false
	}
	var m compaction.Message
	if m.UnmarshalJSON(body[i:end]) != nil {
		return false
	}
	i = skipSpace(body, end)
	if i >= len(body) || body[i] != '}' || skipSpace(body, i+1) != len(body) {
		return false
	}
	*req = compactclient.OffloadRequest{Message: m}
	return true
}
