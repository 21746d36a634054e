package compaction

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction/internal/markerset/markersettest"
)

// TestMarkerSet: each marker table of the extractive summarizer finds a marker exactly
// when containsAny does; errorWords case folded too.
func TestMarkerSet(t *testing.T) {
	for _, set := range [][]string{choiceMarkers[:], reasonMarkers[:], actionMarkers[:], commitMarkers[:], placeMarkers[:],
		changeMarkers[:], planMarkers[:]} {
		markersettest.Check(t, set, false)
	}
	markersettest.Check(t, errorWords[:], true)
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
		if got, want := mayBeErrorLine(line), old(markersettest.LowerASCII(line)); got != want {
			t.Fatalf("mayBeErrorLine(%q) = %v, before it was %v", line, got, want)
		}
		if got, want := errorWordSet.InFoldASCII(line), markersettest.ContainsAny(markersettest.LowerASCII(line), errorWords[:]); got != want {
			t.Fatalf("inFoldASCII(%q) = %v, want %v", line, got, want)
		}
	}
}
