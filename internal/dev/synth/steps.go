package synth

import (
	"fmt"
	"strings"
)

// This file holds the agent's steps: each emits one assistant turn and its tool results.
// A call builder gets the slot its result fills; in a big slot it produces 5-50 KB of the
// same kind of output (a whole module, a verbose run, an unfiltered find or grep, ...).

// ---- call builders ----

// cap bounds the size of an ordinary (not big) result of one kind: base, or more when the
// requested average is large.
func (g *gen) cap(base int) int { return max(base, 3*g.opts.AvgBytes) }

func (g *gen) callLs(sl slot) call {
	if sl.big {
		return g.callFind(sl)
	}
	var b strings.Builder
	b.WriteString("total 112\n")
	for _, e := range []string{".", "..", ".git", ".github", ".gitignore", ".pre-commit-config.yaml", ".venv", "CHANGELOG.md", "LICENSE", "README.md", "docs", "pyproject.toml", "setup.cfg", "src", "tests", "tox.ini"} {
		mode, size := "-rw-r--r--  1", 300+len(e)*97
		if !strings.Contains(e, ".") || e == "." || e == ".." || e == ".git" || e == ".github" || e == ".venv" {
			mode, size = "drwxr-xr-x  8", 4096
		}
		fmt.Fprintf(&b, "%s root root %5d Mar 12 09:14 %s\n", mode, size, e)
	}
	return g.bash("ls -la", b.String(), 0)
}

func (g *gen) callFind(sl slot) call {
	if sl.big {
		return g.bash("find . -type f", fitBig(g.listing(sl.target, true)), 0)
	}
	return g.bash(`find . -type f -not -path "./.git/*" -not -path "./.venv/*"`, g.listing(min(sl.target, g.cap(5000)), false), 0)
}

func (g *gen) callReadme(sl slot) call {
	if sl.big {
		return g.bash("cat README.md CHANGELOG.md", fitBig(g.readme(sl.target)), 0)
	}
	return g.bash("cat README.md", g.readme(min(sl.target, g.cap(6000))), 0)
}

func (g *gen) callGitLog(sl slot) call {
	if sl.big {
		return g.bash("git --no-pager log --stat -n 300", fitBig(g.gitLog(0, true, sl.target)), 0)
	}
	return g.bash("git --no-pager log --oneline -n 12", g.gitLog(12, false, 0), 0)
}

func (g *gen) callGrep(sl slot, b *bugSite, where string) call {
	if sl.big {
		return g.bash(fmt.Sprintf(`grep -rn "%s" .`, b.noun), fitBig(g.grepHits(b.noun, sl.target, true, append(append([]*module{}, g.sources...), g.tests...))), 0)
	}
	out := g.grepHits(b.fn, min(sl.target, g.cap(8000)), false, []*module{b.mod, b.testMod})
	if where == "tests" {
		var kept []string
		for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if strings.HasPrefix(l, "tests/") {
				kept = append(kept, l)
			}
		}
		out = strings.Join(kept, "\n") + "\n"
		return g.bash(fmt.Sprintf(`grep -rn "%s" tests/`, b.fn), out, 0)
	}
	return g.bash(fmt.Sprintf(`grep -rn "%s" src/ tests/ docs/`, b.fn), out, 0)
}

