package synth

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// This file renders tool output: pytest logs, tracebacks, grep hits, file listings, git
// and pip output. Every renderer takes a target size and stops adding lines once it is
// reached; a renderer never writes less than its natural output.

// banner centers text in an 80-column rule, as pytest does.
func banner(text string, ch byte) string {
	text = " " + text + " "
	if len(text) >= 78 {
		return string(ch) + text + string(ch)
	}
	left := (80 - len(text)) / 2
	right := 80 - len(text) - left
	return strings.Repeat(string(ch), left) + text + strings.Repeat(string(ch), right)
}

// failingTest is a test that fails in a run, with how it fails.
type failingTest struct {
	b *bugSite
	f *failure
}

// testNames returns n deterministic test names for a test module.
func (g *gen) testNames(m *module, n int) []string {
	r := rand.New(rand.NewPCG(m.seed, 0x7a3e))
	names := make([]string, 0, n)
	seen := map[string]bool{}
	for len(names) < n {
		name := "test_" + pickR(r, verbs) + "_" + pickR(r, g.dom.nouns) + "_" + pickR(r, testCases)
		if seen[name] {
			name += "_" + strconv.Itoa(len(names))
		}
		seen[name] = true
		names = append(names, name)
	}
	return names
}

// pytestLog renders a pytest run over files. fails lists the tests that fail (they must
// belong to files). It returns the output and the exit code.
func (g *gen) pytestLog(files []*module, fails []failingTest, verbose bool, target int) (string, int) {
	total := 0
	for _, f := range files {
		total += f.nTests
	}
	param := 1
	if verbose && total > 0 {
		param = max(1, target/(78*total)+1)
	}
	if param > 1 {
		total = total*param - len(fails)*(param-1) // failing tests are not parametrized
	}
	var b strings.Builder
	b.WriteString(banner("test session starts", '=') + "\n")
	fmt.Fprintf(&b, "platform linux -- Python %s, pytest-8.2.1, pluggy-1.5.0", g.pyVer)
	if verbose {
		fmt.Fprintf(&b, " -- %s/.venv/bin/python\ncachedir: .pytest_cache", g.root)
	}
	fmt.Fprintf(&b, "\nrootdir: %s\nconfigfile: pyproject.toml\nplugins: cov-5.0.0, xdist-3.6.1\ncollected %d items\n\n", g.root, total)

	failIn := map[*module][]failingTest{}
	for _, ft := range fails {
		failIn[ft.b.testMod] = append(failIn[ft.b.testMod], ft)
	}
	done := 0
	for _, f := range files {
		names := g.testNames(f, f.nTests)
		// the failing tests take fixed positions in the module's order
		failAt := map[int]string{}
		for i, ft := range failIn[f] {
			pos := (lineOf(g.source(f), "def "+ft.b.test+"(") + i) % f.nTests
			failAt[pos] = ft.b.test
			names[pos] = ft.b.test
		}
		if verbose {
			for i, name := range names {
				_, bad := failAt[i]
				for p := 0; p < param && (p == 0 || !bad); p++ {
					done++
					status := "PASSED"
					if bad {
						status = "FAILED"
					}
					id := f.path + "::" + name
					if param > 1 && !bad {
						id += "[" + pickParam(p) + "]"
					}
					line := id + " " + status
					fmt.Fprintf(&b, "%-73s [%3d%%]\n", line, done*100/max(1, total))
				}
			}
			continue
		}
		dots := make([]byte, 0, len(names))
		for i := range names {
			if _, bad := failAt[i]; bad {
				dots = append(dots, 'F')
			} else {
				dots = append(dots, '.')
			}
		}
		for start := 0; start < len(dots); start += 56 {
			end := min(len(dots), start+56)
			done += end - start
			prefix := f.path + " "
			if start > 0 {
				prefix = ""
			}
			fmt.Fprintf(&b, "%-73s [%3d%%]\n", prefix+string(dots[start:end]), done*100/max(1, total))
		}
	}
	if len(fails) > 0 {
		b.WriteString("\n" + banner("FAILURES", '=') + "\n")
		for _, ft := range fails {
			b.WriteString(g.failureBlock(ft))
		}
	}
	// warnings fill the log up to its target, as real suites accumulate them
	if b.Len() < target-400 {
		b.WriteString(banner("warnings summary", '=') + "\n")
		r := rand.New(rand.NewPCG(uint64(target), 0x3a7))
		for i := 0; b.Len() < target-300 && i < 400; i++ {
			m := g.sources[r.IntN(len(g.sources))]
			ln := r.IntN(300) + 10
			w := pickR(r, []string{
				"DeprecationWarning: datetime.datetime.utcnow() is deprecated and scheduled for removal in a future version. Use timezone-aware objects to represent datetimes in UTC: datetime.datetime.now(datetime.UTC).",
				"PendingDeprecationWarning: the load_module() method is deprecated and slated for removal in Python 3.12; use exec_module() instead",
				"ResourceWarning: unclosed file <_io.TextIOWrapper name='fixtures/sample.json' mode='r' encoding='UTF-8'>",
				"UserWarning: " + pickR(r, g.dom.nouns) + " without " + pickR(r, g.dom.attrs) + " is deprecated and will be rejected in 3.0",
				"FutureWarning: the 'strict' argument will default to True in the next major release",
			})
			fmt.Fprintf(&b, "%s::%s\n  %s/%s:%d: %s\n    %s\n\n", g.testFor(m).path, g.testNames(g.testFor(m), 3)[r.IntN(3)], g.root, m.path, ln, w, "warnings.warn(msg, stacklevel=2)")
		}
		b.WriteString("-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html\n")
	}
	secs := float64(total)*0.011 + 0.2
	if len(fails) > 0 {
		b.WriteString(banner("short test summary info", '=') + "\n")
		for _, ft := range fails {
			msg := ft.f.msg
			if ft.f.exc != excAssertion {
				msg = ft.f.exc + ": " + ft.f.msg
			}
			fmt.Fprintf(&b, "FAILED %s::%s - %s\n", ft.b.testMod.path, ft.b.test, ft.b.s(msg))
		}
		b.WriteString(banner(fmt.Sprintf("%d failed, %d passed in %.2fs", len(fails), total-len(fails), secs), '=') + "\n")
		return b.String(), 1
	}
	b.WriteString(banner(fmt.Sprintf("%d passed in %.2fs", total, secs), '=') + "\n")
	return b.String(), 0
}

