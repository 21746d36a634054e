// Package toolout reads what a tool result says about how its command went: the exit code,
// the test counts, the failing tests and the line that says what went wrong, and which of a
// long log's lines report a failure. It reads text only (a result can be any output, up to
// megabytes), by bounded heads and tails and cheap tests before regular expressions.
package toolout

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/markerset"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// Result is what a tool result says about how its command went.
type Result struct {
	Exit    int      // -1 when the result shows no exit code
	Tests   string   // "1 failed, 22 passed"
	Err     string   // the line that says what went wrong
	Last    string   // the last line of output
	Failing []string // the failing tests it names, the latest last
	More    int      // failing tests beyond those
}

var (
	returnCode   = regexp.MustCompile(`<returncode>(-?\d+)</returncode>`)
	exitCodeRE   = regexp.MustCompile(`(?i)(?:exit code|exit status|returncode|return code)[:= ]+(-?\d+)`)
	pytestCounts = regexp.MustCompile(`^[= ]*((?:\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?|rerun)(?:, )?)+)(?: in [\d.]+s)?(?: \([^)]*\))?[ =]*$`)
	unittestRan  = regexp.MustCompile(`(?m)^Ran (\d+) tests? in [\d.]+s\s*\n\s*\n?(OK.*|FAILED \(.*\))\s*$`)
	// errorWords are what errorLineRE matches, for a cheap test first.
	errorWords  = [...]string{"error", "fatal", "panic", "no such file", "not found", "permission denied", "no module named", "cannot import", "is not defined", "no replacement", "verbatim"}
	pytestELine = regexp.MustCompile(`(?m)^E {2,}(\S.*)$`)
	// errorWordSet finds errorWords in one pass.
	errorWordSet = markerset.New(errorWords[:]...)
)

// Bounds of what Read reads and returns.
const (
	scanBytes     = 8 << 10 // the head and the tail of a tool result that are read
	maxErrorChars = 180     // an error line: with the command before it, an anchor item's 240
)

// Read examines the head and the tail of a result (results can be 800 KB). Of a call
// that only looks at or writes files, only the first lines are read for an error: they
// hold the tool's status, the rest is file content that can say anything.
func Read(content string, runs bool) Result {
	r := Result{Exit: -1}
	window := scanBytes
	if !runs {
		window = 512
	}
	head := strings.ReplaceAll(textcut.Head(content, window), "\r", "")
	tail := head
	if len(content) > window {
		tail = strings.ReplaceAll(textcut.Tail(content, window), "\r", "")
	}
	if m := findReturnCode(head); m != nil {
		r.Exit, _ = strconv.Atoi(m[1])
	} else if code, ok := exitCode(textcut.Tail(tail, 256)); ok {
		r.Exit = code
	}
	if runs {
		// Test summaries are at the end: cheap checks before the regular expressions.
		end := textcut.Tail(tail, 2048)
		lines := strings.Split(end, "\n")
		for i := len(lines) - 1; i >= 0 && r.Tests == ""; i-- {
			l := lines[i]
			if strings.Contains(l, " passed") || strings.Contains(l, " failed") || strings.Contains(l, " error") {
				if m := pytestCounts.FindStringSubmatch(l); m != nil {
					r.Tests = strings.TrimSpace(m[1])
				}
			}
		}
		if r.Tests == "" && strings.Contains(end, "Ran ") {
			if m := unittestRan.FindStringSubmatch(end); m != nil {
				r.Tests = "ran " + m[1] + " tests: " + m[2]
			}
		}
		// The failing tests, from the lines an offloaded result's placeholder keeps too.
		text := head
		if len(content) > window {
			text = head + "\n" + tail
		}
		r.Failing, r.More = FailingTests(text)
	}
	r.Err = errorLine(head, tail)
	r.Last = lastOutputLine(tail)
	return r
}

// errorLine is the line that says what went wrong: pytest's "FAILED test - Error" summary,
// the last line of a Python traceback, pytest's "E   AssertionError ...", the first entry
// under a linter's "ERRORS:", else the first line that reads as an error. Headings such as
// "Traceback (most recent call last):" or "ERRORS:" are never the answer.
func errorLine(head, tail string) string {
	if l := pytestFailedLine(tail); l != "" {
		return cleanLine(l)
	}
	for _, text := range []string{tail, head} {
		if i := strings.LastIndex(text, "Traceback (most recent call last):"); i >= 0 {
			for _, l := range strings.Split(text[i:], "\n")[1:] {
				l = cleanLine(l)
				if l == "" || strings.HasPrefix(l, "File ") || strings.HasPrefix(l, "During handling") || strings.HasPrefix(l, "The above exception") {
					continue
				}
				if exceptionLine(l) {
					return l
				}
			}
		}
	}
	if strings.Contains(tail, "\nE  ") {
		if m := pytestELine.FindStringSubmatch(tail); m != nil {
			return cleanLine(m[1])
		}
	}
	// Else the lines that read as errors, up to three (a script can report several).
	var found []string
	for _, text := range []string{head, tail} {
		if !errorWordSet.InFold(text) || len(found) > 0 {
			continue // most output says nothing of errors: skip splitting it into lines
		}
		afterHeading := false // the line after "ERRORS:" or "ERROR:" says what the error is
		for l := range strings.SplitSeq(text, "\n") {
			if len(found) == 3 {
				break
			}
			if !afterHeading && !errorWordSet.InFold(l) {
				continue
			}
			l = cleanLine(l)
			switch {
			case l == "" || len(l) > 400:
			case isErrorHeading(l):
				t := strings.TrimRight(strings.TrimLeft(l, "-> "), ":")
				afterHeading = strings.EqualFold(t, "errors") || strings.EqualFold(t, "error")
			case afterHeading || errorLineMatch(l):
				l = strings.TrimPrefix(l, "- ")
				if !slices.Contains(found, l) {
					found = append(found, l)
				}
				afterHeading = false
			}
		}
	}
	return strings.Join(found, " | ")
}

