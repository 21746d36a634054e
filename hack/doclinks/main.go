// Command doclinks checks the links between the repository's Markdown files (make verify).
//
// It reads every Markdown file git knows of (tracked, or untracked and not ignored: `git
// ls-files --cached --others --exclude-standard '*.md'`; outside a git work tree it walks the
// directory, skipping .git, bin, node_modules and testdata) and fails, listing each one, on
//
//   - a dead relative link: [text](path) or [ref]: path whose file or directory does not
//     exist, and
//   - a dead anchor: [text](file.md#anchor) or [text](#anchor) where the target has no heading
//     with that anchor. Anchors are made from headings as GitHub makes them: lowercase, each
//     space a '-', every other character that is not a letter, digit, '-' or '_' dropped; a
//     repeated heading gets -1, -2, ... in order. An HTML id="..." or name="..." counts too.
//
// Links with a scheme (http:, https:, mailto:, ...), links that leave the repository (such as
// ../shared/, which is not part of it) and anchors into files that are not Markdown (a #L10
// of a Go file) are not checked. Links inside fenced code blocks and code spans are not
// links and are ignored.
//
// Usage: go run ./hack/doclinks [-C dir]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

func main() {
	dir := flag.String("C", ".", "the repository's root `directory`")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: doclinks [-C dir]")
		os.Exit(2)
	}
	files, err := markdownFiles(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks:", err)
		os.Exit(2)
	}
	c := newChecker(*dir)
	problems, err := c.check(files)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "doclinks: %d dead links in %d Markdown files (%d links checked)\n", len(problems), len(files), c.checked)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "doclinks: %d Markdown files, %d links, none dead\n", len(files), c.checked)
}

// markdownFiles lists the Markdown files under root, relative to it with '/' separators,
// sorted: those git knows of, or, outside a git work tree, those a walk finds.
func markdownFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if isWorkTree(root) {
			return nil, fmt.Errorf("git ls-files: %v: %s", err, strings.TrimSpace(stderr.String()))
		}
		return walkMarkdown(root)
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		// A tracked file deleted in the work tree is no longer a page.
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(f))); err != nil {
			continue
		}
		files = append(files, f)
	}
	sort.Strings(files)
	return files, nil
}

func isWorkTree(root string) bool {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--is-inside-work-tree").Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// skipDirs are the directories a walk does not enter.
var skipDirs = map[string]bool{".git": true, "bin": true, "node_modules": true, "testdata": true}

func walkMarkdown(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// link is a link target as written, and the line it is on (1-based).
type link struct {
	line   int
	target string
}

// doc is what the checker needs of a Markdown file.
type doc struct {
	anchors map[string]bool
	links   []link
}

type checker struct {
	root    string
	docs    map[string]*doc // by cleaned absolute path
	checked int
}

func newChecker(root string) *checker {
	return &checker{root: root, docs: map[string]*doc{}}
}

// load parses the Markdown file at path (absolute, cleaned) once.
func (c *checker) load(path string) (*doc, error) {
	if d, ok := c.docs[path]; ok {
		return d, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := parse(string(src))
	c.docs[path] = d
	return d, nil
}

// check returns one line per dead link of files (paths relative to the root), in file and
// line order: "file:line: dead link target: why".
func (c *checker) check(files []string) ([]string, error) {
	root, err := filepath.Abs(c.root)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, f := range files {
		from := filepath.Join(root, filepath.FromSlash(f))
		d, err := c.load(from)
		if err != nil {
			return nil, err
		}
		for _, l := range d.links {
			why, checked := c.dead(root, from, l.target)
			if checked {
				c.checked++
			}
			if why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: dead link %s: %s", f, l.line, l.target, why))
			}
		}
	}
	return problems, nil
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// dead says why target, a link of the file from, is dead ("" when it is not), and whether it
// was checked at all.
func (c *checker) dead(root, from, target string) (why string, checked bool) {
	t := strings.TrimSpace(target)
	if strings.HasPrefix(t, "<") && strings.HasSuffix(t, ">") {
		t = t[1 : len(t)-1]
	}
	if t == "" || scheme.MatchString(t) || strings.HasPrefix(t, "//") {
		return "", false
	}
	p, frag, _ := strings.Cut(t, "#")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	p, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("bad escape in path: %v", err), true
	}
	file := from
	switch {
	case p == "":
	case strings.HasPrefix(p, "/"):
		file = filepath.Join(root, filepath.FromSlash(p))
	default:
		file = filepath.Join(filepath.Dir(from), filepath.FromSlash(p))
	}
	if rel, err := filepath.Rel(root, file); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false // outside the repository
	}
	fi, err := os.Stat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "no such file or directory", true
	} else if err != nil {
		return err.Error(), true
	}
	if frag == "" || fi.IsDir() || !isMarkdown(file) {
		return "", true
	}
	anchor, err := url.PathUnescape(frag)
	if err != nil {
		return fmt.Sprintf("bad escape in anchor: %v", err), true
	}
	d, err := c.load(file)
	if err != nil {
		return err.Error(), true
	}
	if !d.anchors[anchor] {
		name := "this file"
		if file != from {
			name = filepath.ToSlash(mustRel(root, file))
		}
		return fmt.Sprintf("no heading with anchor #%s in %s", anchor, name), true
	}
	return "", true
}