// callRead shows module m around line focus, sized to the slot. In a big slot it shows a
// whole module: m when it is big enough, else the module closest to the target size.
func (g *gen) callRead(sl slot, m *module, focus int) call {
	if sl.big {
		pick := m
		best := -1
		for _, c := range append(append([]*module{}, g.sources...), g.tests...) {
			d := abs(len(g.source(c)) - sl.target)
			if best < 0 || d < best || (d == best && c == m) {
				pick, best = c, d
			}
		}
		if len(g.source(m)) >= MinBigResultBytes && abs(len(g.source(m))-sl.target) < sl.target/3 {
			pick = m
		}
		c := g.viewWhole(pick)
		if pick != m {
			c.say = fmt.Sprintf("I'll also read all of `%s`, since most callers go through it.", pick.path)
		}
		c.result = fitBig(c.result)
		return c
	}
	src := g.source(m)
	if whole := numbered(src, 1, 0); len(whole) <= sl.target {
		return g.viewWhole(m)
	}
	n := max(6, sl.target/44)
	from := max(1, focus-n/3)
	to := min(lineCount(src), from+n)
	if g.chance(0.3) {
		lines := strings.Split(src, "\n")
		return g.bash(fmt.Sprintf("sed -n '%d,%dp' %s", from, to, m.path), strings.Join(lines[from-1:to], "\n")+"\n", 0)
	}
	return call{name: g.editTool, args: jsonArgs(editorArgs{Command: "view", Path: g.abs(m), ViewRange: []int{from, to}}),
		result: g.wrapEditor(fmt.Sprintf("Here's the result of running `cat -n` on %s:\n%s", g.abs(m), numbered(src, from, to)))}
}

