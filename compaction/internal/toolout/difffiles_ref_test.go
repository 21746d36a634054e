package toolout

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestDiffFilesLines: DiffFiles, which reads a diff line by line, finds what the search for
// the marker it replaced (diffFilesRef) found.
func TestDiffFilesLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	pieces := []string{
		"diff --git a/x.py b/x.py", "diff --git a/dir/y.go b/dir/y.go", "diff --git a/nob", "diff --git a/ b/z",
		" not diff --git a/skip.py b/skip.py", "diff --git a/two words b/two words", "diff --git a/t\tb b/t",
		"index 1..2 100644", "--- a/x.py", "+++ b/x.py", "@@ -1 +1 @@", "-old", "+new diff --git a/in.py b/in.py",
		"", "diff --git a/", "diff --git a/w b/", "xdiff --git a/q b/q", "diff --git a/r.py b/r.py\r",
	}
	for range 3000 {
		n := rng.IntN(30)
		lines := make([]string, 0, n)
		for range n {
			lines = append(lines, pieces[rng.IntN(len(pieces))])
		}
		diff := strings.Join(lines, "\n")
		if rng.IntN(2) == 0 {
			diff += "\n"
		}
		for _, max := range []int{1, 3, 200} {
			if got, want := DiffFiles(diff, max), diffFilesRef(diff, max); !slices.Equal(got, want) {
				t.Fatalf("DiffFiles(%q, %d) = %q, the marker search found %q", diff, max, got, want)
			}
		}
	}
}

// diffFilesRef is DiffFiles as it was: a search for the marker, kept where it starts a line.
func diffFilesRef(diff string, max int) []string {
	const marker = "diff --git a/"
	var out []string
	for start := 0; len(out) < max; {
		i := strings.Index(diff[start:], marker)
		if i < 0 {
			break
		}
		i += start
		start = i + len(marker)
		if i > 0 && diff[i-1] != '\n' {
			continue
		}
		rest := diff[start:]
		end := strings.IndexAny(rest, " \n")
		if end > 0 && strings.HasPrefix(rest[end:], " b/") {
			out = append(out, rest[:end])
		}
	}
	return out
}
