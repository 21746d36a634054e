// Package jsonscan reads JSON in one pass, for the decoders that take the common case
// without encoding/json: the engine's messages (compaction) and the compaction API's
// request bodies (compactrequest). Each function checks what it reads; what it does not
// take, the callers leave to encoding/json, so errors and odd inputs decode as before.
package jsonscan

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting SkipValue checks itself (encoding/json's limit, 10,000,
// is left to encoding/json).
const MaxDepth = 256

// SkipSpace returns the index of the first byte at or after i that is not JSON white space.
func SkipSpace(data []byte, i int) int {
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

// Literal checks that lit (true, false, null) starts at data[i] and returns the index after.
func Literal(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// SkipValue checks the JSON value at data[i] (depth: the nesting of the object or array
// holding it) and returns the index after it. UTF-8 inside strings is the caller's to check.
func SkipValue(data []byte, i, depth int) (int, bool) {
	if i >= len(data) {
		return i, false
	}
	switch c := data[i]; c {
	case '"':
		end, _, ok := ScanString(data, i)
		return end, ok
	case '{', '[':
		if depth >= MaxDepth {
			return i, false
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = SkipSpace(data, i+1)
		if i < len(data) && data[i] == closing {
			return i + 1, true
		}
		for {
			var ok bool
			if c == '{' {
				if i >= len(data) || data[i] != '"' {
					return i, false
				}
				if i, _, ok = ScanString(data, i); !ok {
					return i, false
				}
				i = SkipSpace(data, i)
				if i >= len(data) || data[i] != ':' {
					return i, false
				}
				i = SkipSpace(data, i+1)
			}
			if i, ok = SkipValue(data, i, depth+1); !ok {
				return i, false
			}
			i = SkipSpace(data, i)
			if i >= len(data) {
				return i, false
			}
			if data[i] == closing {
				return i + 1, true
			}
			if data[i] != ',' {
				return i, false
			}
			i = SkipSpace(data, i+1)
		}
	case 't':
		return Literal(data, i, "true")
	case 'f':
		return Literal(data, i, "false")
	case 'n':
		return Literal(data, i, "null")
	default:
		return skipNumber(data, i)
	}
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

// ScanString checks the JSON string at data[i] (its opening quote) and returns the index
// after its closing quote and whether it holds escapes. UTF-8 is the caller's to check.
func ScanString(data []byte, i int) (end int, escaped, ok bool) {
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

// PlainString is the JSON string at data[i] when it has no escapes, no control characters
// and is valid UTF-8 (it is then its own text), and the index after it.
func PlainString(data []byte, i int) (string, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			s := data[i+1 : j]
			if !utf8.Valid(s) {
				return "", j, false
			}
			return string(s), j + 1, true
		case c == '\\' || c < 0x20:
			return "", j, false
		}
	}
	return "", len(data), false
}

// DecodeString is the text of the JSON string v (checked by ScanString, valid UTF-8),
// unescaped as encoding/json does: an unpaired surrogate becomes U+FFFD.
func DecodeString(v []byte) string {
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