func pickParam(p int) string {
	kinds := []string{"empty", "single", "many", "unicode", "none", "negative", "large", "nested"}
	return kinds[p%len(kinds)] + "-" + strconv.Itoa(p)
}

// failureBlock renders one test failure the way pytest prints it.
func (g *gen) failureBlock(ft failingTest) string {
	b, f := ft.b, ft.f
	var s strings.Builder
	s.WriteString(banner(b.test, '_') + "\n\n")
	lines := strings.Split(b.s(strings.Join(b.tpl.testLines, "\n")), "\n")
	for i, l := range lines {
		text := "    " + l
		if i == len(lines)-1 {
			text = ">" + text[1:]
		}
		s.WriteString(text + "\n")
	}
	testLine := lineOf(g.source(b.testMod), "def "+b.test+"(") + len(lines) - 1
	if !f.inSource {
		for _, e := range f.elines {
			s.WriteString("E       " + b.s(e) + "\n")
		}
		fmt.Fprintf(&s, "\n%s:%d: %s\n", b.testMod.path, testLine, f.exc)
		return s.String()
	}
	fmt.Fprintf(&s, "\n%s:%d: \n%s\n\n", b.testMod.path, testLine, strings.TrimSpace(strings.Repeat("_ ", 40)))
	src := g.source(b.mod)
	from := lineOf(src, "def "+b.fn+"(")
	to := g.raiseLine(b, f)
	srcLines := strings.Split(src, "\n")
	for i := from; i <= to && i-1 < len(srcLines); i++ {
		text := "    " + srcLines[i-1]
		if i == to {
			text = ">" + text[1:]
		}
		s.WriteString(text + "\n")
	}
	for _, e := range f.elines {
		s.WriteString("E       " + b.s(e) + "\n")
	}
	fmt.Fprintf(&s, "\n%s:%d: %s\n", b.mod.path, to, f.exc)
	return s.String()
}

