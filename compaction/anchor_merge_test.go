package compaction

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestFoldKey: foldKey is the three passes it replaces, digits folded or not.
func TestFoldKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pieces := []string{" ", "\t", "\n", "A", "z", "İ", "K", "ß", "Σ", "1", "22", "\xff", "\u00a0", "\u2003", "x.", "ÉCOLE", ":"}
	texts := make([]string, 0, 5004)
	texts = append(texts, "", " ", "  lead and trail  ", "Found 12 actions, 3 left")
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
