package toolout

import "strings"

// exceptionSuffixes end the names of exceptions: "ValueError", "KeyboardInterrupt".
var exceptionSuffixes = [...]string{"Error", "Exception", "Exit", "Interrupt", "Warning", "Failure", "Fault"}

// exceptionLine reports whether l reads as an exception and its message: a dotted name
// ending in an exception word, alone or before a colon ("ValueError", "KeyError: 'k'",
// "asyncio.TimeoutError:"), or any dotted name before ": " and a message ("pkg.Custom:
// boom"). It is the regular expression
//
//	^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Fault)\b(?::.*)?$|^[A-Za-z_][\w.]*: .+
//
// by hand: the regexp's backtracking was a third of a large log's failure scan.
func exceptionLine(l string) bool {
	if l == "" || !nameStart(l[0]) {
		return false
	}
	p := 1
	for p < len(l) && (nameStart(l[p]) || l[p] == '.' || '0' <= l[p] && l[p] <= '9') {
		p++
	}
	// The name is l[:p]; what may follow it is nothing, or a colon and a line.
	rest := l[p:]
	if rest != "" && (rest[0] != ':' || strings.IndexByte(rest, '\n') >= 0) {
		// Only ": " and one character of a message matches: the second form.
		return strings.HasPrefix(rest, ": ") && len(rest) > 2 && rest[2] != '\n'
	}
	for _, s := range exceptionSuffixes {
		if len(l[:p]) > len(s) && strings.HasSuffix(l[:p], s) {
			return true
		}
	}
	return strings.HasPrefix(rest, ": ") && len(rest) > 2 && rest[2] != '\n'
}

func nameStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
}
