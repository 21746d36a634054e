// Package toolargs reads string fields of a tool call's JSON arguments without decoding
// them: arguments can be whole files, cut short, and most calls need one or two fields.
package toolargs

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/internal/jsonscan"
)

// jsonKeyWindow is how far into a tool call's arguments a key is looked for: models write
// "command" and "path" before "file_text".
const jsonKeyWindow = 1024

// StringField returns the string value of the first of keys present in the JSON object
// text js (which may be cut short: a value cut off is returned as far as it goes). It scans
// instead of decoding because arguments can be whole files.
func StringField(js string, keys ...string) (string, bool) {
	for _, key := range keys {
		pat := `"` + key + `"`
		off := 0
		keys := js[:min(len(js), jsonKeyWindow)]
		for off < len(keys) {
			i := strings.Index(keys[off:], pat)
			if i < 0 {
				break
			}
			j := off + i + len(pat)
			off = j
			for j < len(js) && (js[j] == ' ' || js[j] == '\n' || js[j] == '\t' || js[j] == '\r') {
				j++
			}
			if j >= len(js) || js[j] != ':' {
				continue
			}
			j++
			for j < len(js) && (js[j] == ' ' || js[j] == '\n' || js[j] == '\t' || js[j] == '\r') {
				j++
			}
			if j >= len(js) || js[j] != '"' {
				break
			}
			end := j + 1
			for end < len(js) && js[end] != '"' {
				if js[end] == '\\' {
					end++
				}
				end++
			}
			raw := js[j:min(end, len(js))]
			if end < len(js) && plainJSONString(raw[1:]) {
				return raw[1:], true // nothing to unescape: what Unmarshal would return
			}
			for k := 0; k < 8 && len(raw) > 1; k++ { // cut short: drop a partial escape
				if s, ok := decodeString(raw + `"`); ok {
					return s, true
				}
				raw = raw[:len(raw)-1]
			}
			return "", true
		}
	}
	return "", false
}

// plainJSONString reports whether s, the inside of a JSON string, decodes to itself: no
// escape, no control character, valid UTF-8. Most arguments are; decoding them costs more
// than the rest of reading a call.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c < 0x20 {
			return false
		}
	}
	return utf8.ValidString(s)
}

// decodeString is what json.Unmarshal decodes the JSON string q to, and whether q is one:
// the module's scanner when q is valid UTF-8 (most arguments with escapes are), else
// encoding/json, which replaces each invalid byte its own way.
func decodeString(q string) (string, bool) {
	b := []byte(q)
	if len(b) < 2 || b[0] != '"' {
		return "", false
	}
	if end, _, ok := jsonscan.ScanString(b, 0); !ok || end != len(b) {
		return "", false
	}
	if utf8.Valid(b) {
		return jsonscan.DecodeString(b), true
	}
	var s string
	return s, json.Unmarshal(b, &s) == nil
}