func mustRel(root, p string) string {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return rel
}

func isMarkdown(p string) bool {
	ext := strings.ToLower(filepath.Ext(p))
	return ext == ".md" || ext == ".markdown"
}

var (
	atxHeading  = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine  = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	htmlID      = regexp.MustCompile(`<[A-Za-z][^>]*?\s(?:id|name)\s*=\s*"([^"]*)"`)
	refDef      = regexp.MustCompile(`^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)`)
	notParagrph = regexp.MustCompile(`^(?: {4,}|\t| {0,3}(?:[-*+>|]|\d+[.)])(?:\s|$))`)
)

// parse finds the anchors and the links of a Markdown document.
func parse(src string) *doc {
	d := &doc{anchors: map[string]bool{}}
	counts := map[string]int{}
	addHeading := func(text string) {
		base := slug(text)
		s := base
		if n := counts[base]; n > 0 {
			s = fmt.Sprintf("%s-%d", base, n)
		}
		counts[base]++
		d.anchors[s] = true
	}
	var fence string // the open fence's marker ("```", "~~~~", ...), or ""
	prev := ""       // the previous line, when it may be a paragraph a setext underline makes a heading
	for i, line := range strings.Split(src, "\n") {
		line = strings.TrimSuffix(line, "\r")
		trimmed := strings.TrimLeft(line, " \t")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if m := fenceOpen(trimmed); m != "" {
			fence, prev = m, ""
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
			prev = ""
		} else if prev != "" && setextLine.MatchString(line) {
			addHeading(strings.TrimSpace(prev))
			prev = ""
			continue
		} else if strings.TrimSpace(line) == "" || notParagrph.MatchString(line) {
			prev = ""
		} else {
			prev = line
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			d.links = append(d.links, link{line: i + 1, target: m[2]})
			continue
		}
		for _, t := range inlineTargets(stripCodeSpans(line)) {
			d.links = append(d.links, link{line: i + 1, target: t})
		}
	}
	return d
}

// fenceOpen returns the fence marker a line (without its indentation) opens, or "".
func fenceOpen(trimmed string) string {
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(trimmed) && trimmed[n] == c {
			n++
		}
		if n >= 3 {
			if c == '`' && strings.Contains(trimmed[n:], "`") {
				return "" // an info string with a backtick: not a fence
			}
			return trimmed[:n]
		}
	}
	return ""
}

// stripCodeSpans replaces every code span of a line with spaces: a run of backticks, the
// text after it and the next run of as many backticks.
func stripCodeSpans(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		open := strings.Repeat("`", n)
		end := -1
		for j := i + n; j < len(b); {
			k := strings.Index(string(b[j:]), open)
			if k < 0 {
				break
			}
			k += j
			m := 0
			for k+m < len(b) && b[k+m] == '`' {
				m++
			}
			if m == n {
				end = k
				break
			}
			j = k + m
		}
		if end < 0 {
			i += n // an unmatched run is literal backticks
			continue
		}
		for j := i; j < end+n; j++ {
			b[j] = ' '
		}
		i = end + n
	}
	return string(b)
}

// inlineTargets returns the destinations of the inline links and images of a line:
// the x of [text](x) and [text](x "title").
func inlineTargets(line string) []string {
	var out []string
	for i := 0; ; {
		k := strings.Index(line[i:], "](")
		if k < 0 {
			return out
		}
		start := i + k + 2
		if t, ok := destination(line[start:]); ok {
			out = append(out, t)
		}
		i = start
	}
}

// destination reads a link destination at the start of s (after "](").
func destination(s string) (string, bool) {
	s = strings.TrimLeft(s, " \t")
	if strings.HasPrefix(s, "<") {
		end := strings.IndexByte(s, '>')
		if end < 0 {
			return "", false
		}
		return s[:end+1], true
	}
	depth := 0
	for j := 0; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\\' && j+1 < len(s):
			j++
		case c == '(':
			depth++
		case c == ')':
			if depth == 0 {
				return s[:j], true
			}
			depth--
		case c == ' ' || c == '\t':
			if depth == 0 {
				return s[:j], true // a title follows
			}
		}
	}
	return "", false
}

var (
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// slug is the anchor GitHub gives a heading's text.
func slug(heading string) string {
	text := inlineLink.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