// traceback renders the Python traceback of running the reproduction script.
func (g *gen) traceback(b *bugSite, scriptLines []string) string {
	f := b.currentFailure()
	at := g.raiseLine(b, f)
	text := strings.Split(g.source(b.mod), "\n")[at-1]
	last := strings.TrimSpace(scriptLines[len(scriptLines)-1])
	return fmt.Sprintf("Traceback (most recent call last):\n  File \"%s/reproduce_issue.py\", line %d, in <module>\n    %s\n  File \"%s\", line %d, in %s\n    %s\n%s: %s\n",
		g.root, len(scriptLines), last, g.abs(b.mod), at, b.fn, strings.TrimSpace(text), f.exc, b.s(f.msg))
}

// raiseLine is the 1-based line of the bug's module where failure f is raised: f.at or
// the bug's current line, searched from the function's def line on.
func (g *gen) raiseLine(b *bugSite, f *failure) int {
	src := g.source(b.mod)
	def := strings.Index(src, "def "+b.fn+"(")
	if def < 0 {
		def = 0
	}
	needle := strings.Split(b.line(b.state), "\n")[0]
	if f != nil && f.at != "" {
		needle = b.s(f.at)
	}
	if strings.HasPrefix(needle, "def ") {
		return lineOf(src, needle)
	}
	i := strings.Index(src[def:], needle)
	if i < 0 {
		return lineOf(src, needle)
	}
	return strings.Count(src[:def+i], "\n") + 1
}

// repoFiles lists the repository's files, as find would print them.
func (g *gen) repoFiles() []string {
	files := make([]string, 0, 10+2*len(g.sources))
	files = append(files, "./README.md", "./CHANGELOG.md", "./pyproject.toml", "./setup.cfg", "./tox.ini", "./.gitignore", "./src/"+g.dom.pkg+"/__init__.py", "./src/"+g.dom.pkg+"/testing.py", "./tests/__init__.py", "./tests/conftest.py")
	for i := range g.sources {
		files = append(files, "./"+g.sources[i].path, "./"+g.tests[i].path)
	}
	return files
}

// listing renders `find` output: the repository, then (when it must be long) docs,
// fixtures, caches, .git objects and .venv, which is what an unfiltered find prints.
func (g *gen) listing(target int, all bool) string {
	var b strings.Builder
	for _, f := range g.repoFiles() {
		b.WriteString(f + "\n")
	}
	r := rand.New(rand.NewPCG(uint64(target)+7, 0x1157))
	for i := 0; b.Len() < target; i++ {
		var p string
		switch k := r.IntN(10); {
		case !all || k < 2:
			p = fmt.Sprintf("./docs/%s/%s.rst", pickR(r, []string{"api", "guide", "howto", "reference"}), pickR(r, g.dom.nouns))
			if r.IntN(2) == 0 {
				p = fmt.Sprintf("./tests/fixtures/%s_%d.json", pickR(r, g.dom.nouns), i)
			}
		case k < 4:
			p = fmt.Sprintf("./src/%s/__pycache__/%s.cpython-311.pyc", g.dom.pkg, pickR(r, g.dom.modules))
		case k < 6:
			p = fmt.Sprintf("./.git/objects/%s/%s", g.hexR(r, 2), g.hexR(r, 38))
		default:
			dep := pickR(r, g.dom.deps)
			p = fmt.Sprintf("./.venv/lib/python3.11/site-packages/%s/%s.py", strings.ReplaceAll(dep, "-", "_"), pickR(r, []string{"__init__", "core", "utils", "compat", "exceptions", "_version", "api", "models", "parser", "helpers"}))
		}
		b.WriteString(p + "\n")
	}
	return b.String()
}

