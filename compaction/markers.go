package compaction

import "strings"

// markerSet tells whether a text holds any of a fixed set of substrings, in one pass over
// the text: testing dozens of markers one strings.Contains at a time read each message
// dozens of times and was a quarter of an extractive summary's cost.
type markerSet struct {
	first   [256]bool     // a marker starts with the byte: most bytes of a text do not
	byFirst [256][]string // the markers by their first byte
	empty   bool          // "" is a marker: every text holds it
}

func newMarkerSet(markers ...string) *markerSet {
	s := &markerSet{}
	for _, m := range markers {
		if m == "" {
			s.empty = true
			continue
		}
		s.first[m[0]] = true
		s.byFirst[m[0]] = append(s.byFirst[m[0]], m)
	}
	return s
}

// in reports whether text contains one of the markers (what containsAny reports).
func (s *markerSet) in(text string) bool {
	if s.empty {
		return true
	}
	for i := 0; i < len(text); i++ {
		if !s.first[text[i]] {
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

// inFold is in for the text lower-cased, without the copy: ASCII letters are folded. For
// markers of lower-case ASCII it reports what in(strings.ToLower(text)) does, except where
// a non-ASCII letter lower-cases to ASCII (the Kelvin sign to "k", "İ" to "i" and a
// combining dot), which the sets it is used with are tested against.
func (s *markerSet) inFold(text string) bool {
	if s.empty {
		return true
	}
	for i := 0; i < len(text); i++ {
		if !s.first[lowerByte(text[i])] {
			continue
		}
		for _, m := range s.byFirst[lowerByte(text[i])] {
			if hasPrefixFold(text[i:], m) {
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

// hasPrefixFold is strings.HasPrefix(lowerASCII(s), prefix) for a lower-case prefix.
func hasPrefixFold(s, prefix string) bool {
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
