package toolout

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestFailureLinesJumps: FailureLines, which jumps from one line with a trigger word to
// the next, selects what the line-by-line scan it replaced (failureLinesRef) selected.
func TestFailureLinesJumps(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	pieces := []string{
		"collected 3 items", "tests/test_a.py::test_b FAILED [ 45%]", "FAILED tests/test_a.py::test_c - KeyError: 'k'",
		"Traceback (most recent call last):", "  File \"x.py\", line 3, in f", "    raise ValueError(x)", "ValueError: bad",
		"", "    return 1", "exit status 1", "exit status 0", "error: cannot open", "  Error mentioned in code", "ok",
		"E   AssertionError: 1 != 2", "StopIteration", "print('hello world')", "panic: boom", "--- FAIL: TestX (0.00s)",
		"   Traceback (most recent call last):", "no such file or directory", "def error_handler(self):", "\tx = 1",
		"<returncode>2</returncode>", "ERROR: test_x (pkg.T)", "test_y (pkg.T) ... ERROR", "FooException: x\r",
	}
	for range 3000 {
		n := rng.IntN(40)
		lines := make([]string, 0, n)
		for range n {
			lines = append(lines, pieces[rng.IntN(len(pieces))])
		}
		content := strings.Join(lines, "\n")
		if rng.IntN(2) == 0 {
			content += "\n"
		}
		from, to := 0, len(content)
		if len(content) > 0 {
			from = rng.IntN(len(content) + 1)
			to = from + rng.IntN(len(content)-from+1)
		}
		shown := ""
		if rng.IntN(3) == 0 && len(lines) > 0 {
			shown = lines[rng.IntN(len(lines))]
		}
		got, gotLeft := FailureLines(content, from, to, shown)
		want, wantLeft := failureLinesRef(content, from, to, shown)
		if !slices.Equal(got, want) || gotLeft != wantLeft {
			t.Fatalf("content %q [%d,%d):\ngot  %q, %d left\nwant %q, %d left", content, from, to, got, gotLeft, want, wantLeft)
		}
	}
}

// failureLinesRef is FailureLines as it was before it jumped between trigger lines: every
// line classified in turn.
func failureLinesRef(content string, from, to int, shown string) (lines []string, left int) {
	if from >= to || to > len(content) {
		return nil, 0
	}
	var (
		sel         []keyLine
		matched     int
		strong      bool // a line ranks above rankMention
		inTraceback bool
		tbIndent    int
	)
	for pos := 0; pos < len(content); {
		end := strings.IndexByte(content[pos:], '\n')
		if end < 0 {
			end = len(content)
		} else {
			end += pos
		}
		line := strings.TrimSuffix(content[pos:end], "\r")
		start := pos
		pos = end + 1
		if start >= to {
			// Past the range only whether a line reports a failure matters.
			if strong {
				break
			}
			strong = failureRank(line) < rankMention
			continue
		}
		inRange := start >= from
		rank := rankNone
		indent := len(line) - len(strings.TrimLeft(line, " \t"))
		switch {
		case inTraceback && line == "":
			inTraceback = false // Python prints no blank line inside a traceback
		case inTraceback && indent > tbIndent:
			continue // a frame: the code it shows is not the error
		case inTraceback:
			inTraceback = false
			if t := strings.TrimSpace(line); exceptionRE.MatchString(t) || exceptionName(t) {
				rank = rankError // the exception a traceback ends with
			}
		case strings.Contains(line, "Traceback (most recent call last)"):
			inTraceback, tbIndent = true, indent
			continue
		}
		if rank == rankNone {
			rank = failureRank(line)
		}
		if rank < rankMention {
			strong = true
		}
		if !inRange || rank == rankNone {
			continue
		}
		matched++
		text := keyLineText(line)
		if slices.ContainsFunc(sel, func(k keyLine) bool { return k.text == text }) {
			continue // a repeated line is shown once and counted as left out
		}
		k := keyLine{rank, start, text}
		if len(sel) < KeyLines {
			sel = append(sel, k)
			continue
		}
		// Full: replace the weakest, earliest line when this one ranks at least as high
		// (being later, it is the more recent one).
		w := 0
		for i := 1; i < len(sel); i++ {
			if sel[i].rank > sel[w].rank || sel[i].rank == sel[w].rank && sel[i].pos < sel[w].pos {
				w = i
			}
		}
		if k.rank <= sel[w].rank {
			sel = append(sel[:w], sel[w+1:]...)
			sel = append(sel, k) // positions stay sorted: k is the latest
		}
	}
	if !strong {
		return nil, 0 // only mentions: not an error report
	}
	left = matched - len(sel)
	lines = make([]string, 0, len(sel))
	for _, k := range sel {
		core := strings.TrimSpace(k.text)
		if c, ok := strings.CutPrefix(core, "E "); ok {
			core = strings.TrimSpace(c) // pytest's marker of an assertion's lines
		}
		if len(core) >= minRepeatedCore && strings.Contains(shown, core) {
			continue
		}
		lines = append(lines, k.text)
	}
	return lines, left
}

// rankTriggerPieces build lines for TestRankTriggersCoverClassify and seed its fuzz target:
// every kind of line classifyLine ranks, in several spellings, and words that come close.
var rankTriggerPieces = []string{
	"exit status 1", "exit status 0", "Exit code 2", "exit code: 3", "EXIT CODE 4", "exited with", "xit", "Xit code 5",
	"returned non-zero exit status 1", "<returncode>1</returncode>", "<returncode>0</returncode>", "returncode=2",
	"return code 3", "Return code: 4", "return x", "returned", "non-zero", "--- FAIL: TestX (0.00s)", "FAIL", "FAILED",
	"tests/a.py::b FAILED [ 45%]", "test_y (pkg.T) ... ERROR", "ERROR: x", "ERROR", "error: cannot open", "Error",
	"ValueError: bad", "java.io.IOException: closed", "Exception in thread", "FooException", "panic: boom", "fatal:",
	"No such file or directory", "not found", "Permission denied", "No module named x", "cannot import name",
	"is not defined", "No replacement", "verbatim", "SyntaxError", "error[E0308]", "  ", "\t", ":", " ", "1", "x",
	"line", "\xff", "İ", "K",
}

// TestRankTriggersCoverClassify: a line classifyLine ranks holds one of rankTriggers, so
// the prefilter of failureRank and the jumps of FailureLines skip no line that counts.
func TestRankTriggersCoverClassify(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 200000 {
		var b strings.Builder
		for range 1 + rng.IntN(4) {
			b.WriteString(rankTriggerPieces[rng.IntN(len(rankTriggerPieces))])
			if rng.IntN(2) == 0 {
				b.WriteByte(' ')
			}
		}
		checkRankTriggers(t, b.String())
	}
}

func checkRankTriggers(t *testing.T, line string) {
	t.Helper()
	if rank := classifyLine(line); rank != rankNone && !rankTriggers.InFoldASCII(line) {
		t.Fatalf("classifyLine(%q) = %d, but the line holds none of rankTriggers", line, rank)
	}
}

func FuzzRankTriggers(f *testing.F) {
	for _, p := range rankTriggerPieces {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.Contains(line, "\n") {
			return // one line at a time, as FailureLines classifies them
		}
		checkRankTriggers(t, line)
	})
}
