package compaction

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMarkerSet: a markerSet finds a marker exactly when containsAny does, for every set
// the extractive summarizer uses and texts built from pieces of its markers.
func TestMarkerSet(t *testing.T) {
	sets := [][]string{choiceMarkers[:], reasonMarkers[:], actionMarkers[:], commitMarkers[:], placeMarkers[:],
		changeMarkers[:], planMarkers[:], errorWords[:], {"a", "ab", ""}, {"q", "ab", "xyz"}, nil}
	const errorWordsSet = 7
	rng := rand.New(rand.NewPCG(3, 4))
	for si, set := range sets {
		ms := newMarkerSet(set...)
		texts := []string{"", "x", "ünï instead. cödé", strings.Repeat("z", 500)}
		for range 2000 {
			var b strings.Builder
			for range rng.IntN(6) {
				if len(set) > 0 && set[rng.IntN(len(set))] != "" {
					m := set[rng.IntN(len(set))]
					b.WriteString(m[:rng.IntN(len(m)+1)]) // a marker, or a prefix of one
				}
				b.WriteString([]string{" ", "e", "\n", "é", "", "İ", "K", "I", "S", "q", "x"}[rng.IntN(11)])
			}
			texts = append(texts, b.String())
		}
		for _, text := range texts {
			if got, want := ms.in(text), containsAny(text, set); got != want {
				t.Fatalf("set %d, text %q: markerSet.in = %v, containsAny = %v", si, text, got, want)
			}
			if si == errorWordsSet {
				for _, v := range []string{text, strings.ToUpper(text), "İ" + text + "K"} {
					if got, want := ms.inFold(v), containsAny(strings.ToLower(v), set); got != want {
						t.Fatalf("errorWords, text %q: inFold = %v, containsAny of it lower-cased = %v", v, got, want)
					}
				}
			}
		}
	}
}

// TestFoldKey: foldKey is the three passes it replaces, digits folded or not.
func TestFoldKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pieces := []string{" ", "\t", "\n", "A", "z", "İ", "K", "ß", "Σ", "1", "22", "\xff", "\u00a0", "\u2003", "x.", "ÉCOLE", ":"}
	texts := []string{"", " ", "  lead and trail  ", "Found 12 actions, 3 left"}
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(10) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		want := strings.ToLower(strings.Join(strings.Fields(text), " "))
		if got := foldKey(text, false); got != want {
			t.Fatalf("foldKey(%q, false) = %q, want %q", text, got, want)
		}
		var d strings.Builder
		inDigits := false
		for _, r := range want {
			if r >= '0' && r <= '9' {
				if !inDigits {
					d.WriteByte('#')
				}
				inDigits = true
				continue
			}
			inDigits = false
			d.WriteRune(r)
		}
		if got := foldKey(text, true); got != d.String() {
			t.Fatalf("foldKey(%q, true) = %q, want %q", text, got, d.String())
		}
	}
}

// lowerASCII lower-cases the ASCII letters of s and nothing else, so every byte stays where
// it was (strings.ToLower can change lengths, and replaces invalid UTF-8).
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// TestMayBeErrorLine: the one-pass test is the one it replaced, on lines lower-cased byte
// for byte.
func TestMayBeErrorLine(t *testing.T) {
	old := func(lower string) bool {
		for _, w := range errorWords {
			if w != "error" && strings.Contains(lower, w) {
				return true
			}
		}
		l := strings.TrimLeft(lower, " \t")
		return strings.HasPrefix(l, "error") || strings.Contains(l, "error:") || strings.Contains(l, "error[") || strings.Contains(l, "syntaxerror")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	pieces := append([]string{" ", "\t", "ERROR", "Error", "err", "or:", "[", "İ", "K", "SyntaxError", "x"}, errorWords[:]...)
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(6) {
			p := pieces[rng.IntN(len(pieces))]
			if rng.IntN(2) == 0 {
				p = strings.ToUpper(p)
			}
			b.WriteString(p[:rng.IntN(len(p)+1)])
		}
		line := b.String()
		if got, want := mayBeErrorLine(line), old(lowerASCII(line)); got != want {
			t.Fatalf("mayBeErrorLine(%q) = %v, before it was %v", line, got, want)
		}
		if got, want := errorWordSet.inFoldASCII(line), containsAny(lowerASCII(line), errorWords[:]); got != want {
			t.Fatalf("inFoldASCII(%q) = %v, want %v", line, got, want)
		}
	}
}
