package toolout

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction/internal/markerset"
)

// errorLineRE is what reads as an error line. errorLineMatch answers it by hand for ASCII
// lines, the regexp (whose case folding is Unicode's: "ſ" matches "s") the others.
var errorLineRE = regexp.MustCompile(`(?i)(?:^|\s|:)(?:error|fatal|panic)(?:\[[^\]]*\])?:\s*\S|^error\b[^:]{0,60}:\s*\S|no such file or directory|command not found|permission denied|no module named|cannot import name|syntaxerror|is not defined|no replacement was performed|did not appear verbatim`)

// errorPhrases are errorLineRE's literal alternatives.
var errorPhrases = markerset.New("no such file or directory", "command not found", "permission denied", "no module named",
	"cannot import name", "syntaxerror", "is not defined", "no replacement was performed", "did not appear verbatim")

// errorLineMatch is errorLineRE.MatchString(l). The regexp tried every alternative at
// every byte of a line and was most of a large log's failure scan.
func errorLineMatch(l string) bool {
	for i := 0; i < len(l); i++ {
		if l[i] >= utf8.RuneSelf {
			return errorLineRE.MatchString(l)
		}
	}
	if errorPhrases.InFoldASCII(l) {
		return true
	}
	// "error: x", "fatal[E1]: x", "panic: x" after the start, a space or a colon.
	for _, w := range [...]string{"error", "fatal", "panic"} {
		for i := 0; i+len(w) <= len(l); i++ {
			if (i == 0 || isSpaceRE(l[i-1]) || l[i-1] == ':') && markerset.HasPrefixFold(l[i:], w) && colonThenText(l[i+len(w):], true) {
				return true
			}
		}
	}
	// "error (in x.py): y": at the start, a word, up to 60 characters, a colon.
	if markerset.HasPrefixFold(l, "error") && (len(l) == 5 || !isWordRE(l[5])) {
		rest := l[5:]
		if n := strings.IndexByte(rest, ':'); n >= 0 && n <= 60 && colonThenText(rest[n:], false) {
			return true
		}
	}
	return false
}

// colonThenText reports whether s is ":", spaces, and a character that is not one, with
// first (when bracket) an optional "[...]" before the colon.
func colonThenText(s string, bracket bool) bool {
	if bracket && s != "" && s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return false
		}
		s = s[end+1:]
	}
	if s == "" || s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isSpaceRE(s[i]) {
			return true
		}
	}
	return false
}

// isSpaceRE is the regexp's \s.
func isSpaceRE(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// isWordRE is the regexp's \w.
func isWordRE(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}
