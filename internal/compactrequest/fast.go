package compactrequest

import (
	"strconv"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/jsonscan"
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
	i := jsonscan.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = jsonscan.SkipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		i++
	} else {
		for {
			key, end, ok := jsonscan.PlainString(body, i)
			if !ok {
				return false
			}
			i = jsonscan.SkipSpace(body, end)
			if i >= len(body) || body[i] != ':' {
				return false
			}
			i = jsonscan.SkipSpace(body, i+1)
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
					i, ok = jsonscan.Literal(body, i, "null")
				} else if s, i, ok = jsonscan.PlainString(body, i); ok {
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
			i = jsonscan.SkipSpace(body, i)
			if i < len(body) && body[i] == ',' {
				i = jsonscan.SkipSpace(body, i+1)
				continue
			}
			if i < len(body) && body[i] == '}' {
				i++
				break
			}
			return false
		}
	}
	if jsonscan.SkipSpace(body, i) != len(body) {
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
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	var msgs []compaction.Message
	end, ok := decodeMessages(raw, i, &msgs)
	return msgs, ok && jsonscan.SkipSpace(raw, end) == len(raw)
}

// decodeMessages decodes the messages array (or null) at body[i].
func decodeMessages(body []byte, i int, dst *[]compaction.Message) (int, bool) {
	if i < len(body) && body[i] == 'n' {
		return jsonscan.Literal(body, i, "null")
	}
	if i >= len(body) || body[i] != '[' {
		return i, false
	}
	msgs := []compaction.Message{}
	i = jsonscan.SkipSpace(body, i+1)
	if i < len(body) && body[i] == ']' {
		*dst = msgs
		return i + 1, true
	}
	for {
		end, ok := jsonscan.ObjectEnd(body, i, maxFastDepth)
		if !ok {
			return i, false
		}
		var m compaction.Message
		if err := m.UnmarshalJSON(body[i:end]); err != nil {
			return i, false
		}
		msgs = append(msgs, m)
		i = jsonscan.SkipSpace(body, end)
		if i < len(body) && body[i] == ']' {
			*dst = msgs
			return i + 1, true
		}
		if i >= len(body) || body[i] != ',' {
			return i, false
		}
		i = jsonscan.SkipSpace(body, i+1)
	}
}

// maxFastDepth is the deepest nesting of a message the fast path takes.
const maxFastDepth = 1000

// decodeUsage decodes {"promptTokens": N} (or null) at body[i].
func decodeUsage(body []byte, i int, dst **compactclient.Usage) (int, bool) {
	if i < len(body) && body[i] == 'n' {
		*dst = nil
		return jsonscan.Literal(body, i, "null")
	}
	if i >= len(body) || body[i] != '{' {
		return i, false
	}
	u := &compactclient.Usage{}
	i = jsonscan.SkipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		*dst = u
		return i + 1, true
	}
	key, end, ok := jsonscan.PlainString(body, i)
	if !ok || key != "promptTokens" {
		return i, false
	}
	i = jsonscan.SkipSpace(body, end)
	if i >= len(body) || body[i] != ':' {
		return i, false
	}
	if i, ok = decodeInt(body, jsonscan.SkipSpace(body, i+1), &u.PromptTokens); !ok {
		return i, false
	}
	i = jsonscan.SkipSpace(body, i)
	if i >= len(body) || body[i] != '}' {
		return i, false
	}
	*dst = u
	return i + 1, true
}

// decodeInt decodes an integer without fraction or exponent (or null: no change) at body[i].
func decodeInt(body []byte, i int, dst *int) (int, bool) {
	if i < len(body) && body[i] == 'n' {
		return jsonscan.Literal(body, i, "null")
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
		return jsonscan.Literal(body, i, "true")
	case 'f':
		*dst = false
		return jsonscan.Literal(body, i, "false")
	case 'n':
		return jsonscan.Literal(body, i, "null")
	}
	return i, false
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
	i := jsonscan.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	key, end, ok := jsonscan.PlainString(body, jsonscan.SkipSpace(body, i+1))
	if !ok || key != "message" {
		return false
	}
	i = jsonscan.SkipSpace(body, end)
	if i >= len(body) || body[i] != ':' {
		return false
	}
	i = jsonscan.SkipSpace(body, i+1)
	if end, ok = jsonscan.ObjectEnd(body, i, maxFastDepth); !ok {
		return false
	}
	var m compaction.Message
	if m.UnmarshalJSON(body[i:end]) != nil {
		return false
	}
	i = jsonscan.SkipSpace(body, end)
	if i >= len(body) || body[i] != '}' || jsonscan.SkipSpace(body, i+1) != len(body) {
		return false
	}
	*req = compactclient.OffloadRequest{Message: m}
	return true
}
