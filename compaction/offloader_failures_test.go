package compaction

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction/internal/toolout"
)

// pytestVerboseLog is a pytest -v run of n tests in which the tests at the indexes failing
// fail, with its short summary at the end.
func pytestVerboseLog(n int, failing ...int) string {
	var b strings.Builder
	b.WriteString("============================= test session starts ==============================\n")
	b.WriteString("platform linux -- Python 3.11.4, pytest-7.4.0, pluggy-1.2.0 -- /usr/bin/python3\n")
	b.WriteString("collecting ... collected " + fmt.Sprint(n) + " items\n\n")
	for i := range n {
		status := "PASSED"
		if slices.Contains(failing, i) {
			status = "FAILED"
		}
		fmt.Fprintf(&b, "tests/test_mod.py::test_case_%03d %s [%3d%%]\n", i, status, 100*(i+1)/n)
	}
	b.WriteString("=========================== short test summary info ============================\n")
	for _, i := range failing {
		fmt.Fprintf(&b, "FAILED tests/test_mod.py::test_case_%03d - assert 2 == 3\n", i)
	}
	fmt.Fprintf(&b, "========================= %d failed, %d passed in 1.23s =========================\n", len(failing), n-len(failing))
	return b.String()
}

// keyLinesOf is toolout.FailureLines as Placeholder calls it with 10 preview lines.
func keyLinesOf(content string) ([]string, int) {
	_, _, headEnd := previewOf(content, 10)
	total := strings.Count(content, "\n")
	if !strings.HasSuffix(content, "\n") {
		total++
	}
	preview, shown, _ := previewOf(content, 10)
	last, _, tailStart := lastLinesOf(content, min(previewTailLines, total-shown))
	return toolout.FailureLines(content, headEnd, tailStart, preview+last)
}

