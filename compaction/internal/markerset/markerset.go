// Package markerset finds any of a fixed set of substrings in a text in one pass: the
// extractive summarizer tests every message against dozens of markers.
package markerset

import "strings"

// Set tells whether a text holds any of a fixed set of substrings, in one pass over
// the text: testing dozens of markers one strings.Contains at a time read each message
// dozens of times and was a quarter of an extractive summary's cost.
type Set struct {
	first   [256]bool     // a marker starts with the byte
	pair    [1024]uint64  // a marker of two bytes or more starts with the pair (a bit set)
	short   [256]bool     // a marker is the byte alone
	byFirst [256][]string // the markers by their first byte
	empty   bool          // "" is a marker: every text holds it
}

// New is the set of markers.
func New(markers ...string) *Set {
	s := &Set{}
	for _, m := range markers {
		if m == "" {
			s.empty = true
			continue
		}
		s.first[m[0]] = true
		if len(m) == 1 {
			s.short[m[0]] = true
		} else {
			p := uint16(m[0])<<8 | uint16(m[1])
			s.pair[p>>6] |= 1 << (p & 63)
		}
		s.byFirst[m[0]] = append(s.byFirst[m[0]], m)
	}
	return s
}

// In reports whether text contains one of the markers (what ContainsAny reports).
func (s *Set) In(text string) bool {
	if s.empty {
		return true
	}
	// Most bytes start no marker, and most pairs of bytes that do start one start none:
	// testing the pair first keeps the per-byte work to two table reads.
	for i := 0; i < len(text); i++ {
		c := text[i]
		if !s.first[c] {
			continue
		}
		if s.short[c] {
			return true
		}
		if i+1 == len(text) {
			break
		}
		if p := uint16(c)<<8 | uint16(text[i+1]); s.pair[p>>6]&(1<<(p&63)) == 0 {
			continue
		}
		for _, m := range s.byFirst[c] {
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
	if s.empty {
		return true
	}
	for i := 0; i < len(text); i++ {
		c := lowerByte(text[i])
		if !s.first[c] {
			continue
		}
		if s.short[c] {
			return true
		}
		if i+1 == len(text) {
			break
		}
		if p := uint16(c)<<8 | uint16(lowerByte(text[i+1])); s.pair[p>>6]&(1<<(p&63)) == 0 {
			continue
		}
		for _, m := range s.byFirst[c] {
			if HasPrefixFold(text[i:], m) {
				return true
			}
		}
	}
	return false
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
