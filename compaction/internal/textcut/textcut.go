// Package textcut cuts text to a bound without splitting a UTF-8 rune, and folds it to one
// line: the engine bounds every text it keeps or shows, and a cut inside a rune would put
// invalid UTF-8 into a model's context.
package textcut

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Head cuts s to at most n bytes without splitting a rune.
func Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Tail returns the last n bytes of s or fewer, starting on a rune boundary.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && (s[i]&0xC0) == 0x80 {
		i++
	}
	return s[i:]
}

// FirstLine is the first line of s, trimmed.
func FirstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// OneLine folds every run of white space in s, newlines included, into one space.
func OneLine(s string) string {
	// strings.Join(strings.Fields(s), " ") in one pass: the engine folds every user message
	// and item it keeps, and the slice of fields cost more than the text.
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); {
		size, isSpace := 1, false
		if c := s[i]; c < utf8.RuneSelf {
			isSpace = c == ' ' || '\t' <= c && c <= '\r'
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			isSpace = unicode.IsSpace(r)
		}
		if isSpace {
			space = b.Len() > 0
		} else {
			if space {
				b.WriteByte(' ')
				space = false
			}
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Clip trims s and cuts it to n bytes, marking a cut with "...".
func Clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return strings.TrimSpace(Head(s, n)) + "..."
}