func (g *gen) hexR(r *rand.Rand, n int) string {
	const h = "0123456789abcdef"
	out := make([]byte, n)
	for i := range out {
		out[i] = h[r.IntN(16)]
	}
	return string(out)
}

// grepHits renders `grep -rn pattern` over the repository; with venv it also walks .venv,
// which is how an agent gets a 40 KB grep result.
func (g *gen) grepHits(pattern string, target int, venv bool, mods []*module) string {
	var b strings.Builder
	for _, m := range mods {
		src := g.source(m)
		for i, l := range strings.Split(src, "\n") {
			if strings.Contains(l, pattern) {
				fmt.Fprintf(&b, "%s:%d:%s\n", m.path, i+1, l)
			}
		}
	}
	r := rand.New(rand.NewPCG(uint64(len(pattern)+target), 0x6e9))
	for i := 0; b.Len() < target && i < 5000; i++ {
		if venv {
			dep := strings.ReplaceAll(pickR(r, g.dom.deps), "-", "_")
			fmt.Fprintf(&b, ".venv/lib/python3.11/site-packages/%s/%s.py:%d:    %s\n", dep, pickR(r, []string{"core", "utils", "compat", "api", "models"}), r.IntN(2000)+1,
				pickR(r, []string{
					"# " + pattern + " handling mirrors the upstream implementation",
					"def _" + pattern + "_impl(self, *args, **kwargs):",
					"return self._" + pattern + "(value, strict=strict)",
					"raise TypeError(f\"" + pattern + " expected str, got {type(value).__name__}\")",
					"warnings.warn(\"" + pattern + " is deprecated\", DeprecationWarning, stacklevel=2)",
				}))
			continue
		}
		m := g.sources[r.IntN(len(g.sources))]
		fmt.Fprintf(&b, "%s:%d:%s\n", m.path, r.IntN(400)+20, pickR(r, []string{
			"        result = " + pattern + "(items, minimum=threshold)",
			"    logger.debug(\"calling " + pattern + " for %s\", key)",
			"    return " + pattern + "(record)",
			"    # TODO: " + pattern + " should accept an iterator",
			"            values.extend(" + pattern + "(batch))",
		}))
		if r.IntN(6) == 0 {
			fmt.Fprintf(&b, "docs/api/%s.rst:%d:.. autofunction:: %s.%s.%s\n", m.name, r.IntN(80)+1, g.dom.pkg, m.name, pattern)
		}
	}
	return b.String()
}

// gitLog renders `git log --oneline` (n lines) or, for stat, `git log --stat` up to target.
func (g *gen) gitLog(n int, stat bool, target int) string {
	r := rand.New(rand.NewPCG(uint64(n+target), 0x9177))
	subjects := []string{"Fix %s handling in %s", "Add tests for %s in %s", "Refactor %s parsing (%s)", "Bump %s in %s", "Document %s behaviour of %s", "Speed up %s lookups in %s", "Merge pull request #%d from %s"}
	authors := []string{"Dana Whitfield <dana@example.org>", "Ravi Menon <ravi.menon@example.com>", "Lotte Jansen <lotte@example.net>", "Kenji Sato <ksato@example.org>", "Amara Okafor <amara@example.com>"}
	var b strings.Builder
	for i := 0; (stat && b.Len() < target) || (!stat && i < n); i++ {
		subj := pickR(r, subjects)
		var line string
		if strings.Contains(subj, "%d") {
			line = fmt.Sprintf(subj, r.IntN(900)+100, pickR(r, authors[:3])[:4]+"/"+pickR(r, g.dom.nouns))
		} else {
			line = fmt.Sprintf(subj, pickR(r, g.dom.nouns), pickR(r, g.dom.modules))
		}
		if !stat {
			fmt.Fprintf(&b, "%s %s\n", g.hexR(r, 7), line)
			continue
		}
		fmt.Fprintf(&b, "commit %s\nAuthor: %s\nDate:   %s %s %d %02d:%02d:%02d 2024 +0000\n\n    %s\n\n", g.hexR(r, 40), pickR(r, authors),
			pickR(r, []string{"Mon", "Tue", "Wed", "Thu", "Fri"}), pickR(r, []string{"Jan", "Feb", "Mar", "Apr", "May", "Jun"}), r.IntN(28)+1, r.IntN(24), r.IntN(60), r.IntN(60), line)
		nf := r.IntN(3) + 1
		ins, del := 0, 0
		for j := 0; j < nf; j++ {
			a, d := r.IntN(40), r.IntN(20)
			ins, del = ins+a, del+d
			fmt.Fprintf(&b, " %-40s | %3d %s%s\n", g.sources[r.IntN(len(g.sources))].path, a+d, strings.Repeat("+", min(a, 30)), strings.Repeat("-", min(d, 20)))
		}
		fmt.Fprintf(&b, " %d files changed, %d insertions(+), %d deletions(-)\n\n", nf, ins, del)
	}
	return b.String()
}

