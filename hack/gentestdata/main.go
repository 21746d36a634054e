// Command gentestdata writes the sample transcripts in testdata/ with internal/dev/synth, and
// testdata/README.md describing them. It is deterministic: running it again rewrites the
// same bytes, and `go test ./hack/gentestdata` fails when the committed files are stale.
//
//	go run ./hack/gentestdata              # regenerate testdata/ (from anywhere in the repo)
//	go run ./hack/gentestdata -out DIR     # write somewhere else
//	go run ./hack/gentestdata -check       # exit 1 if testdata/ is not up to date
//
// Besides writing, it checks each transcript: it must validate, decode back to the same
// messages, and reach every tier with the documented context windows (Warn offloads at
// least one result, Soft and Full summarize, Emergency truncates).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
	"github.com/harness9/compaction-operator/internal/dev/synth"
)

// sample is one generated transcript and what it must show.
type sample struct {
	file  string
	title string
	about string
	opts  synth.Options
	check func(msgs []compaction.Message) error
}

var samples = []sample{
	{
		file:  "coding-agent-small.jsonl",
		title: "A short bug fix",
		about: "A single bug fixed end to end, no parallel calls: exploring the repository, grep, reading the module and its test, a failing pytest run with the failure and its `E` lines, a wrong first fix that still fails, the right fix, passing tests, a final answer. Three tool results are 5-50 KB (a whole module, a verbose test run, ...), so the Warn tier has something to offload.",
		opts:  synth.Options{Seed: 7, Messages: 40, BigResultEvery: 6},
		check: func(msgs []compaction.Message) error {
			return all(msgs, hasText("FAILED"), hasText(" passed in "), hasText("I've resolved the issue"), hasText(" instead"), minBig(2, 5<<10))
		},
	},
	{
		file:  "parallel-tools.jsonl",
		title: "Parallel tool calls",
		about: "Several bugs fixed in a row, with assistant turns that make two or three tool calls at once (answered by consecutive tool messages) throughout, including near the end, where the tail split must not separate a call from its results. Also has user interjections and text-only assistant turns.",
		opts:  synth.Options{Seed: 3, Messages: 150, BigResultEvery: 8, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true},
		check: func(msgs []compaction.Message) error {
			return all(msgs, minParallel(6), parallelIn(0.5, 1.0), hasInterjection(), hasTextOnly())
		},
	},
	{
		file:  "long-session.jsonl",
		title: "A long session",
		about: "A long run that fixes one bug after another (each full test run reveals the next failure, each fix is committed): about 400 messages, several 10-50 KB tool results (whole modules, verbose test runs, an unfiltered grep through .venv, git logs), user interjections with new constraints, text-only turns answered by the harness's \"please continue\", and failed attempts followed by \"I'll ... instead\".",
		opts:  synth.Options{Seed: 11, Messages: 400, BigResultEvery: 12, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true},
		check: func(msgs []compaction.Message) error {
			return all(msgs, minBig(5, 10<<10), hasInterjection(), hasTextOnly(), hasText("That didn't work"), hasText(" instead"))
		},
	},
}

// tierUsage is the usage ratio the README suggests for each tier: inside its band.
var tierUsage = []struct {
	tier  compaction.Tier
	usage float64
}{
	{compaction.TierNone, 0.40},
	{compaction.TierWarn, 0.65},
	{compaction.TierSoft, 0.75},
	{compaction.TierFull, 0.875},
	{compaction.TierEmergency, 0.98},
}

func main() {
	out := flag.String("out", "", "directory to write (default: testdata/ at the repository root)")
	check := flag.Bool("check", false, "do not write; exit 1 if the files in the directory differ")
	flag.Parse()
	dir := *out
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			fail(err)
		}
		dir = filepath.Join(root, "testdata")
	}
	files, err := render()
	if err != nil {
		fail(err)
	}
	if *check {
		stale := false
		for _, f := range files {
			got, err := os.ReadFile(filepath.Join(dir, f.name))
			if err != nil || !bytes.Equal(got, f.data) {
				fmt.Fprintf(os.Stderr, "%s is not up to date; run: go run ./hack/gentestdata\n", filepath.Join(dir, f.name))
				stale = true
			}
		}
		if stale {
			os.Exit(1)
		}
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("wrote %s (%d bytes)\n", filepath.Join(dir, f.name), len(f.data))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gentestdata:", err)
	os.Exit(1)
}

type file struct {
	name string
	data []byte
}