// pytestFailedLine is the first of pytest's "FAILED test - error" (or "ERROR test")
// summary lines in text.
func pytestFailedLine(text string) string {
	best := -1
	for _, p := range [...]string{"FAILED ", "ERROR "} {
		for from := 0; ; {
			i := strings.Index(text[from:], p)
			if i < 0 {
				break
			}
			i += from
			from = i + len(p)
			if (i == 0 || text[i-1] == '\n') && from < len(text) && text[from] != ' ' && text[from] != '\n' {
				if best < 0 || i < best {
					best = i
				}
				break
			}
		}
	}
	if best < 0 {
		return ""
	}
	return textcut.FirstLine(text[best:])
}

// isErrorHeading is a line that announces errors without saying what they are.
func isErrorHeading(l string) bool {
	t := strings.Trim(l, "=-_*#>: ")
	u := strings.ToUpper(t)
	return t == "" || u == "ERRORS" || u == "ERROR" || u == "FAILURES" || strings.HasPrefix(l, "Traceback (most recent call last)") ||
		strings.HasPrefix(u, "SHORT TEST SUMMARY") || strings.Contains(l, "===")
}

// cleanLine trims a result line and the markup agent harnesses append to it.
func cleanLine(l string) string {
	if i := strings.Index(l, "[Python Interpreter:"); i >= 0 {
		l = l[:i]
	}
	l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "OBSERVATION:"))
	return textcut.Clip(l, maxErrorChars)
}

// lastOutputLine is the last line of a result that is output, not harness markup.
func lastOutputLine(tail string) string {
	lines := strings.Split(tail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := cleanLine(lines[i])
		switch {
		case l == "", strings.HasPrefix(l, "<") && strings.HasSuffix(l, ">"), strings.HasPrefix(l, "(Open file:"),
			strings.HasPrefix(l, "(Current directory:"), strings.HasPrefix(l, "bash-"), strings.HasPrefix(l, "[Command finished"),
			strings.HasPrefix(l, "root@"), strings.HasSuffix(l, "$"), strings.HasSuffix(l, "#"):
			continue
		}
		return textcut.Clip(l, 100)
	}
	return ""
}

func (r Result) Failed() bool {
	return r.Exit > 0 || strings.Contains(r.Tests, "failed") || strings.Contains(r.Tests, "error") || strings.Contains(r.Tests, "FAILED") || len(r.Failing) > 0
}

// failingItem names the failing tests the error line does not name already: "failing:
// a.py::test_b, TestC (+2 more)", or "".
func (r Result) FailingItem() string {
	var names []string
	for _, n := range r.Failing {
		if !strings.Contains(r.Err, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	s := "failing: " + strings.Join(names, ", ")
	if r.More > 0 {
		s += " (+" + strconv.Itoa(r.More) + " more)"
	}
	return s
}

// outcome is how a command went, for execution_progress.
func (r Result) Outcome() string {
	var parts []string
	if r.Exit >= 0 {
		parts = append(parts, "exit "+strconv.Itoa(r.Exit))
	}
	if r.Tests != "" {
		parts = append(parts, r.Tests)
	}
	if f := r.FailingItem(); f != "" {
		parts = append(parts, f)
	}
	switch {
	case r.Err != "" && (r.Failed() || r.Exit < 0):
		parts = append(parts, r.Err)
	case r.Tests == "" && r.Last != "" && !r.Failed():
		parts = append(parts, r.Last)
	}
	return strings.Join(parts, ": ")
}

// failure is what went wrong, for tried_solution, or "" when nothing did. A call that does
// not run anything fails only with an error line and no zero exit code (grep without a
// match exits 1; a file read can show the word "error"); a script that ran fails with an
// error line whatever its exit code (reproduction scripts print the errors they catch).
func (r Result) Failure(runs bool) string {
	failing := r.FailingItem()
	switch {
	case r.Err != "" && (runs || r.Exit != 0):
		what := r.Err
		if failing != "" {
			what = failing + ": " + what
		}
		if r.Tests != "" {
			return what + " (" + r.Tests + ")"
		}
		return what
	case r.Failed() && runs:
		var parts []string
		switch {
		case r.Tests != "":
			parts = append(parts, r.Tests)
		case r.Exit >= 0:
			parts = append(parts, "exit "+strconv.Itoa(r.Exit))
		}
		if failing != "" {
			parts = append(parts, failing)
		}
		if r.Last != "" {
			parts = append(parts, r.Last)
		}
		return strings.Join(parts, ": ")
	}
	return ""
}
