package synth

import (
	"fmt"
	"strings"
)

// This file holds the prose: the system prompt, the task, interjections, the assistant's
// reasoning, and the final answer.

func (g *gen) systemPrompt() string {
	return strings.NewReplacer("{root}", g.root, "{py}", g.pyVer).Replace(`You are an autonomous software engineering agent. You work in a sandboxed Linux environment with a checkout of a Python repository at {root}.

You have these tools:
- bash: run a shell command. Commands are non-interactive and start in {root}; output longer than 100000 characters is truncated. Use it to search the code (grep, find), run tests (python -m pytest), and inspect git state.
- str_replace_editor: view, create and edit files. Commands: view (a file with line numbers, or a directory listing), create, str_replace (old_str must match exactly one location, including whitespace), insert (new_str is inserted after insert_line), undo_edit.

How to work:
1. Explore the repository before changing anything. Read the code you are going to change and the tests that cover it.
2. Reproduce the problem first, with a failing test or a small script. Then fix it, then verify the fix.
3. Make minimal, focused changes. Do not change public signatures without a reason, and keep the surrounding style.
4. Run the relevant tests after every change, and the full test suite before you finish.
5. If an approach does not work, say why and try a different one. Never repeat a failed fix.
6. Think step by step, and say briefly what you are about to do before each tool call.
7. When you are done, reply with a short summary: the root cause, the change, and how you verified it. Do not ask the user for help.

Environment:
- Python {py} in .venv (already activated). The package is installed in editable mode.
- Network access is disabled except for the package index.
- Commands that run longer than 120 seconds are killed.
`)
}

func (g *gen) taskMessage(b *bugSite) string {
	g.plant("task", FactTask, b.s(b.tpl.title))
	if g.chance(0.5) {
		g.plant("task-constraint", FactConstraint, "make the minimal changes to non-test files")
		return b.s(fmt.Sprintf("<uploaded_files>\n%s\n</uploaded_files>\nI've uploaded a python code repository in the directory %s. Consider the following issue description:\n\n<issue_description>\n### %s\n\n%s\n</issue_description>\n\n"+
			"Can you help me implement the necessary changes to the repository so that the requirements specified in the <issue_description> are met?\n"+
			"Your task is to make the minimal changes to non-test files in the %s directory to ensure the <issue_description> is satisfied. You may add regression tests.\n"+
			"Follow these steps to resolve the issue:\n1. As a first step, explore the repo to familiarize yourself with its structure.\n2. Reproduce the error and confirm it.\n3. Edit the source code of the repo to resolve the issue.\n4. Rerun the tests and your reproduction to confirm that the error is fixed.\n5. Think about edge cases and make sure your fix handles them as well.\n6. Run the full test suite; every test must pass.",
			g.root, g.root, b.tpl.title, b.tpl.report, g.root))
	}
	g.plant("task-constraint", FactConstraint, "keep the public API unchanged")
	return b.s(fmt.Sprintf("We have a bug in %s (%s). Issue #%d: **%s**\n\n%s\n\n"+
		"Goal: find the root cause and fix it in `src/%s`, keep the public API unchanged, add or update a test that covers the case, and make sure `python -m pytest` passes before you finish. The repository is checked out at %s.",
		g.dom.repo, g.dom.about, g.between(120, 4800), b.tpl.title, b.tpl.report, g.dom.pkg, g.root))
}

var fillers = []string{
	"`{fn}` is only called from a handful of places, so a local change is low-risk.",
	"The tests build {nouns} with `make_{noun}` from `{pkg}.testing`, which fills every field with a sensible default.",
	"I want to avoid changing behaviour for callers that depend on the current return type.",
	"The surrounding code in `{mod}.py` has no type hints, so I'll keep any change in the same style.",
	"`pyproject.toml` declares support for Python 3.8 and later, so I'll avoid newer syntax.",
	"The logging calls in this module use lazy %-formatting; I'll keep that consistent.",
	"The docstring of `{fn}` describes the intended behaviour, which is a useful reference for what the code should do.",
	"It's worth checking whether the same pattern appears elsewhere in `{mod}.py` afterwards.",
	"I'll keep the change as small as possible so it is easy to review.",
	"Note that `{fn}` is part of the public API (it is re-exported from `{pkg}/__init__.py`), so its signature must stay the same.",
	"CI runs the tests with warnings as errors, so nothing I change may introduce new warnings.",
	"`tests/conftest.py` only sets up fixtures and a temporary working directory, so it does not affect this behaviour.",
	"The module has no global state besides the logger and a small cache, which keeps this easy to reason about.",
	"The package is installed in editable mode, so changes under `src/` take effect without reinstalling.",
}