// diff renders `git diff` of every edit made so far.
func (g *gen) diff() string {
	var b strings.Builder
	for _, m := range append(append([]*module{}, g.sources...), g.tests...) {
		var hunks []string
		for _, bug := range g.bugs {
			if m == bug.mod && bug.edits > 0 && !bug.committed {
				hunks = append(hunks, g.hunk(m, bug.line(0), bug.line(bug.state)))
			}
		}
		for _, bug := range g.bugs {
			if m == bug.testMod && bug.addedTest != "" && !bug.committed {
				at := lineOf(g.source(m), "def "+bug.test+"_repeated_calls(") - 2
				n := strings.Count(bug.addedTest, "\n") + 1
				hunks = append(hunks, fmt.Sprintf("@@ -%d,0 +%d,%d @@\n+%s\n", at, at+1, n, strings.ReplaceAll(bug.addedTest, "\n", "\n+")))
			}
		}
		if len(hunks) == 0 {
			continue
		}
		fmt.Fprintf(&b, "diff --git a/%s b/%s\nindex %s..%s 100644\n--- a/%s\n+++ b/%s\n%s", m.path, m.path, g.hex(7), g.hex(7), m.path, m.path, strings.Join(hunks, ""))
	}
	return b.String()
}

func (g *gen) hunk(m *module, oldText, newText string) string {
	src := g.source(m)
	lines := strings.Split(src, "\n")
	first := strings.Split(newText, "\n")[0]
	at := lineOf(src, first)
	from := max(1, at-3)
	oldN := strings.Count(oldText, "\n") + 1
	newN := strings.Count(newText, "\n") + 1
	var b strings.Builder
	fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@\n", from, (at-from)+oldN+3, from, (at-from)+newN+3)
	for i := from; i < at; i++ {
		b.WriteString(" " + lines[i-1] + "\n")
	}
	for _, l := range strings.Split(oldText, "\n") {
		b.WriteString("-" + l + "\n")
	}
	for _, l := range strings.Split(newText, "\n") {
		b.WriteString("+" + l + "\n")
	}
	for i := at + newN; i < at+newN+3 && i <= len(lines); i++ {
		b.WriteString(" " + lines[i-1] + "\n")
	}
	return b.String()
}

