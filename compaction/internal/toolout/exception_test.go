package toolout

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// exceptionRE is what exceptionLine replaces.
var exceptionRE = regexp.MustCompile(`^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Fault)\b(?::.*)?$|^[A-Za-z_][\w.]*: .+`)

// TestExceptionLine: exceptionLine matches exactly the lines exceptionRE does.
func TestExceptionLine(t *testing.T) {
	fixed := []string{
		"", "ValueError", "ValueError: bad", "Error", "Error: x", "KeyError: 'k'", "asyncio.TimeoutError:",
		"asyncio.exceptions.CancelledError", "pkg.Custom: boom", "pkg.Custom:", "pkg.Custom: ", "pkg.Custom:  ",
		"FooError.bar: x", "FooError x", "raise ValueError(x)", "_Error", "9Error", "x: \n", "xError:\nmore",
		"xError:a\n", "ErrorError", "a.Exit", "SystemExit: 2", "KeyboardInterrupt", "x: é", "x: \xff",
		"DeprecationWarning: old", "AssertionFailure", "SegFault", "ValueErrors", "Value Error",
	}
	cases := append(make([]string, 0, len(fixed)+20000), fixed...)

	rng := rand.New(rand.NewPCG(7, 8))
	pieces := []string{"Error", "Exception", "Exit", "x", "_", ".", "9", ":", " ", "\n", "é", "\xff", "Fault", "E", "r"}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(7) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		cases = append(cases, b.String())
	}
	for _, c := range cases {
		if got, want := exceptionLine(c), exceptionRE.MatchString(c); got != want {
			t.Fatalf("exceptionLine(%q) = %v, the regexp says %v", c, got, want)
		}
	}
}

// FuzzExceptionLine compares exceptionLine with the regexp on any input.
func FuzzExceptionLine(f *testing.F) {
	for _, s := range []string{"ValueError: x", "a.b: c", "Error", "x\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := exceptionLine(s), exceptionRE.MatchString(s); got != want {
			t.Fatalf("exceptionLine(%q) = %v, the regexp says %v", s, got, want)
		}
	})
}
