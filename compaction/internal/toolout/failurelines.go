package toolout

import (
	"slices"
	"strconv"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/markerset"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// The budget of the failure and error lines an offloaded result's placeholder shows
// besides its first and last lines: a 500-line test log names its failing tests in the
// middle, which neither end shows, and the placeholder must stay small.
const (
	KeyLines     = 8   // lines shown at most
	KeyLineBytes = 200 // each cut to this many bytes
)

// Ranks of a failure or error line: on overflow a lower rank is kept first, so the names
// of failing tests are not crowded out by the errors their tracebacks print.
const (
	rankFailure = iota // a failing test or a failed run: "--- FAIL", "FAILED", "FAIL:", "ERROR:"
	rankError          // a traceback's last line, an error message, a non-zero exit code
	rankMention        // any other line saying "Error" or "Exception"
	rankNone
)

// keyLine is a failure or error line chosen for a placeholder.
type keyLine struct {
	rank int
	pos  int // byte offset of the line in the content: the original order
	text string
}

// FailureLines returns, in their original order, up to KeyLines of the lines of
// content that start within [from, to) and report a failure or an error (each cut to
// KeyLineBytes, as valid UTF-8), and how many other such lines there are
// (repeats included). When there are more, the lowest rank is kept first and, within a
// rank, the latest lines: the last failing tests are where a run stands. Lines that only
// mention an error (rankMention) count only when a line of content (in [from, to) or not)
// reports a failure, an error or a non-zero exit code: in a source file read back they are
// code ("raise ValueError(...)"), not errors. A chosen line whose text the lines shown
// around it already hold (pytest's "E   KeyError: 'k'" beside its summary "FAILED t -
// KeyError: 'k'") is dropped, and not counted. One pass over content; the same input gives
// the same lines.
func FailureLines(content string, from, to int, shown string) (lines []string, left int) {
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
	// Outside a traceback, a line without one of rankTriggers ranks none and changes
	// nothing: the scan jumps from one line with a trigger (or a traceback's heading) to
	// the next, one search over content each, instead of testing every line.
	nextTrigger, nextTraceback := -1, -1
	for pos := 0; pos < len(content); {
		if !inTraceback {
			if nextTrigger < pos {
				nextTrigger = rankTriggers.IndexFoldASCII(content[pos:])
				if nextTrigger < 0 {
					nextTrigger = len(content)
				} else {
					nextTrigger += pos
				}
			}
			if nextTraceback < pos && pos < to { // past to, a traceback changes nothing
				nextTraceback = strings.Index(content[pos:], tracebackHeading)
				if nextTraceback < 0 {
					nextTraceback = len(content)
				} else {
					nextTraceback += pos
				}
			}
			next := nextTrigger
			if pos < to {
				next = min(next, nextTraceback)
			}
			if next >= len(content) {
				break
			}
			if next > pos {
				pos = strings.LastIndexByte(content[:next], '\n') + 1
			}
		}
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
			strong, inTraceback = failureRank(line) < rankMention, false
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
			if t := strings.TrimSpace(line); exceptionLine(t) || exceptionName(t) {
				rank = rankError // the exception a traceback ends with
			}
		case strings.Contains(line, tracebackHeading):
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

// tracebackHeading starts a Python traceback.
const tracebackHeading = "Traceback (most recent call last)"

// minRepeatedCore is the shortest line text that, found in the lines a placeholder already
// shows, makes a failure line redundant: a shorter one ("Error") says too little to tell.
const minRepeatedCore = 12

// exceptionName reports whether l is a bare exception name ("StopIteration",
// "asyncio.exceptions.CancelledError"), as a traceback without a message ends.
func exceptionName(l string) bool {
	if l == "" || len(l) > maxTestNameBytes {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if c != '_' && c != '.' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// failureRank classifies one line. Cheap substring tests come first: most lines of a log
// report nothing.
func failureRank(line string) int {
	if !rankTriggers.InFoldASCII(line) {
		return rankNone // none of the words any test below needs: one pass for most lines
	}
	return classifyLine(line)
}

// classifyLine is failureRank without its first test, which it needs one of rankTriggers
// to pass (TestRankTriggersCoverClassify).
func classifyLine(line string) int {
	t := strings.TrimLeft(line, " \t")
	if strings.Contains(t, "FAIL") || strings.HasPrefix(t, "ERROR") || strings.HasSuffix(t, " ... ERROR") {
		switch {
		case strings.HasPrefix(t, "--- FAIL"), // go test
			strings.HasPrefix(t, "FAIL"),       // unittest's FAIL: and FAILED (...), pytest's summary, go's package line
			strings.HasPrefix(t, "ERROR"),      // unittest's ERROR:, pytest's ERROR summary
			strings.Contains(t, " FAILED"),     // pytest -v, cargo test
			strings.HasSuffix(t, " ... FAIL"),  // unittest -v
			strings.HasSuffix(t, " ... ERROR"): // unittest -v
			return rankFailure
		}
	}
	if exitFailedLine(line) {
		return rankError
	}
	// The regular expressions read a line's first maxClassifyBytes: what a line reports is
	// said at its start, and a long line would cost more than it tells.
	head := line
	if len(t) > maxClassifyBytes {
		t = textcut.Head(t, maxClassifyBytes)
		head = line[:len(line)-len(strings.TrimLeft(line, " \t"))+len(t)]
	}
	if mayBeErrorLine(head) && errorLineMatch(t) {
		return rankError
	}
	if strings.Contains(t, "Error") || strings.Contains(t, "Exception") {
		// An exception's name and message: "ValueError: bad value", "Caused by:
		// java.io.IOException: closed", "Exception in thread "main" java.lang.X: boom".
		if strings.Contains(t, "Error: ") || strings.Contains(t, "Exception: ") || exceptionLine(t) {
			return rankError
		}
		return rankMention
	}
	return rankNone
}

// maxClassifyBytes is how much of a line the regular expressions of failureRank read.
const maxClassifyBytes = 400

// mayBeErrorLine is a cheap test before errorLineRE, on the line with its ASCII letters
// lower-cased: one of errorWords, where "error" counts only as "error:", "error[",
// "syntaxerror" or at the line's start (what errorLineRE needs), so code naming ValueError
// costs no regexp run.
func mayBeErrorLine(line string) bool {
	return errorLineWords.InFoldASCII(line) || markerset.HasPrefixFold(strings.TrimLeft(line, " \t"), "error")
}

// rankTriggers are the words, ASCII case folded, of which failureRank's tests need one:
// "FAIL", "ERROR" and "Error" ("error" is in errorWords), the phrases exitFailedLine and
// exitCode look for, "Exception", and mayBeErrorLine's words. The phrases whole, not
// "xit" and "eturn": every "return" in source code read back was a line to classify.
var rankTriggers = markerset.New(append([]string{"fail", "xit code", "xit status", "eturncode", "eturn code", "eturned non-zero", "exception"}, errorWords[:]...)...)

// errorLineWords are the words of mayBeErrorLine, found in one pass.
var errorLineWords = markerset.New(append(slices.DeleteFunc(slices.Clone(errorWords[:]), func(w string) bool { return w == "error" }),
	"error:", "error[", "syntaxerror")...)

// exitFailedLine reports whether a line shows a non-zero exit code: "exit status 1",
// "exit code 2", "<returncode>1</returncode>", "returned non-zero exit status 1".
func exitFailedLine(line string) bool {
	if !strings.Contains(line, "xit") && !strings.Contains(line, "eturn") {
		return false // the cheap test first: most lines say neither
	}
	if strings.Contains(line, "returned non-zero") {
		return true
	}
	if strings.Contains(line, "<returncode>") {
		if m := returnCode.FindStringSubmatch(line); m != nil {
			return m[1] != "0"
		}
	}
	code, ok := exitCode(line)
	return ok && code != 0
}

// keyLineText is a line as a placeholder shows it: cut to KeyLineBytes with the
// bytes left out counted, and valid UTF-8 (a result can hold any bytes).
func keyLineText(line string) string {
	if len(line) > KeyLineBytes {
		cut := textcut.Head(line, KeyLineBytes)
		return strings.ToValidUTF8(cut, "\uFFFD") + " [... " + strconv.Itoa(len(line)-len(cut)) + " more bytes on this line]"
	}
	return strings.ToValidUTF8(line, "\uFFFD")
}

// maxFailingTests is how many failing test names one anchor item lists.
const maxFailingTests = 5

// FailingTests returns the names of the failing tests the lines of text report, each once,
// the latest maxFailingTests of them, and how many others there are.
func FailingTests(text string) (names []string, more int) {
	for line := range strings.SplitSeq(text, "\n") {
		name, ok := failingTestName(strings.TrimSuffix(line, "\r"))
		if !ok || slices.Contains(names, name) {
			continue
		}
		if len(names) == maxFailingTests {
			names = append(names[1:], name)
			more++
			continue
		}
		names = append(names, name)
	}
	return names, more
}

// maxTestNameBytes bounds a test name: longer is not a name.
const maxTestNameBytes = 200

// failingTestName is the name of the test a failure line reports:
//
//	--- FAIL: TestName/sub (0.00s)                      go test
//	FAILED tests/test_a.py::test_b - AssertionError     pytest's summary (and ERROR)
//	tests/test_a.py::test_b FAILED [ 45%]               pytest -v
//	FAIL: test_b (pkg.mod.Class)                        unittest (and ERROR:): pkg.mod.Class.test_b
//	test_b (pkg.mod.Class) ... FAIL                     unittest -v (and ERROR)
//	test mod::tests::b ... FAILED                       cargo test
func failingTestName(line string) (string, bool) {
	t := strings.TrimSpace(line)
	var name string
	switch {
	case strings.HasPrefix(t, "--- FAIL: "):
		name, _, _ = strings.Cut(t[len("--- FAIL: "):], " ")
	case strings.HasPrefix(t, "FAILED ") || strings.HasPrefix(t, "ERROR "):
		_, rest, _ := strings.Cut(t, " ")
		name, _, _ = strings.Cut(rest, " ")
		if !strings.Contains(name, "::") {
			return "", false // "FAILED (failures=3)" names no test
		}
	case strings.HasPrefix(t, "FAIL: ") || strings.HasPrefix(t, "ERROR: "):
		_, rest, _ := strings.Cut(t, ": ")
		name = unittestName(rest)
	case strings.HasSuffix(t, " ... FAIL") || strings.HasSuffix(t, " ... ERROR") || strings.HasSuffix(t, " ... FAILED"):
		rest, _, _ := strings.Cut(t, " ... ")
		if r, ok := strings.CutPrefix(rest, "test "); ok && !strings.Contains(r, " ") {
			name = r // cargo
		} else {
			name = unittestName(rest)
		}
	case strings.Contains(t, "::") && (strings.Contains(t, " FAILED") || strings.Contains(t, " ERROR")):
		var after string
		name, after, _ = strings.Cut(t, " ")
		if !strings.HasPrefix(strings.TrimLeft(after, " "), "FAILED") && !strings.HasPrefix(strings.TrimLeft(after, " "), "ERROR") {
			return "", false
		}
	}
	if name == "" || len(name) > maxTestNameBytes || strings.ContainsAny(name, " \t") {
		return "", false
	}
	return name, true
}

// unittestName turns unittest's "test_b (pkg.mod.Class)" into the ID that runs it,
// "pkg.mod.Class.test_b" (Python 3.11 already writes "test_b (pkg.mod.Class.test_b)").
func unittestName(s string) string {
	method, class, ok := strings.Cut(strings.TrimSpace(s), " (")
	class, closed := strings.CutSuffix(class, ")")
	if !ok || !closed || strings.ContainsAny(method, " ()") || strings.ContainsAny(class, " ()") {
		return ""
	}
	if strings.HasSuffix(class, "."+method) {
		return class
	}
	return class + "." + method
}
