// Package shellscan reads the shell commands an agent runs, without running or fully
// parsing them: their command lines, simple commands and words, the files sed and inline
// Python write. It errs towards reading less: a command it cannot follow names no file.
package shellscan

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// Line is one command line of a shell script and the heredoc body it reads.
type Line struct{ Text, Body string }

// Lines are the first max command lines of a shell script: comments and blank lines
// skipped, lines continued by a backslash or an open quote joined, heredoc bodies (data,
// not commands) attached to the line that reads them.
func Lines(cmd string, max int) []Line {
	lines := strings.Split(textcut.Head(cmd, maxScriptBytes), "\n")
	var out []Line
	for i := 0; i < len(lines) && len(out) < max; i++ {
		text := strings.TrimSpace(lines[i])
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		for (strings.HasSuffix(text, "\\") || openQuote(text)) && i+1 < len(lines) {
			i++
			if cont, ok := strings.CutSuffix(text, "\\"); ok {
				text = cont + " " + strings.TrimSpace(lines[i])
			} else {
				text += "\n" + lines[i] // inside quotes: an inline script keeps its lines
			}
		}
		l := Line{Text: text}
		if tag, ok := heredocTag(text); ok {
			j := i + 1
			for j < len(lines) && strings.TrimSpace(lines[j]) != tag {
				j++
			}
			l.Body = strings.Join(lines[i+1:min(j, len(lines))], "\n")
			i = j
		}
		out = append(out, l)
	}
	return out
}

var heredocRE = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

func heredocTag(line string) (string, bool) {
	if !strings.Contains(line, "<<") {
		return "", false // the cheap test first: most lines have no heredoc
	}
	m := heredocRE.FindStringSubmatch(line)
	if m == nil || strings.Contains(line, "<<<") {
		return "", false
	}
	return m[1], true
}

// maxScriptBytes is how much of a script is read: a command's arguments are read as far.
const maxScriptBytes = 4 << 10

// pyWrites finds files an inline Python script opens for writing.
var pyWrites = regexp.MustCompile(`(?:open\(\s*[rbf]?['"]([^'"\n]{1,200})['"]\s*,\s*['"](?:w|a|r\+|wb|ab|w\+)['"]|Path\(\s*['"]([^'"\n]{1,200})['"]\s*\)\.write_(?:text|bytes))`)

// StripCommandPrefix skips assignments and wrappers in front of the command.
func StripCommandPrefix(words []string) []string {
	for len(words) > 0 && (strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") || words[0] == "sudo" || words[0] == "time" || words[0] == "env") {
		words = words[1:]
	}
	return words
}

// SedFiles reports whether a sed command edits in place, and the files it names.
func SedFiles(args []string) (inPlace bool, files []string) {
	sawScript := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-i" || a == "--in-place" || strings.HasPrefix(a, "-i") && !strings.HasPrefix(a, "-i-"):
			inPlace = true
		case a == "-e" || a == "-f" || a == "--expression" || a == "--file":
			sawScript = true // the script is this option's value: every operand is a file
			i++
		case strings.HasPrefix(a, "-"):
		case !sawScript:
			sawScript = true
		default:
			files = append(files, a)
		}
	}
	return inPlace, files
}

func NonOptions(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+") {
			out = append(out, a)
		}
	}
	return out
}

// LooksLikePath accepts a word that names a file: a dot or slash in it, no glob, no
// variable, no URL.
func LooksLikePath(w string) bool {
	if len(w) < 2 || len(w) > 200 || strings.ContainsAny(w, "*?$`(){}[]<>|;&'\" \t\n,") || strings.Contains(w, "://") {
		return false
	}
	if _, err := strconv.ParseFloat(w, 64); err == nil {
		return false
	}
	return strings.ContainsAny(w, "./") && w != ".." && strings.Trim(w, "./") != ""
}

func Unquote(w string) string {
	return strings.Trim(w, `"'`)
}

// SplitSimple splits a command line into its simple commands at &&, ||, ;, | and &,
// outside quotes.
func SplitSimple(line string) []string {
	var out []string
	start := 0
	scanQuotes(line, func(i int) int {
		c := line[i]
		if c != ';' && c != '|' && c != '&' {
			return 0
		}
		if c == '&' && (i > 0 && line[i-1] == '>' || i+1 < len(line) && line[i+1] == '>') {
			return 0 // a redirection: 2>&1, &>
		}
		out = append(out, line[start:i])
		skip := 0
		if i+1 < len(line) && line[i+1] == c {
			skip = 1 // &&, ||, ;;
		}
		start = i + 1 + skip
		return skip
	})
	return append(out, line[start:])
}

// openQuote reports whether a shell line ends inside a quoted string.
func openQuote(line string) bool {
	return scanQuotes(line, nil) != 0
}

// scanQuotes walks a shell line as the shell quotes it: inside single quotes nothing is
// special, inside double quotes a backslash escapes the next byte, outside quotes too. It
// calls unquoted (when not nil) with the index of every other byte outside quotes, which
// returns how many bytes after it to skip, and returns the quote left open at the end, or 0.
func scanQuotes(line string, unquoted func(i int) int) byte {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '"' {
				i++
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '\\':
			i++
		case unquoted != nil:
			i += unquoted(i)
		}
	}
	return quote
}

// Words splits a simple command into words, removing quotes (no expansion).
func Words(s string) []string {
	var out []string
	var b strings.Builder
	var quote byte
	word := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				b.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, word = c, true
		case c == ' ' || c == '\t':
			if word {
				out = append(out, b.String())
				b.Reset()
				word = false
			}
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
			word = true
		default:
			b.WriteByte(c)
			word = true
		}
	}
	if word {
		out = append(out, b.String())
	}
	return out
}

// CommandLines are the first max command lines of a shell script, each on one line and
// without its "cd DIR &&".
func CommandLines(cmd string, max int) []string {
	lines := Lines(cmd, max)
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		text := textcut.OneLine(l.Text)
		for {
			rest, ok := strings.CutPrefix(text, "cd ")
			if !ok {
				break
			}
			_, after, found := strings.Cut(rest, "&&")
			if !found {
				break
			}
			text = strings.TrimSpace(after)
		}
		out = append(out, text)
	}
	return out
}

func FirstWord(s string) string {
	if w := strings.Fields(textcut.Head(s, 64)); len(w) > 0 && len(w[0]) <= 20 {
		return w[0]
	}
	return ""
}

// PythonWrites are the files (up to 20) Python code opens for writing.
func PythonWrites(code string) []string {
	ms := pyWrites.FindAllStringSubmatch(textcut.Head(code, maxScriptBytes), 20)
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m[1]+m[2])
	}
	return out
}
