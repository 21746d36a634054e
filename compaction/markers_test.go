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
		changeMarkers[:], planMarkers[:], errorWords[:], {"a", "ab", ""}, nil}
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
				b.WriteString([]string{" ", "e", "\n", "é", "", "İ", "K", "I", "S"}[rng.IntN(9)])
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