// render generates, checks and encodes every sample, and the README.
func render() ([]file, error) {
	var files []file
	var rows []readmeRow
	for _, s := range samples {
		msgs := synth.Generate(s.opts)
		if err := compaction.Validate(msgs); err != nil {
			return nil, fmt.Errorf("%s: %w", s.file, err)
		}
		if err := s.check(msgs); err != nil {
			return nil, fmt.Errorf("%s: %w (pick another seed)", s.file, err)
		}
		var buf bytes.Buffer
		if err := compaction.EncodeJSONL(&buf, msgs); err != nil {
			return nil, fmt.Errorf("%s: %w", s.file, err)
		}
		back, err := compaction.DecodeTranscript(bytes.NewReader(buf.Bytes()), compaction.DecodeOptions{})
		if err != nil {
			return nil, fmt.Errorf("%s: decoding what was written: %w", s.file, err)
		}
		if !reflect.DeepEqual(back, msgs) {
			return nil, fmt.Errorf("%s: JSONL round trip changed the messages", s.file)
		}
		row, err := tiers(s, msgs)
		if err != nil {
			return nil, err
		}
		row.bytes = buf.Len()
		rows = append(rows, row)
		files = append(files, file{s.file, buf.Bytes()})
	}
	files = append(files, file{"README.md", []byte(readme(rows))})
	return files, nil
}

type readmeRow struct {
	s        sample
	msgs     int
	bytes    int
	tokens   int
	parallel int
	big      int
	windows  []window // per tier, in tierUsage order
}

type window struct {
	tier          compaction.Tier
	lo, hi, shown int // the band of windows that select the tier (hi 0 = unbounded) and an example
}

// tiers finds, for each tier, the context windows that select it and checks the example
// window really compacts at that tier.
func tiers(s sample, msgs []compaction.Message) (readmeRow, error) {
	tokens := compaction.EstimateTokens(msgs)
	row := readmeRow{s: s, msgs: len(msgs), tokens: tokens}
	for _, m := range msgs {
		if len(m.ToolCalls) > 1 {
			row.parallel++
		}
		if m.Role == compaction.RoleTool && len(m.Content) >= 5<<10 {
			row.big++
		}
	}
	cfg := compaction.DefaultConfig(0)
	for _, tu := range tierUsage {
		w := window{tier: tu.tier, shown: roundNice(float64(tokens) / tu.usage)}
		cfg.ContextWindow = w.shown
		if got := cfg.DetermineTier(tokens); got != tu.tier {
			return row, fmt.Errorf("%s: window %d selects %s, want %s", s.file, w.shown, got, tu.tier)
		}
		// widen the band from the example window; tiers are monotonic in the window
		w.lo, w.hi = w.shown, w.shown
		for step := 1 << 20; step > 0; step /= 2 {
			if cand := w.lo - step; cand >= 1 && tierAt(cfg, tokens, cand) == tu.tier {
				w.lo = cand
			}
			if cand := w.hi + step; tierAt(cfg, tokens, cand) == tu.tier && tu.tier != compaction.TierNone {
				w.hi = cand
			}
		}
		if tu.tier == compaction.TierNone {
			w.hi = 0
		}
		if err := compactAt(s.file, msgs, w.shown, tu.tier); err != nil {
			return row, err
		}
		row.windows = append(row.windows, w)
	}
	return row, nil
}

func tierAt(cfg compaction.Config, tokens, window int) compaction.Tier {
	cfg.ContextWindow = window
	return cfg.DetermineTier(tokens)
}

// roundNice rounds to two significant digits, so the README shows windows one can type.
func roundNice(v float64) int {
	p := 1
	for v/float64(p) >= 100 {
		p *= 10
	}
	return int(v/float64(p)+0.5) * p
}

// compactAt runs the compactor with the extractive summarizer and an in-memory store and
// checks the tier did its work.
func compactAt(name string, msgs []compaction.Message, window int, want compaction.Tier) error {
	cfg := compaction.DefaultConfig(window)
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithToolResultStore(mem.New()))
	if err != nil {
		return err
	}
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		return fmt.Errorf("%s at window %d: %w", name, window, err)
	}
	// The usage selects the tier; a Soft whose half of the head cannot reach the target is
	// done as Full in the same turn (the record's tier is what ran).
	switch selected := cfg.DetermineTier(rec.TokensBefore); {
	case selected != want || (rec.Tier != want && (want != compaction.TierSoft || rec.Tier != compaction.TierFull)):
		return fmt.Errorf("%s at window %d: tier %s (selected %s), want %s", name, window, rec.Tier, selected, want)
	case compaction.Validate(out) != nil:
		return fmt.Errorf("%s at window %d: compacted view invalid: %v", name, window, compaction.Validate(out))
	case want == compaction.TierWarn && len(rec.Offloaded) == 0:
		return fmt.Errorf("%s at window %d: Warn offloaded nothing", name, window)
	case (want == compaction.TierSoft || want == compaction.TierFull) && rec.Summarized == 0:
		return fmt.Errorf("%s at window %d: %s summarized nothing (%s)", name, window, want, rec.Error)
	case want == compaction.TierEmergency && rec.Error == "":
		return fmt.Errorf("%s at window %d: Emergency without its record error", name, window)
	}
	return nil
}