func TestPlaceholderFailureLines(t *testing.T) {
	filler := func(n int) string { return strings.Repeat("ok: step done\n", n) }
	goLog := filler(20) + "=== RUN   TestParse\n--- PASS: TestParse (0.00s)\n=== RUN   TestEvict\n" +
		"    cache_test.go:42: got 3 entries, want 2\n--- FAIL: TestEvict (0.01s)\n=== RUN   TestEvict/ttl\n" +
		"    --- FAIL: TestEvict/ttl (0.00s)\n" + filler(20) + "FAIL\nexit status 1\n" + filler(3) + "FAIL\texample.com/cache\t0.02s\n" + filler(3)
	traceback := filler(20) + "Traceback (most recent call last):\n  File \"/app/run.py\", line 9, in <module>\n" +
		"    raise_error_if(x)  # ValueError: never shown, it is code\n  File \"/app/lib.py\", line 3, in raise_error_if\n" +
		"    raise KeyError(k)\nKeyError: 'timeout'\n" + filler(20) +
		"Traceback (most recent call last):\n  File \"/app/gen.py\", line 2, in <module>\n    next(it)\nStopIteration\n" + filler(20)
	manyFails := filler(20)
	for i := range 20 {
		manyFails += fmt.Sprintf("FAIL: test_%02d (app.tests.T)\nAssertionError: %d != 0\n", i, i)
	}
	manyFails += filler(20)
	cases := []struct {
		name    string
		content string
		want    []string
		left    int
	}{
		{"pytest -v, failures in the middle of 500 lines", pytestVerboseLog(500, 240, 262),
			[]string{"tests/test_mod.py::test_case_240 FAILED [ 48%]", "tests/test_mod.py::test_case_262 FAILED [ 52%]"}, 0},
		{"go test", goLog, []string{"--- FAIL: TestEvict (0.01s)", "    --- FAIL: TestEvict/ttl (0.00s)", "FAIL", "exit status 1", "FAIL\texample.com/cache\t0.02s"}, 0},
		{"a traceback's last line, not the code of its frames", traceback, []string{"KeyError: 'timeout'", "StopIteration"}, 0},
		{"exit codes", filler(20) + "exit status 1\nexit code 2\nexit status 0\nsubprocess.CalledProcessError: Command '['make']' returned non-zero exit status 2.\n<returncode>0</returncode>\n" + filler(20),
			[]string{"exit status 1", "exit code 2", "subprocess.CalledProcessError: Command '['make']' returned non-zero exit status 2."}, 0},
		{"errors", filler(20) + "main.go:3:2: error: undefined: x\nfatal: not a git repository\nbash: foo: command not found\nError: ENOENT: no such file\nException in thread \"main\" java.lang.IllegalStateException: boom\n" + filler(20),
			[]string{"main.go:3:2: error: undefined: x", "fatal: not a git repository", "bash: foo: command not found", "Error: ENOENT: no such file", "Exception in thread \"main\" java.lang.IllegalStateException: boom"}, 0},
		{"budget overflow: failing tests first, the latest kept, the rest counted", manyFails,
			[]string{"FAIL: test_12 (app.tests.T)", "FAIL: test_13 (app.tests.T)", "FAIL: test_14 (app.tests.T)", "FAIL: test_15 (app.tests.T)",
				"FAIL: test_16 (app.tests.T)", "FAIL: test_17 (app.tests.T)", "FAIL: test_18 (app.tests.T)", "FAIL: test_19 (app.tests.T)"}, 32},
		{"a repeated line is shown once", filler(20) + strings.Repeat("ERROR: connection refused\n", 30) + filler(20), []string{"ERROR: connection refused"}, 29},
		{"mentions alone are code, not errors", filler(20) + "    raise ValueError(\"bad\")\n    except KeyError:\n" + filler(20), nil, 0},
		{"mentions count beside an error", filler(20) + "    raise ValueError(\"bad\")\nValueError: bad\n" + filler(20),
			[]string{"    raise ValueError(\"bad\")", "ValueError: bad"}, 0},
		{"lines the head and the tail show are skipped", "FAILED a::b\n" + filler(20) + "FAILED a::c - x\n" + filler(20) + "FAILED a::d\n", []string{"FAILED a::c - x"}, 0},
		{"pytest's E line repeating the summary in the tail", filler(20) + "E       KeyError: 'timeout'\n" + filler(20) + "FAILED t.py::test_x - KeyError: 'timeout'\n",
			nil, 0},
		{"nothing to report", filler(600), nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, left := keyLinesOf(c.content)
			if !slices.Equal(got, c.want) || left != c.left {
				t.Errorf("got %q (%d left), want %q (%d left)", got, left, c.want, c.left)
			}
			if len(got) > toolout.KeyLines {
				t.Errorf("%d lines, over the budget of %d", len(got), toolout.KeyLines)
			}
			again, againLeft := keyLinesOf(c.content)
			if !slices.Equal(got, again) || left != againLeft {
				t.Error("not deterministic")
			}
		})
	}
}

func TestPlaceholderFailureLinesHugeAndInvalid(t *testing.T) {
	filler := strings.Repeat("step\n", 20)
	huge := "FAILED tests/x.py::test_big - " + strings.Repeat("é", 500000) + "\n"
	got, _ := keyLinesOf(filler + huge + filler)
	if len(got) != 1 || len(got[0]) > toolout.KeyLineBytes+60 || !strings.HasSuffix(got[0], " more bytes on this line]") || !utf8.ValidString(got[0]) {
		t.Fatalf("a huge line is not cut: %d lines, %.300q", len(got), got)
	}
	invalid := filler + "Error: bad byte \xff\xfe in \xc3\n" + "FAIL: \x80\x80\x80" + strings.Repeat("\x80", 400) + "\n" + filler
	got, _ = keyLinesOf(invalid)
	if len(got) != 2 {
		t.Fatalf("lines with invalid UTF-8: %q", got)
	}
	for _, l := range got {
		if !utf8.ValidString(l) {
			t.Errorf("invalid UTF-8 in %q", l)
		}
	}
	ph := Placeholder("id", invalid, "ref", 10)
	i := strings.Index(ph, "failure and error lines")
	j := strings.LastIndex(ph, "[...]")
	if i < 0 || j < i || !utf8.ValidString(ph[i:j]) {
		t.Fatalf("the placeholder's failure section is not valid UTF-8:\n%q", ph)
	}
}

// The line selection reads a multi-megabyte result once: no quadratic work per line.
func BenchmarkPlaceholderFailureLines(b *testing.B) {
	log := pytestVerboseLog(50000, 100, 20000, 49000)
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		_ = Placeholder("id", log, "ref", 10)
	}
}
