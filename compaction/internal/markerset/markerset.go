// Package markerset finds any of a fixed set of substrings in a text in one pass: the
// extractive summarizer tests every message against dozens of markers.
package markerset

import "strings"

// Set tells whether a text holds any of a fixed set of substrings, in one pass over
// the text: testing dozens of markers one strings.Contains at a time read each message
// dozens of times and was a quarter of an extractive summary's cost.
type Set struct {
	// pair and foldPair are bit sets of the two-byte prefixes of the markers of two bytes or
	// more: every position of a text is tested against one of them with one table read, and
	// only where a marker may start are its markers compared. foldPair holds the prefixes
	// as they can stand in a text that lower-cases to them.
	pair     [1024]uint64
	foldPair [1024]uint64
	short    [256]bool     // a marker is the byte alone
	anyShort bool          // some marker is one byte long
	byFirst  [256][]string // the markers by their first byte
	empty    bool          // "" is a marker: every text holds it
}

// New is the set of markers.
func New(markers ...string) *Set {
	s := &Set{}
	for _, m := range markers {
		if m == "" {
			s.empty = true
			continue
		}
		if len(m) == 1 {
			s.short[m[0]], s.anyShort = true, true
		} else {
			setPair(&s.pair, m[0], m[1])
			for _, a := range foldVariants(m[0]) {
				for _, b := range foldVariants(m[1]) {
					setPair(&s.foldPair, a, b)
				}
			}
		}
		s.byFirst[m[0]] = append(s.byFirst[m[0]], m)
	}
	return s
}

func setPair(set *[1024]uint64, a, b byte) {
	p := uint16(a)<<8 | uint16(b)
	set[p>>6] |= 1 << (p & 63)
}

func hasPair(set *[1024]uint64, a, b byte) bool {
	p := uint16(a)<<8 | uint16(b)
	return set[p>>6]&(1<<(p&63)) != 0
}

// foldVariants are the bytes a text may hold where a lower-case marker has c: a lower-case
// letter in either case, an upper-case one nowhere (a folded text holds none).
func foldVariants(c byte) []byte {
	switch {
	case 'a' <= c && c <= 'z':
		return []byte{c, c - 'a' + 'A'}
	case 'A' <= c && c <= 'Z':
		return nil
	}
	return []byte{c}
}

// In reports whether text contains one of the markers (what ContainsAny reports).
func (s *Set) In(text string) bool {
	if s.empty {
		return true
	}
	if s.anyShort {
		for i := 0; i < len(text); i++ {
			if s.short[text[i]] {
				return true
			}
		}
	}
	// Most pairs of bytes start no marker: one table read a position, and no branch on
	// the common letters markers start with.
	for i := 0; i+1 < len(text); i++ {
		if !hasPair(&s.pair, text[i], text[i+1]) {
			continue
		}
		for _, m := range s.byFirst[text[i]] {
			if strings.HasPrefix(text[i:], m) {
				return true
			}
		}
	}
	return false
}

// InFold is In(strings.ToLower(text)), for markers of lower-case ASCII, without the copy:
// ASCII letters are folded as they are read. The two letters outside ASCII that lower-case
// to ASCII ("İ" to "i", the Kelvin sign to "k") send the text the long way.
func (s *Set) InFold(text string) bool {
	if s.empty {
		return true
	}
	if strings.Contains(text, "\u0130") || strings.Contains(text, "\u212a") {
		return s.In(strings.ToLower(text))
	}
	return s.InFoldASCII(text)
}

// InFoldASCII is In(lowerASCII(text)) without the copy, for markers of lower-case ASCII.
func (s *Set) InFoldASCII(text string) bool {
	return s.IndexFoldASCII(text) >= 0
}

// IndexFoldASCII is the index in text of the first marker that lowerASCII(text) holds (the
// one that starts first), or -1: a caller looking for lines with a marker reads a whole
// text in one call and skips the lines before it.
func (s *Set) IndexFoldASCII(text string) int {
	if s.empty {
		return 0
	}
	first := -1
	if s.anyShort {
		for i := 0; i < len(text); i++ {
			if s.short[lowerByte(text[i])] {
				first = i
				break
			}
		}
		if first == 0 {
			return 0
		}
		if first > 0 {
			text = text[:first] // a longer marker counts only if it starts before
		}
	}
	if len(text) < 2 {
		return first
	}
	// The previous byte is carried in a register and the table index masked: the loop
	// reads one byte and one table word a position, with no bounds checks.
	prev := uint(text[0])
	for i := 1; i < len(text); i++ {
		c := uint(text[i])
		p := prev<<8 | c
		prev = c
		if s.foldPair[(p>>6)&1023]&(1<<(p&63)) == 0 {
			continue
		}
		for _, m := range s.byFirst[lowerByte(text[i-1])] {
			if HasPrefixFold(text[i-1:], m) {
				return i - 1
			}
		}
	}
	return first
}

func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// HasPrefixFold is strings.HasPrefix(lowerASCII(s), prefix) for a lower-case prefix.
func HasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if lowerByte(s[i]) != prefix[i] {
			return false
		}
	}
	return true
}

// ContainsAny reports whether s contains one of markers, one strings.Contains each: what
// In reports, for a table searched too rarely to build a Set for.
func ContainsAny(s string, markers []string) bool {
	for _, m := range markers {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}