// pad lengthens an assistant message until it reaches target: first by quoting the
// interesting lines of the tool output it reacts to, then with a few sentences of
// reasoning (at most three, rotating so consecutive turns do not repeat each other).
func (g *gen) pad(text string, target int) string {
	if len(text) >= target {
		return text
	}
	var sb strings.Builder
	sb.WriteString(text)
	if q := g.quote(target - len(text)); q != "" {
		sb.WriteString(q)
	}
	b := g.cur()
	for i := 0; sb.Len() < target && i < 3; i++ {
		if !strings.HasSuffix(sb.String(), "\n") {
			sb.WriteString(" ")
		}
		sb.WriteString(b.s(fillers[g.fillerIdx%len(fillers)]))
		g.fillerIdx += 1 + g.r.IntN(2)
	}
	return sb.String()
}

// interesting marks lines of tool output worth quoting.
var interesting = []string{"FAILED", "Error:", "error:", "assert ", "Traceback", " passed", " failed", "got:", "expected", "Exit code", "command not found", "All checks passed"}

// quote picks up to six interesting lines of the previous tool results, within budget.
func (g *gen) quote(budget int) string {
	if budget < 120 || len(g.out) == 0 || g.out[len(g.out)-1].Role != roleTool {
		return ""
	}
	b := g.cur()
	keys := append([]string{"def " + b.fn + "(", b.line(b.state)}, interesting...)
	var picked []string
	used := 0
	for i := len(g.out) - 1; i >= 0 && g.out[i].Role == roleTool && len(picked) < 6; i-- {
		content := g.out[i].Content
		if len(content) > 12000 {
			content = content[:12000]
		}
		for _, l := range strings.Split(content, "\n") {
			t := strings.TrimSpace(l)
			if len(t) < 8 || len(t) > 200 || strings.HasPrefix(t, "<") || strings.HasPrefix(t, "====") {
				continue
			}
			hit := false
			for _, k := range keys {
				if strings.Contains(t, strings.TrimSpace(k)) {
					hit = true
					break
				}
			}
			if !hit || used+len(t) > budget-60 {
				continue
			}
			picked = append(picked, t)
			used += len(t) + 1
			if len(picked) == 6 {
				break
			}
		}
	}
	if len(picked) == 0 {
		return ""
	}
	lead := g.pick([]string{"\n\nThe relevant lines of the output:", "\n\nFrom the output:", "\n\nWhat matters in that output:"})
	return lead + "\n```\n" + strings.Join(picked, "\n") + "\n```\n"
}

// cur is the bug the agent is working on.
func (g *gen) cur() *bugSite {
	for _, b := range g.bugs {
		if b.state < 2 && b.announced {
			return b
		}
	}
	return g.bugs[len(g.bugs)-1]
}

var interjections = []struct{ user, ack string }{
	{"Quick note from the team: please keep the signature of `{fn}` unchanged, other services import it.", "Understood, I'll keep the signature of `{fn}` unchanged."},
	{"Also, we still support Python 3.8, so please avoid 3.10+ syntax (no `match`, no `X | Y` unions).", "Noted, I'll stick to Python 3.8-compatible syntax."},
	{"How is it going? If the fix turns out to be large, a minimal patch is fine for now and we can follow up.", "Good progress: the problem is in `{mod}.py` and the fix should be small."},
	{"Please don't modify existing tests; add new ones instead if you need them.", "Sure, I'll leave the existing tests as they are."},
	{"FYI CI runs `pytest -W error::DeprecationWarning`, so new deprecation warnings will fail the build.", "Thanks, I'll make sure the change introduces no deprecation warnings."},
	{"When you're done, could you also check whether other callers of `{fn}` rely on the old behaviour?", "Will do: I'll check the other call sites of `{fn}` once the fix is in."},
	{"Heads up: we're cutting a release this afternoon, so please keep the change self-contained.", "Understood, I'll keep the change self-contained and small."},
}

func (g *gen) interject(b *bugSite) {
	if g.remaining() < 2 || g.out[len(g.out)-1].Role == roleUser {
		return
	}
	i := g.r.IntN(len(interjections))
	for k := 0; k < len(interjections) && g.saidIdx[i]; k++ {
		i = (i + 1) % len(interjections)
	}
	g.saidIdx[i] = true
	it := interjections[i]
	g.user(b.s(it.user))
	g.plant(fmt.Sprintf("interjection-%d", i), FactConstraint, b.s(it.user))
	g.setAck(b.s(it.ack), nil)
	g.interjected = true
}

