package toolout

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestErrorLineMatch: errorLineMatch matches exactly the lines errorLineRE does.
func TestErrorLineMatch(t *testing.T) {
	fixed := []string{
		"", "error", "error:", "error: x", "Error: x", "ERROR:  \t", "xerror: y", " error: y", ":error: y", "fatal[E0425]: x",
		"panic: runtime error", "error[E1]:x", "error[E1 x", "error in foo.py: bad", "errors: 3", "error_x: y",
		"error " + strings.Repeat("a", 59) + ": x", "error " + strings.Repeat("a", 60) + ": x", "cat: x: No such file or directory",
		"bash: foo: command not found", "SyntaxError: bad", "NameError: name 'x' is not defined", "no ſuch file or directory",
		"ERROR: ſ", "error: \n x", "error:\n", "error [x]: y", "Error (x):\t\ty",
	}
	cases := append(make([]string, 0, len(fixed)+50000), fixed...)

	rng := rand.New(rand.NewPCG(9, 10))
	pieces := []string{"error", "ERROR", "fatal", "Panic", "[", "]", ":", " ", "\t", "\n", "x", "_", "é", "ſ", "\xff",
		"no such file or directory", "Is Not Defined", "syntax", "e", strings.Repeat("a", 30)}
	for range 50000 {
		var b strings.Builder
		for range rng.IntN(8) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		cases = append(cases, b.String())
	}
	for _, c := range cases {
		if got, want := errorLineMatch(c), errorLineRE.MatchString(c); got != want {
			t.Fatalf("errorLineMatch(%q) = %v, the regexp says %v", c, got, want)
		}
	}
}

// FuzzErrorLineMatch compares errorLineMatch with the regexp on any input.
func FuzzErrorLineMatch(f *testing.F) {
	for _, s := range []string{"error: x", "fatal[x]: y", "error in x: y", "x: No such file or directory"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := errorLineMatch(s), errorLineRE.MatchString(s); got != want {
			t.Fatalf("errorLineMatch(%q) = %v, the regexp says %v", s, got, want)
		}
	})
}