// pipLog renders `pip install -e .[test]` up to target.
func (g *gen) pipLog(target int) string {
	r := rand.New(rand.NewPCG(uint64(target), 0x919))
	var b strings.Builder
	fmt.Fprintf(&b, "Obtaining file://%s\n  Installing build dependencies ... done\n  Checking if build backend supports build_editable ... done\n  Getting requirements to build editable ... done\n  Preparing editable metadata (pyproject.toml) ... done\n", g.root)
	extra := []string{"pytest", "pytest-cov", "pytest-xdist", "coverage", "iniconfig", "pluggy", "packaging", "tomli", "execnet", "typing-extensions", "six", "idna", "certifi", "charset-normalizer", "mypy", "mypy-extensions", "ruff", "pathspec", "platformdirs", "filelock"}
	pkgs := append(append([]string{}, g.dom.deps...), extra...)
	for i := 0; i < len(pkgs) || b.Len() < target; i++ {
		p := pkgs[i%len(pkgs)]
		v := fmt.Sprintf("%d.%d.%d", r.IntN(8)+1, r.IntN(30), r.IntN(12))
		if i >= len(pkgs) || r.IntN(3) == 0 {
			fmt.Fprintf(&b, "Requirement already satisfied: %s>=%s in ./.venv/lib/python3.11/site-packages (from %s==0.1.dev0) (%s)\n", p, v, g.dom.pkg, v)
			continue
		}
		fmt.Fprintf(&b, "Collecting %s>=%s (from %s==0.1.dev0)\n  Downloading %s-%s-py3-none-any.whl.metadata (%d kB)\n  Downloading %s-%s-py3-none-any.whl (%d kB)\n     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ %d.%d/%d.%d kB %d.%d MB/s eta 0:00:00\n",
			p, v, g.dom.pkg, strings.ReplaceAll(p, "-", "_"), v, r.IntN(40)+2, strings.ReplaceAll(p, "-", "_"), v, r.IntN(900)+20, r.IntN(900), r.IntN(10), r.IntN(900), r.IntN(10), r.IntN(20), r.IntN(10))
	}
	fmt.Fprintf(&b, "Building wheels for collected packages: %s\n  Building editable for %s (pyproject.toml) ... done\nSuccessfully built %s\nInstalling collected packages: %s\nSuccessfully installed %s-0.1.dev0\n", g.dom.pkg, g.dom.pkg, g.dom.pkg, strings.Join(g.dom.deps, ", "), g.dom.pkg)
	return b.String()
}

// lintLog renders ruff output: clean, or (all) findings over .venv until target.
func (g *gen) lintLog(target int, all bool) (string, int) {
	if !all {
		return "All checks passed!\n", 0
	}
	r := rand.New(rand.NewPCG(uint64(target), 0x1117))
	var b strings.Builder
	n := 0
	for b.Len() < target {
		dep := strings.ReplaceAll(pickR(r, g.dom.deps), "-", "_")
		code := pickR(r, []string{"E501 Line too long (104 > 88)", "F401 [*] `os` imported but unused", "E741 Ambiguous variable name: `l`", "B006 Do not use mutable data structures for argument defaults", "UP008 [*] Use `super()` instead of `super(__class__, self)`", "SIM108 Use ternary operator instead of `if`-`else`-block"})
		fmt.Fprintf(&b, ".venv/lib/python3.11/site-packages/%s/%s.py:%d:%d: %s\n", dep, pickR(r, []string{"core", "utils", "compat", "api"}), r.IntN(3000)+1, r.IntN(80)+1, code)
		n++
	}
	fmt.Fprintf(&b, "Found %d errors.\n[*] %d fixable with the `--fix` option.\n", n, n/3)
	return b.String(), 1
}

// readme renders README.md up to target.
func (g *gen) readme(target int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s is %s.\n\n## Installation\n\n```\npip install %s\n```\n\n## Development\n\n```\npython -m venv .venv && . .venv/bin/activate\npip install -e '.[test]'\npython -m pytest\n```\n\n## Modules\n\n", g.dom.repo, g.dom.repo, g.dom.about, g.dom.pkg)
	for _, m := range g.sources {
		fmt.Fprintf(&b, "- `%s.%s`: %s utilities\n", g.dom.pkg, m.name, m.name)
	}
	r := rand.New(rand.NewPCG(uint64(target), 0x4ead))
	if b.Len() < target {
		b.WriteString("\n## Changelog highlights\n\n")
	}
	for i := 0; b.Len() < target; i++ {
		fmt.Fprintf(&b, "- %d.%d.%d: %s `%s` %s.\n", 2-i/40, 9-(i/4)%10, i%4, pickR(r, []string{"Fixed", "Added", "Changed", "Deprecated"}), pickR(r, verbs)+"_"+pickR(r, g.dom.nouns), pickR(r, []string{"for empty input", "when the config has no defaults", "with timezone-aware values", "on Windows", "for large files", "in strict mode"}))
	}
	return b.String()
}
