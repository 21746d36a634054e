package toolout

import (
	"strconv"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// DiffFiles are the files a diff changes, from its "diff --git a/X b/X" lines (scanned, not
// matched with a regular expression: a diff can be 800 KB).
func DiffFiles(diff string, max int) []string {
	const marker = "diff --git a/"
	var out []string
	// Line by line: a search for the marker, whose first byte is common in a diff, cost
	// more than the rest of reading a result.
	for len(diff) > 0 && len(out) < max {
		line := diff
		if i := strings.IndexByte(diff, '\n'); i >= 0 {
			line, diff = diff[:i], diff[i+1:]
		} else {
			diff = ""
		}
		rest, ok := strings.CutPrefix(line, marker)
		if !ok {
			continue
		}
		if end := strings.IndexByte(rest, ' '); end > 0 && strings.HasPrefix(rest[end:], " b/") {
			out = append(out, rest[:end])
		}
	}
	return out
}

// StatusLine is a result's first line, where file tools write their status.
func StatusLine(content string) string {
	return textcut.FirstLine(strings.TrimPrefix(strings.TrimSpace(textcut.Head(content, 400)), "OBSERVATION:"))
}

// ExitFailed reports whether a result shows a non-zero exit code.
func ExitFailed(content string) bool {
	if head := textcut.Head(content, 1024); strings.Contains(head, "<returncode>") {
		if m := findReturnCode(head); m != nil {
			return m[1] != "0"
		}
	}
	if code, ok := exitCode(textcut.Tail(content, 256)); ok {
		return code != 0
	}
	return false
}

// findReturnCode is returnCode's submatches in text, read by hand: the expression cost
// more than the rest of reading a result.
func findReturnCode(text string) []string {
	const open, closing = "<returncode>", "</returncode>"
	for {
		i := strings.Index(text, open)
		if i < 0 {
			return nil
		}
		rest := text[i+len(open):]
		j := 0
		if j < len(rest) && rest[j] == '-' {
			j++
		}
		k := j
		for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
			k++
		}
		if k > j && strings.HasPrefix(rest[k:], closing) {
			return []string{text[i : i+len(open)+k+len(closing)], rest[:k]}
		}
		text = rest
	}
}

// LeadingReturnCode splits a result that starts with mini-SWE-agent's
// "<returncode>N</returncode>" into N and what follows the tag.
func LeadingReturnCode(content string) (code, rest string, ok bool) {
	if !strings.HasPrefix(strings.TrimSpace(content), "<returncode>") {
		return "", content, false
	}
	rc := returnCode.FindStringSubmatchIndex(content)
	if rc == nil {
		return "", content, false
	}
	return content[rc[2]:rc[3]], content[rc[1]:], true
}

// exitCode finds the last "exit code N" (or exit status, returncode) in text.
func exitCode(text string) (int, bool) {
	if !strings.Contains(text, "xit code") && !strings.Contains(text, "xit status") && !strings.Contains(text, "eturncode") && !strings.Contains(text, "eturn code") {
		return 0, false // the cheap test first; upper-case spellings are missed
	}
	ms := exitCodeRE.FindAllStringSubmatch(text, -1)
	if ms == nil {
		return 0, false
	}
	n, err := strconv.Atoi(ms[len(ms)-1][1])
	return n, err == nil
}

// StatusFailed reports whether a result's first line is a tool's failure status ("ERROR:",
// "No replacement was performed", "Your proposed edit has introduced new syntax
// error(s)"). Output further down is not read: a file shown after an edit can hold any text.
func StatusFailed(content string) bool {
	l := strings.ToLower(StatusLine(content))
	return strings.HasPrefix(l, "error") || strings.Contains(l, "error:") || strings.Contains(l, "error(s)") ||
		strings.Contains(l, "no replacement was performed") || strings.Contains(l, "did not appear verbatim") ||
		strings.Contains(l, "no such file") || strings.Contains(l, "permission denied") || strings.HasPrefix(l, "usage:") ||
		strings.Contains(l, "is not allowed")
}
