// Package markersettest checks a marker table's Set against the plain search it replaces,
// for the packages that own marker tables (each tests its own tables with it).
package markersettest

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction/internal/markerset"
)

// Check fails t unless markerset.New(markers...).In finds a marker exactly when a
// strings.Contains of each marker does, on texts built from the markers and their prefixes;
// with fold, InFold too, on the texts in other cases.
func Check(t testing.TB, markers []string, fold bool) {
	t.Helper()
	ms := markerset.New(markers...)
	rng := rand.New(rand.NewPCG(3, 4))
	texts := make([]string, 0, 2004)
	texts = append(texts, "", "x", "ünï instead. cödé", strings.Repeat("z", 500))
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(6) {
			if len(markers) > 0 && markers[rng.IntN(len(markers))] != "" {
				m := markers[rng.IntN(len(markers))]
				b.WriteString(m[:rng.IntN(len(m)+1)]) // a marker, or a prefix of one
			}
			b.WriteString([]string{" ", "e", "\n", "é", "", "İ", "K", "I", "S", "q", "x"}[rng.IntN(11)])
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		if got, want := ms.In(text), markerset.ContainsAny(text, markers); got != want {
			t.Fatalf("markers %q, text %q: Set.In = %v, ContainsAny = %v", markers, text, got, want)
		}
		if fold {
			for _, v := range []string{text, strings.ToUpper(text), "İ" + text + "K"} {
				if got, want := ms.InFold(v), markerset.ContainsAny(strings.ToLower(v), markers); got != want {
					t.Fatalf("markers %q, text %q: InFold = %v, ContainsAny of it lower-cased = %v", markers, v, got, want)
				}
			}
		}
	}
}

// LowerASCII lower-cases the ASCII letters of s and nothing else, so every byte stays where
// it was (strings.ToLower can change lengths, and replaces invalid UTF-8).
func LowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
