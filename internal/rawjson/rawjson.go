// Package rawjson writes JSON the way the request dialects (anthropic, gemini, responses),
// the engine's image parts and compaction-proxy keep what they do not rewrite: values joined
// as they are, and nothing escaped that the agent did not escape.
package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// DecodeBody decodes a request body that must be a JSON object in valid UTF-8; the error
// says what it is instead.
func DecodeBody(body []byte) (map[string]json.RawMessage, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("the body is not valid UTF-8")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("the body is not a JSON object: %w", err)
	}
	if fields == nil {
		return nil, errors.New("the body is null")
	}
	return fields, nil
}

// IsNull reports whether raw is the JSON null.
func IsNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// JoinArray writes items, each verbatim, as a JSON array.
func JoinArray(items []json.RawMessage) json.RawMessage {
	n := 2
	for _, it := range items {
		n += len(it) + 1
	}
	out := make(json.RawMessage, 0, n)
	out = append(out, '[')
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, ']')
}

// Object writes fields as a JSON object, keys sorted, values verbatim: the request's own
// bytes are not scanned and rewritten again.
func Object(fields map[string]json.RawMessage) json.RawMessage {
	keys := make([]string, 0, len(fields))
	n := 2
	for k, v := range fields {
		keys = append(keys, k)
		n += len(k) + len(v) + 4
	}
	slices.Sort(keys)
	out := make(json.RawMessage, 0, n)
	out = append(out, '{')
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, MustMarshal(k)...)
		out = append(out, ':')
		out = append(out, fields[k]...)
	}
	return append(out, '}')
}

// Marshal is json.Marshal without its HTML escaping, which would rewrite the <, > and & of
// the request's own blocks and of tool output (the same JSON, but not the bytes the agent
// sent).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// MustMarshal is Marshal of values that cannot fail to marshal (strings, raw JSON a decoder
// checked, and structs and maps of them).
func MustMarshal(v any) json.RawMessage {
	b, err := Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("rawjson: marshal %T: %v", v, err))
	}
	return b
}