func (g *gen) viewWhole(m *module) call {
	if g.chance(0.4) {
		return g.bash("cat "+m.path, g.source(m), 0)
	}
	return call{name: g.editTool, args: jsonArgs(editorArgs{Command: "view", Path: g.abs(m)}),
		result: g.wrapEditor(fmt.Sprintf("Here's the result of running `cat -n` on %s:\n%s", g.abs(m), numbered(g.source(m), 1, 0)))}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func (g *gen) callRunTests(sl slot, b *bugSite, f *failure) call {
	var fails []failingTest
	if f != nil {
		fails = []failingTest{{b: b, f: f}}
	}
	if sl.big {
		out, code := g.pytestLog([]*module{b.testMod}, fails, true, sl.target)
		return g.bash("python -m pytest "+b.testMod.path+" -v", fitBig(out), code)
	}
	out, code := g.pytestLog([]*module{b.testMod}, fails, false, min(sl.target, g.cap(14000)))
	cmd := "python -m pytest " + b.testMod.path
	if g.chance(0.4) {
		cmd += " -x"
	}
	return g.bash(cmd, out, code)
}

func (g *gen) callFullSuite(sl slot, fails []failingTest) call {
	if sl.big {
		out, code := g.pytestLog(g.tests, fails, true, sl.target)
		return g.bash("python -m pytest -v", fitBig(out), code)
	}
	out, code := g.pytestLog(g.tests, fails, false, min(sl.target, g.cap(16000)))
	return g.bash("python -m pytest", out, code)
}

func (g *gen) callEdit(sl slot, b *bugSite, state int) call {
	oldStr, newStr := g.apply(b, state)
	g.plant("edited:"+b.mod.path, FactArtifact, b.mod.path) // in the call's path argument
	src := g.source(b.mod)
	at := lineOf(src, strings.Split(newStr, "\n")[0])
	args := jsonArgs(editorArgs{Command: "str_replace", Path: g.abs(b.mod), OldStr: &oldStr, NewStr: &newStr})
	if sl.big {
		return call{name: g.editTool, args: args, result: fitBig(g.wrapEditor(fmt.Sprintf("The file %s has been edited. Here's the result of running `cat -n` on %s:\n%sReview the changes and make sure they are as expected. Edit the file again if necessary.", g.abs(b.mod), g.abs(b.mod), numbered(src, 1, 0))))}
	}
	snippet := numbered(src, at-4, at+strings.Count(newStr, "\n")+4)
	return call{name: g.editTool, args: args, result: g.wrapEditor(fmt.Sprintf("The file %s has been edited. Here's the result of running `cat -n` on a snippet of %s:\n%sReview the changes and make sure they are as expected. Edit the file again if necessary.", g.abs(b.mod), g.abs(b.mod), snippet))}
}

func (g *gen) callAddTest(sl slot, b *bugSite) call {
	src := g.source(b.testMod)
	line := lineCount(src)
	text := fmt.Sprintf("\n\ndef %s_repeated_calls():\n    \"\"\"Regression test: a second call gives the same result as the first.\"\"\"\n    first = %s(*SAMPLE_ARGS[\"%s\"])\n    second = %s(*SAMPLE_ARGS[\"%s\"])\n    assert first == second", b.test, b.fn, b.fn, b.fn, b.fn)
	b.testMod.src = strings.TrimRight(src, "\n") + "\n" + text + "\n"
	b.addedTest = strings.TrimPrefix(text, "\n")
	g.plant("edited:"+b.testMod.path, FactArtifact, b.testMod.path)
	args := jsonArgs(editorArgs{Command: "insert", Path: g.abs(b.testMod), InsertLine: &line, NewStr: &text})
	newSrc := g.source(b.testMod)
	from := line - 3
	if sl.big {
		from = 1
	}
	out := g.wrapEditor(fmt.Sprintf("The file %s has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n%sReview the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.", g.abs(b.testMod), numbered(newSrc, from, 0)))
	if sl.big {
		out = fitBig(out)
	}
	return call{name: g.editTool, args: args, result: out}
}

func (g *gen) callRepro(sl slot, b *bugSite, fixed bool) call {
	lines := strings.Split(b.s(strings.Join(b.tpl.reproLines, "\n")), "\n")
	var out string
	code := 0
	switch {
	case fixed:
		out = b.s(b.tpl.reproOK)
	case b.tpl.orig.inSource:
		out, code = g.traceback(b, lines), 1
	default:
		out = b.s(b.tpl.reproOut)
	}
	cmd := "python reproduce_issue.py"
	if !fixed {
		cmd = "cat > reproduce_issue.py << 'EOF'\n" + strings.Join(lines, "\n") + "\nEOF\npython reproduce_issue.py"
	}
	if sl.big {
		cmd = strings.Replace(cmd, "python reproduce_issue.py", "python -X importtime reproduce_issue.py 2>&1", 1)
		out = fitBig(g.importTimes(sl.target-len(out)) + out)
	}
	return g.bash(cmd, out, code)
}

// startupImports are the standard-library modules python -X importtime lists at startup.
var startupImports = []string{"_io", "marshal", "posix", "_frozen_importlib_external", "time", "zipimport", "_codecs", "codecs", "encodings.aliases", "encodings", "encodings.utf_8", "_signal", "_abc", "abc", "io", "_stat", "stat", "_collections_abc", "genericpath", "posixpath", "os", "_sitebuiltins", "site", "types", "enum", "sre_compile", "re", "functools", "collections", "keyword", "operator", "reprlib", "itertools", "heapq", "datetime", "decimal", "numbers", "json.decoder", "json.scanner", "json.encoder", "json", "logging", "dataclasses", "typing", "weakref", "copy", "inspect", "dis", "tokenize", "linecache", "traceback", "warnings", "contextlib", "pathlib", "fnmatch", "ntpath", "urllib.parse", "string", "threading"}

// importTimes renders python -X importtime lines up to target.
func (g *gen) importTimes(target int) string {
	var b strings.Builder
	b.WriteString("import time: self [us] | cumulative | imported package\n")
	mods := make([]string, 0, len(startupImports)+3*len(g.dom.deps)+len(g.dom.modules))
	mods = append(mods, startupImports...)
	for _, d := range g.dom.deps {
		mods = append(mods, strings.ReplaceAll(d, "-", "_"), strings.ReplaceAll(d, "-", "_")+".compat", strings.ReplaceAll(d, "-", "_")+".core")
	}
	for _, m := range g.dom.modules {
		mods = append(mods, g.dom.pkg+"."+m)
	}
	cum := 0
	for i := 0; b.Len() < target; i++ {
		self := 40 + (i*7919)%2100
		cum += self
		depth := (i * 31) % 4
		fmt.Fprintf(&b, "import time: %9d | %10d | %s%s\n", self, cum%90000+self, strings.Repeat("  ", depth), mods[i%len(mods)])
	}
	return b.String()
}

// ---- steps ----

func (g *gen) stepExplore() {
	if g.opts.ParallelCalls {
		calls := []call{g.callLs(g.slotAt(0)), g.callReadme(g.slotAt(1))}
		if g.chance(0.5) {
			calls = append(calls, g.callGitLog(g.slotAt(2)))
		}
		g.turn(g.pick([]string{
			"I'll start by getting an overview of the repository: its layout, the README and the recent history.",
			"Let me first look at the repository layout and the README to understand how the project is organized.",
		}), calls...)
		return
	}
	g.turn(g.pick([]string{
		"I'll start by exploring the repository structure to find the relevant files.",
		"Let me get an overview of the project layout first.",
		"First, let me see which files the repository has.",
	}), g.callFind(g.slotAt(0)))
}

func (g *gen) stepInstall() {
	sl := g.slotAt(0)
	target := min(sl.target, g.cap(6000))
	if sl.big {
		target = sl.target
	}
	out := g.pipLog(target)
	if sl.big {
		out = fitBig(out)
	}
	g.turn("Before running anything, let me make sure the package and its test dependencies are installed in the environment.", g.bash(`pip install -e ".[test]"`, out, 0))
}

func (g *gen) stepGrep(b *bugSite) {
	intro := b.s(g.pick([]string{
		"Let me find where `{fn}` is defined and used.",
		"Let me search for `{fn}` to see where it is defined and who calls it.",
		"I'll grep for `{fn}` across the source and the tests.",
	}))
	if b != g.main {
		if b.announced {
			intro = b.s(g.pick([]string{
				"The full run shows one more failure, `{test}` in `tests/test_{mod}.py`: {Exc}. It is not caused by my change, but the task requires the whole suite to pass, so let me look at it. ",
				"There is another failing test, `{test}`. It looks unrelated to the previous fix; I'll investigate it next. ",
			})) + intro
		} else {
			intro = b.s("Next, `{fn}` in `{mod}.py` needs the same kind of scrutiny: its test `{test}` is marked as a known failure in the issue tracker. ") + intro
			b.announced = true
		}
		intro = strings.ReplaceAll(intro, "{Exc}", b.tpl.orig.exc)
	}
	if g.opts.ParallelCalls && g.chance(0.5) {
		g.turn(intro, g.callGrep(g.slotAt(0), b, "all"), g.callGrep(g.slotAt(1), b, "tests"))
		return
	}
	g.turn(intro, g.callGrep(g.slotAt(0), b, "all"))
}

func (g *gen) stepReadModule(b *bugSite, parallel bool) {
	focus := lineOf(g.source(b.mod), "def "+b.fn+"(")
	if parallel {
		tfocus := lineOf(g.source(b.testMod), "def "+b.test+"(")
		g.turn(b.s(g.pick([]string{
			"`{fn}` is defined in `src/{pkg}/{mod}.py`. Let me look at it and at its tests side by side.",
			"Let me open the implementation of `{fn}` and the corresponding test file together.",
		})), g.callRead(g.slotAt(0), b.mod, focus), g.callRead(g.slotAt(1), b.testMod, tfocus))
		return
	}
	g.turn(b.s(g.pick([]string{
		"`{fn}` lives in `src/{pkg}/{mod}.py`. Let me look at its implementation.",
		"Let me view the implementation of `{fn}`.",
		"Now let me read `{fn}` in `src/{pkg}/{mod}.py`.",
	})), g.callRead(g.slotAt(0), b.mod, focus))
}

func (g *gen) stepReadTest(b *bugSite) {
	focus := lineOf(g.source(b.testMod), "def "+b.test+"(")
	g.turn(b.s(g.pick([]string{
		"Now let me check the existing tests for `{fn}` to understand the expected behaviour.",
		"Let me look at `tests/test_{mod}.py`, in particular `{test}`.",
	})), g.callRead(g.slotAt(0), b.testMod, focus))
}

func (g *gen) stepPytestMissing(b *bugSite) {
	sl := g.slotAt(0)
	if sl.big {
		return // a "command not found" cannot fill a big slot; skip this detour
	}
	g.turn("Let me run the tests for this module to reproduce the failure.", g.bash("pytest "+b.testMod.path, "bash: pytest: command not found\n", 127))
	g.setAck("`pytest` is not on the PATH in this environment. I'll run it as a module with `python -m pytest` instead.",
		&Fact{ID: "instead-python-m-pytest", Category: FactDecision, Text: "I'll run it as a module with `python -m pytest` instead"})
}

func (g *gen) stepRunTest(b *bugSite, f *failure) {
	var text string
	switch {
	case f != nil && b.state == 0:
		text = b.s(g.pick([]string{
			"Let me run the tests for this module to reproduce the failure.",
			"Let me run `tests/test_{mod}.py` to see the failure for myself.",
		}))
	case f != nil:
		text = "Let me re-run the tests to check the change."
	default:
		text = b.s(g.pick([]string{
			"Now let me re-run the tests.",
			"Let me run the tests again to verify the fix.",
			"Let me check that `{test}` passes now.",
		}))
	}
	g.turn(text, g.callRunTests(g.slotAt(0), b, f))
	if f != nil && b.state == 1 {
		// The failure the wrong fix still produces, as pytest's short summary shows it.
		msg := f.msg
		if f.exc != excAssertion {
			msg = f.exc + ": " + f.msg
		}
		// A big log cut to its size limit may have lost it: plant only what the history shows.
		if text := b.s(msg); g.shows(text) {
			g.plant("wrong-fix-error-"+b.fn, FactError, text)
		}
		g.setAck(b.s("That didn't work: "+b.tpl.whyWrong+". I'll "+b.tpl.fixIdea+" instead."),
			&Fact{ID: "instead-" + b.fn, Category: FactDecision, Text: b.s("I'll " + b.tpl.fixIdea + " instead")})
	}
}

func (g *gen) stepRepro(b *bugSite, fixed bool) {
	if fixed {
		g.turn("Let me also run the reproduction script again.", g.callRepro(g.slotAt(0), b, true))
		return
	}
	g.turn(b.s(g.pick([]string{
		"Let me write a small script that reproduces the problem from the report.",
		"To see the behaviour outside the test suite, I'll create a minimal reproduction script.",
	})), g.callRepro(g.slotAt(0), b, false))
	g.reproDone = true
}

func (g *gen) stepEdit(b *bugSite, state int) {
	var text string
	switch {
	case state == 1:
		text = b.s("The root cause is that " + b.tpl.cause + ". " + b.tpl.wrongIdea)
	case b.state == 1:
		text = b.s("Let me apply the better fix.")
	default:
		text = b.s("The root cause is that " + b.tpl.cause + ". The fix is to " + b.tpl.fixIdea + ".")
	}
	g.turn(text, g.callEdit(g.slotAt(0), b, state))
}

func (g *gen) stepAddTest(b *bugSite) {
	g.turn(b.s("The fix works. I'll add one more regression test to `tests/test_{mod}.py` so that repeated calls are covered too."), g.callAddTest(g.slotAt(0), b))
}

func (g *gen) stepFullSuite(b *bugSite, next *bugSite) {
	var fails []failingTest
	if next != nil {
		fails = []failingTest{{b: next, f: &next.tpl.orig}}
		next.announced = true
	}
	text := b.s(g.pick([]string{
		"The targeted tests pass. Let me run the full test suite to check for regressions.",
		"`{test}` passes now. Let me make sure nothing else broke by running the whole suite.",
	}))
	if g.opts.ParallelCalls && g.chance(0.4) {
		suite := g.callFullSuite(g.slotAt(0), fails)
		g.turn(text+" I'll check which files I have changed at the same time.", suite, g.callDiffStat(g.slotAt(1)))
		return
	}
	g.turn(text, g.callFullSuite(g.slotAt(0), fails))
}

// callDiffStat is `git diff --stat`, or in a big slot the history with stats.
func (g *gen) callDiffStat(sl slot) call {
	if sl.big {
		return g.bash("git --no-pager log --stat -n 300", fitBig(g.gitLog(0, true, sl.target)), 0)
	}
	var b strings.Builder
	files, ins := 0, 0
	for _, m := range append(append([]*module{}, g.sources...), g.tests...) {
		n := 0
		for _, bug := range g.bugs {
			if !bug.committed && ((bug.mod == m && bug.edits > 0) || (bug.testMod == m && bug.addedTest != "")) {
				n += 2
			}
		}
		if n > 0 {
			files++
			ins += n
			fmt.Fprintf(&b, " %-40s | %d %s\n", m.path, n, strings.Repeat("+", n/2)+strings.Repeat("-", n/2))
		}
	}
	fmt.Fprintf(&b, " %d files changed, %d insertions(+), %d deletions(-)\n", files, ins/2, ins/2)
	return g.bash("git --no-pager diff --stat", b.String(), 0)
}

// stepCommit commits the finished fix, as agents on long tasks do between sub-tasks.
func (g *gen) stepCommit(b *bugSite) {
	files := 1
	if b.addedTest != "" {
		files = 2
	}
	msg := b.s("Fix {fn}: " + strings.SplitN(b.tpl.fixSummary, ";", 2)[0])
	msg = strings.ReplaceAll(msg, "`", "")
	if len(msg) > 72 {
		msg = msg[:72]
	}
	out := fmt.Sprintf("[main %s] %s\n %d files changed, %d insertions(+), %d deletions(-)\n", g.hex(7), msg, files, 1+strings.Count(b.line(2), "\n")+4*(files-1), 1)
	for _, x := range g.bugs {
		if x.edits > 0 || x.addedTest != "" {
			x.committed = true
		}
	}
	cmd := fmt.Sprintf("git add -A && git commit -q -m %q && git --no-pager log --oneline -n 1 --stat", msg)
	if sl := g.slotAt(0); sl.big {
		cmd = fmt.Sprintf("git add -A && git commit -q -m %q && git --no-pager log --stat -n 200", msg)
		out = fitBig(out + g.gitLog(0, true, sl.target))
	}
	g.turn("This fix is complete and verified. I'll commit it before moving on, so the next change gets a clean diff.", g.bash(cmd, out, 0))
}

func (g *gen) stepFullSuiteFinal() {
	g.turn("Let me run the whole test suite one final time.", g.callFullSuite(g.slotAt(0), nil))
}

func (g *gen) stepDiff() {
	sl := g.slotAt(0)
	if sl.big {
		out := g.diff()
		g.turn("Let me review the full diff, and the recent history of the files I touched.", g.bash("git --no-pager log --stat -n 200 && git --no-pager diff", fitBig(g.gitLog(0, true, sl.target-len(out))+out), 0))
		return
	}
	if g.opts.ParallelCalls && g.chance(0.5) {
		diff := g.bash("git --no-pager diff", g.diff(), 0)
		g.turn("Let me review the full diff of my changes and the state of the working tree.", diff, g.callStatus(g.slotAt(1)))
		return
	}
	g.turn("Let me review the full diff of my changes.", g.bash("git --no-pager diff", g.diff(), 0))
}

func (g *gen) stepLint() {
	sl := g.slotAt(0)
	if sl.big {
		out, code := g.lintLog(sl.target, true)
		g.turn("Let me run the linter as well.", g.bash("ruff check .", fitBig(out), code))
		g.setAck("All of those findings are inside `.venv`, not in our code. Let me restrict the check to the repository's sources next time; there is nothing to fix here.", nil)
		return
	}
	out, code := g.lintLog(0, false)
	g.turn("Let me run the linter on the changed code.", g.bash("ruff check src/ tests/", out, code))
}

func (g *gen) stepTypecheck() {
	sl := g.slotAt(0)
	if !sl.big {
		g.turn("Let me also run the type checker.", g.bash("mypy src/"+g.dom.pkg, fmt.Sprintf("Success: no issues found in %d source files\n", len(g.sources)+2), 0))
		return
	}
	var b strings.Builder
	n := 0
	for b.Len() < sl.target {
		m := g.sources[n%len(g.sources)]
		fmt.Fprintf(&b, "%s:%d: error: %s\n", m.path, 20+(n*37)%400, []string{
			"Function is missing a type annotation  [no-untyped-def]",
			"Function is missing a return type annotation  [no-untyped-def]",
			"Call to untyped function \"_normalize\" in typed context  [no-untyped-call]",
			"Returning Any from function declared to return \"int\"  [no-any-return]",
			"Missing type parameters for generic type \"dict\"  [type-arg]",
		}[n%5])
		n++
	}
	fmt.Fprintf(&b, "Found %d errors in %d files (checked %d source files)\n", n, len(g.sources), len(g.sources)+2)
	g.turn("Let me also run the type checker in strict mode.", g.bash("mypy --strict src/"+g.dom.pkg, fitBig(b.String()), 1))
	g.setAck("Strict mode only reports missing annotations that were there before my change; the default configuration, which CI uses, is clean. I won't annotate the whole package as part of this fix.", nil)
}

func (g *gen) stepCleanup() {
	sl := g.slotAt(0)
	var changed strings.Builder
	for _, m := range append(append([]*module{}, g.sources...), g.tests...) {
		for _, b := range g.bugs {
			if !b.committed && ((b.mod == m && b.edits > 0) || (b.testMod == m && b.addedTest != "")) {
				fmt.Fprintf(&changed, " M %s\n", m.path)
				break
			}
		}
	}
	if sl.big {
		out := changed.String() + strings.ReplaceAll(g.listing(sl.target, true), "./", "!! ")
		g.turn("Let me remove the reproduction script and check what is left in the working tree, including ignored files.", g.bash("rm -f reproduce_issue.py && git status --short --ignored", fitBig(out), 0))
		return
	}
	g.turn("Let me remove the temporary reproduction script and check the working tree.", g.bash("rm -f reproduce_issue.py && git status --short", changed.String(), 0))
}

func (g *gen) stepStatus() {
	sl := g.slotAt(0)
	if sl.big {
		g.turn("Let me check the recent history of the package to make sure my changes don't conflict with recent work.", g.callStatus(sl))
		return
	}
	g.turn("Let me check the state of the working tree.", g.callStatus(sl))
}

func (g *gen) callStatus(sl slot) call {
	if sl.big {
		return g.bash("git --no-pager log --stat -n 300", fitBig(g.gitLog(0, true, sl.target)), 0)
	}
	return g.bash("git status", "On branch main\nYour branch is up to date with 'origin/main'.\n\nChanges not staged for commit:\n  (use \"git add <file>...\" to update what will be committed)\n  (use \"git restore <file>...\" to discard changes in working directory)\n"+strings.ReplaceAll(g.diffNames(), " M ", "\tmodified:   ")+"\nno changes added to commit (use \"git add\" and/or \"git commit -a\")\n", 0)
}

func (g *gen) diffNames() string {
	var b strings.Builder
	for _, m := range g.sources {
		for _, bug := range g.bugs {
			if bug.mod == m && bug.edits > 0 && !bug.committed {
				fmt.Fprintf(&b, " M %s\n", m.path)
				break
			}
		}
	}
	return b.String()
}
