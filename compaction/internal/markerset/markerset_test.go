package markerset_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction/internal/markerset"
	"github.com/harness9/compaction-operator/compaction/internal/markerset/markersettest"
)

// TestSet: a Set finds a marker exactly when a search of each marker does, for sets with
// an empty marker, one-byte markers and none. The tables of the summarizer are checked
// where they are defined.
func TestSet(t *testing.T) {
	for _, set := range [][]string{{"a", "ab", ""}, {"q", "ab", "xyz"}, {"error", "fatal", "no such file"}, nil} {
		markersettest.Check(t, set, true)
	}
}

func TestHasPrefixFold(t *testing.T) {
	cases := []struct {
		s, prefix string
		want      bool
	}{
		{"ERROR: x", "error", true},
		{"Error", "error", true},
		{"Err", "error", false},
		{"İrror", "irror", false}, // only ASCII letters fold
		{"", "", true},
	}
	for _, c := range cases {
		if got := markerset.HasPrefixFold(c.s, c.prefix); got != c.want {
			t.Errorf("HasPrefixFold(%q, %q) = %v, want %v", c.s, c.prefix, got, c.want)
		}
	}
}

// TestInFoldASCII: InFoldASCII is In on the text with its ASCII letters lower-cased.
func TestInFoldASCII(t *testing.T) {
	markers := []string{"error", "no such file", "fatal", "x"}
	ms := markerset.New(markers...)
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{" ", "ERR", "Or", "no SUCH", " file", "FATAL", "İ", "K", "X", "\xff"}
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(6) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		text := b.String()
		if got, want := ms.InFoldASCII(text), markerset.ContainsAny(markersettest.LowerASCII(text), markers); got != want {
			t.Fatalf("InFoldASCII(%q) = %v, want %v", text, got, want)
		}
	}
}

// BenchmarkInFoldASCII reads source code and log lines, where most positions start no
// marker but many start with a letter some marker starts with.
func BenchmarkInFoldASCII(b *testing.B) {
	ms := markerset.New("fail", "xit", "eturn", "exception", "error", "fatal", "panic", "no such file", "not found", "permission denied")
	line := "        self.assertEqual(response.status_code, 200, msg=f\"unexpected body {response.content!r}\")"
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if ms.InFoldASCII(line) {
			b.Fatal("no marker in the line")
		}
	}
}

// TestIndexFoldASCII: IndexFoldASCII is the first index at which a marker starts in the
// text with its ASCII letters lower-cased.
func TestIndexFoldASCII(t *testing.T) {
	markers := []string{"error", "no such file", "fatal", "x", "er"}
	for _, set := range [][]string{markers, markers[:3], {""}} {
		ms := markerset.New(set...)
		rng := rand.New(rand.NewPCG(5, 6))
		pieces := []string{" ", "ERR", "Or", "no SUCH", " file", "FATAL", "İ", "K", "X", "\xff", "e"}
		for range 5000 {
			var b strings.Builder
			for range rng.IntN(8) {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
			text := b.String()
			lower := markersettest.LowerASCII(text)
			want := -1
			for _, m := range set {
				if i := strings.Index(lower, m); i >= 0 && (want < 0 || i < want) {
					want = i
				}
			}
			if got := ms.IndexFoldASCII(text); got != want {
				t.Fatalf("markers %q: IndexFoldASCII(%q) = %d, want %d", set, text, got, want)
			}
		}
	}
}