func readme(rows []readmeRow) string {
	var b strings.Builder
	b.WriteString(`# Sample transcripts

Synthetic coding-agent transcripts for tests, examples and the CLI. **Generated, do not edit by
hand**: they are written by

    go run ./hack/gentestdata

which is deterministic (same bytes every run; ` + "`go test ./hack/gentestdata`" + ` fails when these files
are stale). The generator is ` + "`internal/dev/synth`" + `: a fictional Python project, a bug report, and an
agent that explores, reproduces, fails once, fixes, and verifies. Nothing here is copied from real
runs; real public transcripts live outside the repository (see DESIGN.md) and are used by path only.

Format: JSONL, one OpenAI chat message per line (` + "`role`" + `, ` + "`content`" + `, ` + "`tool_calls`" + `, ` + "`tool_call_id`" + `).
Every tool result follows the assistant message that called it, in call order, and every file passes
` + "`compaction.Validate`" + `.

`)
	b.WriteString("| File | Messages | Bytes | Estimated tokens | Parallel-call turns | Results >= 5 KB |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s | %d | %d |\n", r.s.file, r.msgs, commas(r.bytes), commas(r.tokens), r.parallel, r.big)
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "## `%s`: %s\n\n%s\n\nGenerated with `synth.Options%+v`.\n\n", r.s.file, r.s.title, r.s.about, r.s.opts)
	}
	b.WriteString(`## Which --context-window reaches which tier

The tier is chosen from usage = estimated tokens / context window (estimated tokens = bytes of
content and tool-call arguments / 4), with the default thresholds Warn 60%, Soft 70%, Full 80%,
Emergency 95%. Each cell gives the windows that select the tier and, in bold, an example value
(the generator checks that compacting the file at that window reaches the tier and does its work:
Warn offloads at least one tool result, Soft and Full summarize, Emergency truncates).

`)
	b.WriteString("| File | None | Warn | Soft | Full | Emergency |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` ", r.s.file)
		for _, w := range r.windows {
			switch {
			case w.hi == 0:
				fmt.Fprintf(&b, "| >= %s (**%s**) ", commas(w.lo), commas(w.shown))
			case w.tier == compaction.TierEmergency:
				fmt.Fprintf(&b, "| <= %s (**%s**) ", commas(w.hi), commas(w.shown))
			default:
				fmt.Fprintf(&b, "| %s-%s (**%s**) ", commas(w.lo), commas(w.hi), commas(w.shown))
			}
		}
		b.WriteString("|\n")
	}
	b.WriteString("\nFor example, with the CLI:\n\n")
	r := rows[0]
	for _, w := range r.windows {
		fmt.Fprintf(&b, "    compactctl simulate --context-window %d testdata/%s   # %s\n", w.shown, r.s.file, w.tier)
	}
	return b.String()
}

func commas(n int) string {
	s := fmt.Sprint(n)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// repoRoot finds the directory holding go.mod, from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory; use -out")
		}
		dir = parent
	}
}

// ---- checks ----

type checkFn func([]compaction.Message) error

func all(msgs []compaction.Message, checks ...checkFn) error {
	var errs []error
	for _, c := range checks {
		if err := c(msgs); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func hasText(s string) checkFn {
	return func(msgs []compaction.Message) error {
		for _, m := range msgs {
			if strings.Contains(m.Content, s) {
				return nil
			}
		}
		return fmt.Errorf("no message contains %q", s)
	}
}

func minBig(n, size int) checkFn {
	return func(msgs []compaction.Message) error {
		got := 0
		for _, m := range msgs {
			if m.Role == compaction.RoleTool && len(m.Content) >= size {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d tool results of %d+ bytes, want at least %d", got, size, n)
		}
		return nil
	}
}

func minParallel(n int) checkFn {
	return func(msgs []compaction.Message) error {
		got := 0
		for _, m := range msgs {
			if len(m.ToolCalls) > 1 {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d parallel-call turns, want at least %d", got, n)
		}
		return nil
	}
}

// parallelIn requires a parallel-call turn between fractions from and to of the history.
func parallelIn(from, to float64) checkFn {
	return func(msgs []compaction.Message) error {
		for i := int(from * float64(len(msgs))); i < len(msgs) && float64(i) < to*float64(len(msgs)); i++ {
			if len(msgs[i].ToolCalls) > 1 {
				return nil
			}
		}
		return fmt.Errorf("no parallel-call turn between %.0f%% and %.0f%% of the history", from*100, to*100)
	}
}

func hasInterjection() checkFn {
	return func(msgs []compaction.Message) error {
		for i := 2; i < len(msgs); i++ {
			if msgs[i].Role == compaction.RoleUser && msgs[i-1].Role == compaction.RoleTool {
				return nil
			}
		}
		return errors.New("no user message between tool turns")
	}
}

func hasTextOnly() checkFn {
	return func(msgs []compaction.Message) error {
		for i := 0; i < len(msgs)-1; i++ {
			if msgs[i].Role == compaction.RoleAssistant && len(msgs[i].ToolCalls) == 0 {
				return nil
			}
		}
		return errors.New("no text-only assistant turn before the final answer")
	}
}
