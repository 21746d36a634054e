package toolout

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction/internal/markerset"
	"github.com/harness9/compaction-operator/compaction/internal/markerset/markersettest"
)

func TestExtractiveFailingTestName(t *testing.T) {
	cases := []struct{ line, want string }{
		{"--- FAIL: TestEvict (0.01s)", "TestEvict"},
		{"    --- FAIL: TestEvict/ttl_expired (0.00s)", "TestEvict/ttl_expired"},
		{"FAILED tests/test_a.py::test_b - AssertionError: x", "tests/test_a.py::test_b"},
		{"FAILED tests/test_a.py::TestC::test_d[1-2]", "tests/test_a.py::TestC::test_d[1-2]"},
		{"ERROR tests/test_a.py::test_e - fixture 'db' not found", "tests/test_a.py::test_e"},
		{"tests/test_a.py::test_b FAILED                     [ 45%]", "tests/test_a.py::test_b"},
		{"FAIL: test_aware (timezones.tests.SerializationTests)", "timezones.tests.SerializationTests.test_aware"},
		{"ERROR: test_get (__main__.RequestsTestCase)", "__main__.RequestsTestCase.test_get"},
		{"FAIL: test_x (pkg.T.test_x)", "pkg.T.test_x"},
		{"test_x (pkg.T) ... FAIL", "pkg.T.test_x"},
		{"test cache::tests::evicts ... FAILED", "cache::tests::evicts"},
		{"FAILED (failures=3, skipped=8)", ""},
		{"FAIL", ""},
		{"FAIL\texample.com/cache\t0.02s", ""},
		{"tests/test_a.py::test_b PASSED", ""},
		{"ERROR: Could not find a version that satisfies the requirement foo", ""},
	}
	for _, c := range cases {
		got, ok := failingTestName(c.line)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%q: %q %v, want %q", c.line, got, ok, c.want)
		}
	}
	names, more := FailingTests("FAILED a::t1\nFAILED a::t2\na::t1 FAILED\nFAILED a::t3\nFAILED a::t4\nFAILED a::t5\nFAILED a::t6\nFAILED a::t7\n")
	if !slices.Equal(names, []string{"a::t3", "a::t4", "a::t5", "a::t6", "a::t7"}) || more != 2 {
		t.Errorf("toolout.FailingTests: %q +%d, want the latest 5 and 2 more", names, more)
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
		if got, want := errorWordSet.InFoldASCII(line), markerset.ContainsAny(markersettest.LowerASCII(line), errorWords[:]); got != want {
			t.Fatalf("inFoldASCII(%q) = %v, want %v", line, got, want)
		}
	}
}

// TestErrorWords: errorWordSet finds a word exactly when a search of each does, case
// folded too.
func TestErrorWords(t *testing.T) {
	markersettest.Check(t, errorWords[:], true)
}

// TestFailureLinesRange: only lines starting in [from, to) are chosen, a failure outside
// the range still makes mentions count, and lines already shown are dropped.
func TestFailureLinesRange(t *testing.T) {
	content := "FAILED a::head\n    raise ValueError(x)\nok\nFAILED a::tail - boom\n"
	mid := strings.Index(content, "ok\n")
	tail := strings.Index(content, "FAILED a::tail")
	cases := []struct {
		name     string
		from, to int
		shown    string
		want     []string
		left     int
	}{
		{"the middle only", len("FAILED a::head\n"), tail, "", []string{"    raise ValueError(x)"}, 0},
		{"everything", 0, len(content), "", []string{"FAILED a::head", "    raise ValueError(x)", "FAILED a::tail - boom"}, 0},
		{"shown elsewhere", 0, mid, "FAILED a::head", []string{"    raise ValueError(x)"}, 0},
		{"an empty range", mid, mid, "", nil, 0},
	}
	for _, c := range cases {
		got, left := FailureLines(content, c.from, c.to, c.shown)
		if !slices.Equal(got, c.want) || left != c.left {
			t.Errorf("%s: got %q (%d left), want %q (%d left)", c.name, got, left, c.want, c.left)
		}
	}
}