var nudges = []string{
	"Please continue working on the task on whatever approach you think is suitable.\nIf you think you have solved the task, please first send your answer to user through message and then finish the interaction.\nIMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.",
	"Please continue.",
	"Continue with the task. Remember to run the tests before you finish.",
}

// textOnlyAnalysis is an assistant turn without tool calls that states the diagnosis and
// the plan, followed by the harness's nudge.
func (g *gen) textOnlyAnalysis(b *bugSite) {
	if g.remaining() < 2 {
		return
	}
	text := b.s("Let me think about this before changing anything.\n\nThe failing test and the code agree on the diagnosis: the root cause is that " + b.tpl.cause + ".\n\n" +
		"Options:\n1. " + strings.TrimSuffix(b.tpl.wrongIdea, ".") + ".\n2. " + strings.ToUpper(b.tpl.fixIdea[:1]) + b.tpl.fixIdea[1:] + ".\n\n" +
		"The first option is the smaller change, so I'll try it first and verify it with the test; if it is not enough I'll switch to the second.")
	g.emit(g.assistantText(g.pad(text, g.assistantTarget())))
	g.user(nudges[g.r.IntN(len(nudges))])
	g.textOnly = true
}

func (g *gen) textOnlyProgress(b *bugSite) {
	if g.remaining() < 2 {
		return
	}
	var done []string
	for _, x := range g.bugs {
		if x.state == 2 {
			done = append(done, x.s("`{fn}` in `{mod}.py`"))
		}
	}
	progress := "nothing fixed yet"
	if len(done) > 0 {
		if len(done) > 4 {
			done = append(done[:4], fmt.Sprintf("and %d more", len(done)-4))
		}
		progress = "fixed " + strings.Join(done, ", ")
	}
	text := b.s("Progress so far: " + progress + ". Currently working on `{test}`; the root cause is that " + b.tpl.cause + ". Next I'll make the change and run the tests for `{mod}.py`, then the full suite.")
	g.emit(g.assistantText(g.pad(text, g.assistantTarget())))
	g.user(nudges[g.r.IntN(len(nudges))])
	g.textOnly = true
}

func (g *gen) assistantText(text string) (m msg) {
	if g.ack != "" {
		text = g.ack + " " + text
		g.ack = ""
		g.plantAck()
	}
	return msg{Role: roleAssistant, Content: text}
}

// finalAnswer closes the session with a summary of what was fixed and what is left.
func (g *gen) finalAnswer() {
	// An ack the final answer opens with comes after the last turn: no view can hold it.
	g.ackFact = nil
	var fixed, open []*bugSite
	for _, b := range g.bugs {
		switch {
		case b.state == 2:
			fixed = append(fixed, b)
		case b.announced || b.edits > 0 || b == g.main:
			open = append(open, b)
		}
	}
	var s strings.Builder
	if len(fixed) > 0 && fixed[0] == g.main {
		fmt.Fprintf(&s, "I've resolved the issue.\n\n**Root cause:** %s.\n\n**Changes:**\n", g.main.s(g.main.tpl.cause))
	} else {
		s.WriteString("I ran out of steps before finishing the task. Here is where things stand.\n\n**Changes so far:**\n")
		if len(fixed) == 0 {
			s.WriteString("- none yet\n")
		}
	}
	for i, b := range fixed {
		if i == 8 {
			fmt.Fprintf(&s, "- ... and %d more fixes of the same kind (see `git diff`).\n", len(fixed)-8)
			break
		}
		fmt.Fprintf(&s, "- `%s`: %s.\n", b.mod.path, b.s(b.tpl.fixSummary))
	}
	if len(fixed) > 0 {
		s.WriteString("\n**Verification:**\n")
		fmt.Fprintf(&s, "- `python -m pytest %s`: `%s` passes.\n", fixed[0].testMod.path, fixed[0].test)
		if g.reproDone {
			s.WriteString("- The reproduction script from the report now prints the expected result.\n")
		}
	}
	if len(open) > 0 {
		s.WriteString("\n**Not finished:**\n")
		for i, b := range open {
			if i == 4 {
				break
			}
			fmt.Fprintf(&s, "- `%s` still fails: %s. The next step is to %s.\n", b.test, b.s(b.tpl.cause), b.s(b.tpl.fixIdea))
		}
	} else if len(fixed) > 0 {
		s.WriteString("- `python -m pytest`: the full suite passes.\n")
	}
	g.emit(g.assistantText(strings.TrimRight(s.String(), "\n")))
}
