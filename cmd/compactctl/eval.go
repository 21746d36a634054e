package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/harness9/compaction-operator/compaction"
)

// Probe categories, in the order eval reports them.
const (
	catTask       = "task"
	catConstraint = "constraint"
	catArtifact   = "artifact"
	catDecision   = "decision"
	catError      = "error"
	catNext       = "next"
)

func probeCategories() []string {
	return []string{catTask, catConstraint, catArtifact, catDecision, catError, catNext}
}

func validCategory(c string) bool {
	for _, k := range probeCategories() {
		if c == k {
			return true
		}
	}
	return false
}

// Defaults of eval's own flags.
const (
	defaultWindowFractions = "0.2,0.1"
	defaultMinWindow       = 16000
)

// probe is one fact a compacted view must keep.
type probe struct {
	ID       string `json:"id"`
	Category string `json:"category"`
	Text     string `json:"text"`
	// Note says why the fact matters; for readers of the probe file only.
	Note string `json:"note,omitempty"`

	norm string // Text, normalized for matching
}

// probeSet is the probes of one transcript, named by its base name and pinned to its content
// by SHA-256: probes written for other bytes would score the wrong facts.
type probeSet struct {
	Transcript string  `json:"transcript"`
	SHA256     string  `json:"sha256"`
	About      string  `json:"about,omitempty"`
	Probes     []probe `json:"probes"`

	file string // where the set was read from
}

type evalFlags struct {
	probes    string
	json      bool
	fractions string
	minWindow int
	windows   string
	prices    *prices
	offTurn   *offTurnFlags
}

func evalCommand() *command {
	return &command{
		name:     "eval",
		synopsis: "score what compaction keeps: replay transcripts and check the final views for probe facts",
		usage:    "compactctl eval [flags] --probes PROBES TRANSCRIPT...",
		help: `Replays each TRANSCRIPT turn by turn as simulate does (a fresh session, one compactor per
transcript and window), at every window of --window-fraction (fractions of the transcript's
estimated size in tokens, never below --min-window) or, with --windows, at fixed windows in
tokens, and scores the views the agent would send against the transcript's probes: facts an
agent continuing the task needs to see.

A probe is {"id", "category", "text"}, with category task, constraint, artifact (a file
edited or created), decision, error or next (where the work stands). It is present in a view
when its text occurs in one message of the view, whitespace-normalized and case-insensitive;
a message's text is its content, its tool calls' names and arguments, and the string values
of those arguments when they are JSON. Probes are scored in the final view (what the agent
sends on the transcript's last turn) and in the worst view after a compaction (the one
missing most probes among those the history already held). A probe whose text the agent's
history lacks at that turn (a tool result the OffloadHook moved out at source) is reported
as unavailable and not scored.

Also reported: invalid views (compaction.Validate fails, an assistant tool call has no result
in the view, or a result answers no call), views whose estimate exceeds the window,
compactions per tier (and those that changed the view: the others are Warn records with
nothing to offload), summarizer calls, and the prompt-cache cost as simulate computes it:
the summarizer's calls and tokens from the compaction records, the cache-hit ratio of the
views (cached / input tokens; the cached part of a view is its longest common prefix, in
whole messages, with the previous view followed by its reply) beside the raw history's (the
agent's history after the OffloadHook, sent whole every turn: no compaction, an unbounded
window), cost vs raw (read*cached + write*(input-cached) over all turns, plus the
summarizer's tokens at the fresh price, divided by the raw history's cost; prices from
--price-*) and the raw history's peak in tokens (its estimate at the last turn).

PROBES is a JSON file or a directory of *.json files. A file holds one probe set or an array
of them:

  {"transcript": "session.jsonl", "sha256": "<hex SHA-256 of the transcript file>",
   "about": "optional", "probes": [{"id": "task", "category": "task",
   "text": "Fix the flaky TestEviction", "note": "optional: why it matters"}]}

A set names its transcript by base name. A transcript without a probe set, a transcript whose
SHA-256 differs from its set's, a probe whose text is not in the transcript before its last
turn, malformed JSON, an unknown field or category, an empty text or a repeated id are errors.

Without --json a table is printed, one row per transcript and window: kept/total per
category in the final view, the worst view (kept/total at turn N), invalid views, views over
the window, compactions (Warn/Soft/Full/Emergency), summarizer calls, compactions that
changed the view, the summarizer's input+output tokens, cache hit, raw cache hit, cost vs raw
and raw peak; the probes missing from the final views follow. --json prints one JSON object
per transcript and window: {"transcript", "contextWindow", "windowFractions" (absent with
--windows), "turns", "compactions", "perTier", "viewChanges", "viewChangesPerTier",
"summarizerCalls", "summarizerErrors", "invalidViews", "overWindow", "probes":
{"<category>": {"kept", "total", "missing"}}, "missing", "unavailable", "worst",
"firstInvalid", "cost": {"prices": {"fresh", "cacheRead", "cacheWrite"}, "inputTokens",
"cachedTokens", "cacheHit", "peakTokens", "rawInputTokens", "rawCachedTokens", "rawCacheHit",
"rawPeakTokens", "summarizerCalls", "summarizerInputTokens", "summarizerOutputTokens", "cost",
"rawCost", "costVsRaw"}} (ratios as fractions: 0.83 is 83%).

--summarizer-latency, --turn-interval and --prepare-percent replay with summaries made off the
turn, as simulate does (see compactctl simulate -h): the --json object then has "offTurn":
{"summarizerLatency", "turnInterval", "compactions", "usedPrepared", "extractive", "waited",
"lateMerged", "started", "startedAhead", "startedLate", "used", "wasted", "wastedTokens",
"running", "unused"}, "cost" has "wastedCalls" and "wastedTokens" (already in the summarizer's
tokens), and the table adds the Soft and Full compactions that used a prepared summary,
summarized extractively or waited, and the wasted summaries.

Nothing is written by default (--store ''); the exit status is 0 whatever the scores.`,
		example: `  compactctl eval --probes testdata/probes ../shared/testdata/real/*.jsonl
  compactctl eval --json --window-fraction 0.3 --probes testdata/probes testdata/long-session.jsonl
  compactctl eval --windows 8000,16000,32000 --probes testdata/probes testdata/long-session.jsonl`,
		flags: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			ef := addEngineFlags(fs)
			// A replay must not leave files behind unless asked to: memory by default.
			if f := fs.Lookup("store"); f != nil {
				f.DefValue = ""
				_ = f.Value.Set("") // a string flag accepts any value
			}
			if f := fs.Lookup("context-window"); f != nil {
				f.Usage = "not used by eval (setting it is an error): the windows come from --windows, or --window-fraction and --min-window"
				f.DefValue = "0" // its value never reaches a replay; do not advertise one
			}
			vf := &evalFlags{}
			fs.StringVar(&vf.probes, "probes", "", "probe sets: a JSON `FILE` or a directory of *.json files (required)")
			fs.BoolVar(&vf.json, "json", false, "print one JSON object per transcript and window instead of the table")
			fs.StringVar(&vf.fractions, "window-fraction", defaultWindowFractions, "context windows to replay at, as comma-separated `fractions` (0 < f <= 1) of each transcript's\nestimated tokens (compaction.EstimateTokens of the whole transcript)")
			fs.IntVar(&vf.minWindow, "min-window", defaultMinWindow, "smallest context window in `tokens`: a fraction giving less is raised to it")
			fs.StringVar(&vf.windows, "windows", "", "fixed context windows to replay every transcript at, as comma-separated `tokens` (for example\n8000,16000,32000), instead of --window-fraction and --min-window")
			vf.prices = addPriceFlags(fs)
			vf.offTurn = addOffTurnFlags(fs)
			return func(ctx context.Context, std *stdio, args []string) error {
				return runEval(ctx, std, ef, vf, args)
			}
		},
	}
}

func runEval(ctx context.Context, std *stdio, ef *engineFlags, vf *evalFlags, args []string) error {
	if len(args) == 0 {
		return usageErrorf("missing TRANSCRIPT arguments")
	}
	var errs []error
	ef.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "context-window":
			errs = append(errs, errors.New("--context-window does not apply: the windows come from --windows, or --window-fraction and --min-window"))
		case "window-fraction", "min-window":
			if vf.windows != "" {
				errs = append(errs, fmt.Errorf("--%s does not apply with --windows", f.Name))
			}
		}
	})
	errs = append(errs, vf.prices.check()...)
	errs = append(errs, vf.offTurn.check(ef)...)
	if vf.probes == "" {
		errs = append(errs, errors.New("--probes is required"))
	}
	if vf.minWindow < 1 {
		errs = append(errs, fmt.Errorf("--min-window %d must be at least 1 token", vf.minWindow))
	}
	fractions, err := parseFractions(vf.fractions)
	if err != nil {
		errs = append(errs, err)
	}
	var fixed []int
	if vf.windows != "" {
		if fixed, err = parseWindows(vf.windows); err != nil {
			errs = append(errs, err)
		}
	}
	seen := map[string]string{}
	for _, a := range args {
		switch {
		case a == "" || a == "-":
			errs = append(errs, fmt.Errorf("TRANSCRIPT %q: eval reads transcripts by file name (the probe set names its transcript)", a))
		case seen[filepath.Base(a)] != "":
			errs = append(errs, fmt.Errorf("TRANSCRIPT %s and %s have the same base name: their probe sets cannot be told apart", seen[filepath.Base(a)], a))
		default:
			seen[filepath.Base(a)] = a
		}
	}
	if len(errs) > 0 {
		return &usageError{err: errors.Join(errs...)}
	}
	base, summarizer, err := vf.offTurn.engine(ef)
	if err != nil {
		return err
	}
	sets, err := loadProbeSets(vf.probes)
	if err != nil {
		return err
	}
	// Read and check every input before the first replay: a bad probe file should not cost
	// minutes of replays first.
	inputs := make([]evalInput, 0, len(args))
	for _, path := range args {
		in, err := loadEvalInput(path, sets)
		if err != nil {
			return err
		}
		inputs = append(inputs, in)
	}

	var runs []*evalRun
	out := bufio.NewWriter(std.out)
	defer func() { _ = out.Flush() }() // on errors, show the rows written so far
	for _, in := range inputs {
		windows := evalWindows(compaction.EstimateTokens(in.msgs), fractions, vf.minWindow)
		if fixed != nil {
			windows = fixedWindows(fixed)
		}
		for _, w := range windows {
			run, err := evalOne(ctx, ef, base, summarizer, vf, std.err, in, w)
			if err != nil {
				return err
			}
			runs = append(runs, run)
			if vf.json {
				b, err := json.Marshal(run)
				if err != nil {
					return fmt.Errorf("encode result of %s: %w", in.name, err)
				}
				if _, err := out.Write(append(b, '\n')); err != nil {
					return fmt.Errorf("write result: %w", err)
				}
			}
		}
	}
	if !vf.json {
		if _, err := io.WriteString(out, evalTable(runs, summarizer.Name(), vf, fractions)); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// parseFractions reads --window-fraction.
func parseFractions(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		f, err := strconv.ParseFloat(part, 64)
		if err != nil || math.IsNaN(f) || f <= 0 || f > 1 {
			return nil, fmt.Errorf("--window-fraction %q: %q is not a fraction in (0, 1]", s, part)
		}
		out = append(out, f)
	}
	return out, nil
}

// parseWindows reads --windows: distinct positive token counts.
func parseWindows(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--windows %q: %q is not a number of tokens, at least 1", s, part)
		}
		if seen[n] {
			return nil, fmt.Errorf("--windows %q: %d appears twice", s, n)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}

// fixedWindows are the windows of --windows, which no fraction gave.
func fixedWindows(tokens []int) []evalWindow {
	out := make([]evalWindow, len(tokens))
	for i, t := range tokens {
		out[i] = evalWindow{tokens: t}
	}
	return out
}

// evalWindow is one context window a transcript is replayed at, with the fractions that
// gave it (two fractions raised to --min-window give one window, replayed once; none for a
// window of --windows).
type evalWindow struct {
	tokens    int
	fractions []float64
}

func evalWindows(transcriptTokens int, fractions []float64, minWindow int) []evalWindow {
	var out []evalWindow
next:
	for _, f := range fractions {
		w := max(int(math.Round(f*float64(transcriptTokens))), minWindow)
		for i := range out {
			if out[i].tokens == w {
				out[i].fractions = append(out[i].fractions, f)
				continue next
			}
		}
		out = append(out, evalWindow{tokens: w, fractions: []float64{f}})
	}
	return out
}

// loadProbeSets reads a probe file, or every *.json file of a directory, and returns the sets
// by transcript base name.
func loadProbeSets(path string) (map[string]*probeSet, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("probes: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("probes: %w", err)
		}
		files = files[:0]
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("probes: no *.json file in directory %s", path)
		}
	}
	sets := map[string]*probeSet{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("probes: %w", err)
		}
		list, err := decodeProbeSets(data)
		if err != nil {
			return nil, fmt.Errorf("probes %s: %w", f, err)
		}
		for _, s := range list {
			if prev, dup := sets[s.Transcript]; dup {
				return nil, fmt.Errorf("probes %s: a second probe set for %s (the first is in %s)", f, s.Transcript, prev.file)
			}
			s.file = f
			sets[s.Transcript] = s
		}
	}
	return sets, nil
}

// decodeProbeSets decodes one probe set or an array of them, strictly, and checks them.
func decodeProbeSets(data []byte) ([]*probeSet, error) {
	data = bytes.TrimSpace(data)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a misspelt "categroy" must not pass unnoticed
	var sets []*probeSet
	var err error
	if len(data) > 0 && data[0] == '[' {
		err = dec.Decode(&sets)
	} else {
		var s probeSet
		err = dec.Decode(&s)
		sets = []*probeSet{&s}
	}
	if err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("malformed JSON: data after the probe set")
	}
	if len(sets) == 0 {
		return nil, errors.New("no probe set in the file")
	}
	for i, s := range sets {
		if s == nil {
			return nil, fmt.Errorf("probe set %d is null", i+1)
		}
		if err := s.check(); err != nil {
			if s.Transcript != "" {
				return nil, fmt.Errorf("probe set for %s: %w", s.Transcript, err)
			}
			return nil, fmt.Errorf("probe set %d: %w", i+1, err)
		}
	}
	return sets, nil
}

// check validates a decoded set and normalizes its probe texts; it reports every problem.
func (s *probeSet) check() error {
	var errs []error
	switch {
	case s.Transcript == "":
		errs = append(errs, errors.New(`"transcript" (the transcript's base name) is missing`))
	case filepath.Base(s.Transcript) != s.Transcript || s.Transcript == "." || s.Transcript == "..":
		errs = append(errs, fmt.Errorf(`"transcript" %q must be a base name, without a directory`, s.Transcript))
	}
	if b, err := hex.DecodeString(s.SHA256); err != nil || len(b) != sha256.Size {
		errs = append(errs, fmt.Errorf(`"sha256" %q must be the transcript's SHA-256, 64 hex digits`, s.SHA256))
	}
	s.SHA256 = strings.ToLower(s.SHA256)
	if len(s.Probes) == 0 {
		errs = append(errs, errors.New(`"probes" is empty`))
	}
	ids := map[string]bool{}
	for i := range s.Probes {
		p := &s.Probes[i]
		name := fmt.Sprintf("probe %d (%q)", i+1, p.ID)
		if strings.TrimSpace(p.ID) == "" {
			errs = append(errs, fmt.Errorf("probe %d: empty id", i+1))
		} else if ids[p.ID] {
			errs = append(errs, fmt.Errorf("%s: id used twice", name))
		}
		ids[p.ID] = true
		if !validCategory(p.Category) {
			errs = append(errs, fmt.Errorf("%s: unknown category %q (want one of %s)", name, p.Category, strings.Join(probeCategories(), ", ")))
		}
		p.norm = normalizeText(p.Text)
		if p.norm == "" {
			errs = append(errs, fmt.Errorf("%s: empty text", name))
		}
	}
	return errors.Join(errs...)
}

// normalizeText lowercases s and collapses every run of white space into one space, trimmed:
// the form probes and views are compared in.
func normalizeText(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// messageText is the normalized text of m a probe is searched in: content, content parts,
// tool-call names and arguments, and the string values of JSON arguments (so a probe can
// quote code as the agent wrote it, not as JSON escapes it).
func messageText(m *compaction.Message) string {
	var b strings.Builder
	b.WriteString(m.Content)
	if len(m.ContentParts) > 0 {
		b.WriteByte('\n')
		b.Write(m.ContentParts)
		for _, s := range jsonStrings(m.ContentParts) {
			b.WriteByte('\n')
			b.WriteString(s)
		}
	}
	for _, tc := range m.ToolCalls {
		b.WriteByte('\n')
		b.WriteString(tc.Function.Name)
		b.WriteByte('\n')
		b.WriteString(tc.Function.Arguments)
		for _, s := range jsonStrings([]byte(tc.Function.Arguments)) {
			b.WriteByte('\n')
			b.WriteString(s)
		}
	}
	return normalizeText(b.String())
}

// jsonStrings returns the string values in a JSON document, depth first; nothing when it is
// not JSON.
func jsonStrings(data []byte) []string {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			out = append(out, t)
		case []any:
			for _, x := range t {
				walk(x)
			}
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(t[k])
			}
		}
	}
	walk(v)
	return out
}

// checkView reports why a view would be refused by a provider, or nil.
func checkView(view []compaction.Message) error {
	if err := compaction.Validate(view); err != nil {
		return err // orphaned results included
	}
	// Validate accepts a call without a result (the agent may still be running it); a view
	// sent to OpenAI or Anthropic may not hold one.
	answered := map[string]bool{}
	for i := range view {
		if view[i].Role == compaction.RoleTool {
			answered[view[i].ToolCallID] = true
		}
	}
	for i := range view {
		for _, tc := range view[i].ToolCalls {
			if !answered[tc.ID] {
				return fmt.Errorf("message %d: tool call %q has no result in the view", i, tc.ID)
			}
		}
	}
	return nil
}

// evalInput is one transcript, read and matched with its probe set.
type evalInput struct {
	path, name string
	msgs       []compaction.Message
	set        *probeSet
}

func loadEvalInput(path string, sets map[string]*probeSet) (evalInput, error) {
	name := filepath.Base(path)
	set, ok := sets[name]
	if !ok {
		return evalInput{}, fmt.Errorf("transcript %s: no probe set names it (probe sets: %s)", path, strings.Join(sortedKeys(sets), ", "))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return evalInput{}, fmt.Errorf("read transcript: %w", err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != set.SHA256 {
		return evalInput{}, fmt.Errorf("transcript %s has SHA-256 %x, but its probe set (%s) was written for %s: the transcript changed, check the probes and update \"sha256\"",
			path, sum, set.file, set.SHA256)
	}
	msgs, err := compaction.DecodeTranscript(bytes.NewReader(data), compaction.DecodeOptions{})
	if err != nil {
		return evalInput{}, fmt.Errorf("transcript %s: %w", path, err)
	}
	last := lastTurnIndex(msgs)
	if last < 0 {
		return evalInput{}, fmt.Errorf("transcript %s has no turn to replay (no assistant message after a non-system message)", path)
	}
	// A probe the history never shows before the last turn cannot be kept by any view: it is
	// a mistake in the probe file, not a loss.
	texts := make([]string, last)
	for i := range texts {
		texts[i] = messageText(&msgs[i])
	}
	var absent []string
	for _, p := range set.Probes {
		if !anyContains(texts, p.norm) {
			absent = append(absent, p.ID)
		}
	}
	if len(absent) > 0 {
		return evalInput{}, fmt.Errorf("probe set for %s (%s): not in the transcript before its last turn (message %d): %s",
			name, set.file, last, strings.Join(absent, ", "))
	}
	return evalInput{path: path, name: name, msgs: msgs, set: set}, nil
}

// lastTurnIndex is the index of the assistant message of the last turn a replay runs (an
// assistant message after at least one non-system message), or -1.
func lastTurnIndex(msgs []compaction.Message) int {
	last, nonSystem := -1, 0
	for i := range msgs {
		if msgs[i].Role == compaction.RoleAssistant && nonSystem > 0 {
			last = i
		}
		if msgs[i].Role != compaction.RoleSystem {
			nonSystem++
		}
	}
	return last
}

func anyContains(texts []string, norm string) bool {
	for _, t := range texts {
		if strings.Contains(t, norm) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// categoryScore is kept/total of one probe category in one view.
type categoryScore struct {
	Kept    int      `json:"kept"`
	Total   int      `json:"total"`
	Missing []string `json:"missing,omitempty"` // ids, in probe-file order
}

// worstView is the compacted view that misses the most probes.
type worstView struct {
	Turn    int      `json:"turn"`
	Kept    int      `json:"kept"`
	Total   int      `json:"total"`
	Missing []string `json:"missing"`
}

// evalRun is the result of one transcript at one window; it is also the --json object.
type evalRun struct {
	Transcript       string                   `json:"transcript"`
	ContextWindow    int                      `json:"contextWindow"`
	WindowFractions  []float64                `json:"windowFractions,omitempty"`
	Turns            int                      `json:"turns"`
	Compactions      int                      `json:"compactions"`
	PerTier          map[string]int           `json:"perTier"`
	ViewChanges      int                      `json:"viewChanges"` // compactions that changed the view
	ViewChangesTier  map[string]int           `json:"viewChangesPerTier"`
	SummarizerCalls  int64                    `json:"summarizerCalls"`
	SummarizerErrors int64                    `json:"summarizerErrors"`
	InvalidViews     int                      `json:"invalidViews"`
	OverWindow       int                      `json:"overWindow"`
	Probes           map[string]categoryScore `json:"probes"` // final view
	Missing          []string                 `json:"missing"`
	// Recoverable are the missing probes one search of the session's archive finds (the
	// compaction API's history/search with the probe's words); ArchiveBytes is the archive's
	// size, HistoryBytes the agent's history at the last turn (after the OffloadHook), both
	// as JSON.
	Recoverable  []string   `json:"recoverable"`
	ArchiveBytes int64      `json:"archiveBytes"`
	HistoryBytes int64      `json:"historyBytes"`
	Unavailable  []string   `json:"unavailable,omitempty"`
	Worst        *worstView `json:"worst,omitempty"`
	FirstInvalid string     `json:"firstInvalid,omitempty"`
	Cost         costTotals `json:"cost"`
	// OffTurn: the summaries made off the turn, with --summarizer-latency only.
	OffTurn *offTurnStats `json:"offTurn,omitempty"`

	probes []probe // for the table's category of a missing id
}

// evalOne replays one transcript at one window and scores its views.
func evalOne(ctx context.Context, ef *engineFlags, base compaction.Config, summarizer compaction.Summarizer, vf *evalFlags, logTo io.Writer, in evalInput, w evalWindow) (*evalRun, error) {
	cfg := base
	cfg.ContextWindow = w.tokens
	store, _, err := ef.openStore(logTo) // memory: a new store per replay
	if err != nil {
		return nil, err
	}
	counting := newCountingSummarizer(summarizer)
	bg := vf.offTurn.background() // one per replay: its simulated time starts at the first turn
	sessionID := evalSessionID(ef.sessionID, in.name, w.tokens)
	c, err := compaction.NewProgressiveCompactor(cfg,
		compactorOptions(freshState{store}, counting, sessionID, ef.logger(logTo), bg)...)
	if err != nil {
		return nil, fmt.Errorf("create compactor: %w", err)
	}
	sc := newViewScorer(in.set.Probes, w.tokens)
	hook := &hookOffloader{off: c.Offloader(), threshold: ef.hookThreshold}
	_, stats, err := replay(ctx, c, hook, in.msgs, *vf.prices, bg, sc.turn)
	if err != nil {
		return nil, fmt.Errorf("%s at %d tokens: %w", in.name, w.tokens, err)
	}
	run := &evalRun{
		Transcript: in.name, ContextWindow: w.tokens, WindowFractions: w.fractions,
		Turns: stats.turns, Compactions: stats.compactions(), PerTier: map[string]int{},
		SummarizerCalls: counting.calls.Load(), SummarizerErrors: counting.failures.Load(),
		InvalidViews: sc.invalid, OverWindow: sc.over, FirstInvalid: sc.firstInvalid,
		Probes: map[string]categoryScore{}, Missing: []string{}, probes: in.set.Probes,
		ViewChanges: stats.changedViews(), ViewChangesTier: map[string]int{}, Cost: stats.cost, OffTurn: stats.offTurn,
		Recoverable: []string{}, HistoryBytes: sc.historyBytes,
	}
	for t := compaction.TierWarn; t <= compaction.TierEmergency; t++ {
		run.PerTier[t.String()] = stats.perTier[t]
		run.ViewChangesTier[t.String()] = stats.changedPerTier[t]
	}
	for _, cat := range probeCategories() {
		run.Probes[cat] = categoryScore{}
	}
	for i, p := range in.set.Probes {
		if !sc.final.applicable[i] {
			run.Unavailable = append(run.Unavailable, p.ID)
			continue
		}
		s := run.Probes[p.Category]
		s.Total++
		if sc.final.present[i] {
			s.Kept++
		} else {
			s.Missing = append(s.Missing, p.ID)
			run.Missing = append(run.Missing, p.ID)
		}
		run.Probes[p.Category] = s
	}
	if err := run.recover(ctx, store, sessionID, in.set.Probes); err != nil {
		return nil, fmt.Errorf("%s at %d tokens: %w", in.name, w.tokens, err)
	}
	if sc.worst != nil {
		ws := &worstView{Turn: sc.worst.turn, Missing: []string{}}
		for i, p := range in.set.Probes {
			if !sc.worst.applicable[i] {
				continue
			}
			ws.Total++
			if sc.worst.present[i] {
				ws.Kept++
			} else {
				ws.Missing = append(ws.Missing, p.ID)
			}
		}
		run.Worst = ws
	}
	return run, nil
}

// recover searches the session's archive, once per probe missing from the final view, as a
// model would through the history/search route: the probe's words, in order, any spacing.
// It also measures the archive.
func (r *evalRun) recover(ctx context.Context, store compaction.Store, sessionID string, probes []probe) error {
	archive, ok := store.(compaction.ArchiveStore)
	if !ok {
		return nil // a store that keeps no archive: nothing is recoverable
	}
	res, err := compaction.ScanArchive(ctx, archive, sessionID, compaction.HistoryQuery{}, func(*compaction.ArchivedMessage) error { return nil })
	if err != nil {
		return fmt.Errorf("read the archive: %w", err)
	}
	r.ArchiveBytes = res.ScannedBytes
	text := map[string]string{}
	for _, p := range probes {
		text[p.ID] = p.Text
	}
	for _, id := range r.Missing {
		words := strings.Fields(text[id])
		for i, w := range words {
			words[i] = regexp.QuoteMeta(w)
		}
		m, err := compaction.NewHistoryMatcher(strings.Join(words, `\s+`), true)
		if err != nil {
			return fmt.Errorf("probe %s: %w", id, err)
		}
		found := false
		if _, err := compaction.ScanArchive(ctx, archive, sessionID, compaction.HistoryQuery{Match: m}, func(*compaction.ArchivedMessage) error {
			found = true
			return compaction.ErrStopListing
		}); err != nil {
			return fmt.Errorf("search the archive for probe %s: %w", id, err)
		}
		if found {
			r.Recoverable = append(r.Recoverable, id)
		}
	}
	return nil
}

// evalSessionID names the session of one replay: distinct per transcript and window, so a
// filesystem --store keeps their records apart.
func evalSessionID(prefix, transcript string, window int) string {
	var b strings.Builder
	for _, r := range strings.TrimSuffix(transcript, filepath.Ext(transcript)) {
		if r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_' || r == '.') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	id, suffix := prefix+"-"+b.String(), fmt.Sprintf("-w%d", window)
	if len(id)+len(suffix) > compaction.MaxSessionIDLength { // ASCII only: any cut is safe
		id = id[:compaction.MaxSessionIDLength-len(suffix)]
	}
	return id + suffix
}

// viewScore is which probes one view holds, and which the history held at that turn.
type viewScore struct {
	turn       int
	present    []bool
	applicable []bool
}

func (v *viewScore) missing() (n int) {
	for i := range v.present {
		if v.applicable[i] && !v.present[i] {
			n++
		}
	}
	return n
}

// viewScorer scores every view of one replay as it is produced.
type viewScorer struct {
	probes  []probe
	window  int
	seenAt  []int // first history message holding each probe, -1 while none does
	scanned int   // history messages scanned so far

	compacted    bool
	historyBytes int64 // the history's size as JSON, at the last turn
	invalid      int
	over         int
	firstInvalid string
	final        viewScore
	worst        *viewScore
}

func newViewScorer(probes []probe, window int) *viewScorer {
	s := &viewScorer{probes: probes, window: window, seenAt: make([]int, len(probes))}
	for i := range s.seenAt {
		s.seenAt[i] = -1
	}
	return s
}

func (s *viewScorer) turn(t replayTurn) error {
	// The history only grows: scan the messages added since the last turn.
	for ; s.scanned < len(t.history); s.scanned++ {
		if raw, err := json.Marshal(&t.history[s.scanned]); err == nil {
			s.historyBytes += int64(len(raw)) + 1 // a JSONL line
		}
		text := messageText(&t.history[s.scanned])
		for i := range s.probes {
			if s.seenAt[i] < 0 && strings.Contains(text, s.probes[i].norm) {
				s.seenAt[i] = s.scanned
			}
		}
	}
	if err := checkView(t.view); err != nil {
		s.invalid++
		if s.firstInvalid == "" {
			s.firstInvalid = fmt.Sprintf("turn %d (%s): %v", t.result.Turn, t.record.Tier, err)
		}
	}
	if compaction.EstimateTokens(t.view) > s.window {
		s.over++
	}
	texts := make([]string, len(t.view))
	for i := range t.view {
		texts[i] = messageText(&t.view[i])
	}
	v := viewScore{turn: t.result.Turn, present: make([]bool, len(s.probes)), applicable: make([]bool, len(s.probes))}
	for i := range s.probes {
		v.applicable[i] = s.seenAt[i] >= 0
		v.present[i] = anyContains(texts, s.probes[i].norm)
	}
	s.final = v
	if t.record.Tier != compaction.TierNone {
		s.compacted = true
	}
	// "After a compaction": every view from the first compaction on is derived, not raw.
	if s.compacted && (s.worst == nil || v.missing() > s.worst.missing()) {
		s.worst = &v
	}
	return nil
}

// evalTable renders the runs as the human-readable report.
func evalTable(runs []*evalRun, summarizer string, vf *evalFlags, fractions []float64) string {
	var b strings.Builder
	if vf.windows != "" {
		fmt.Fprintf(&b, "Probes kept in the final view (kept/total), summarizer %s, windows of %s tokens\n\n", summarizer, vf.windows)
	} else {
		fr := make([]string, len(fractions))
		for i, f := range fractions {
			fr[i] = strconv.FormatFloat(f, 'f', -1, 64)
		}
		fmt.Fprintf(&b, "Probes kept in the final view (kept/total), summarizer %s, windows %s of each transcript's estimate (at least %d tokens)\n\n",
			summarizer, strings.Join(fr, ","), vf.minWindow)
	}
	// tw writes into a strings.Builder: its writes cannot fail.
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprint(tw, "transcript\twindow\tturns")
	for _, c := range probeCategories() {
		_, _ = fmt.Fprintf(tw, "\t%s", c)
	}
	_, _ = fmt.Fprint(tw, "\trecoverable\tarchive/raw\tworst view\tinvalid\tover\tcompactions W/S/F/E\tsummarizer calls")
	_, _ = fmt.Fprint(tw, "\tchanged W/S/F/E\tsummarizer tokens in+out\tcache hit\traw hit\tcost vs raw\traw peak")
	offTurn := vf.offTurn != nil && vf.offTurn.enabled()
	if offTurn {
		_, _ = fmt.Fprint(tw, "\tprepared/extractive/waited\twasted")
	}
	_, _ = fmt.Fprint(tw, "\n")
	totals := map[string]categoryScore{}
	var invalid, over, recovered, missed int
	for _, r := range runs {
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d", r.Transcript, r.ContextWindow, r.Turns)
		for _, c := range probeCategories() {
			s := r.Probes[c]
			_, _ = fmt.Fprintf(tw, "\t%s", ratio(s))
			t := totals[c]
			t.Kept += s.Kept
			t.Total += s.Total
			totals[c] = t
		}
		_, _ = fmt.Fprintf(tw, "\t%d/%d", len(r.Recoverable), len(r.Missing))
		recovered += len(r.Recoverable)
		missed += len(r.Missing)
		if r.HistoryBytes > 0 {
			_, _ = fmt.Fprintf(tw, "\t%.2f", float64(r.ArchiveBytes)/float64(r.HistoryBytes))
		} else {
			_, _ = fmt.Fprint(tw, "\t-")
		}
		worst := "-"
		if r.Worst != nil {
			worst = fmt.Sprintf("%d/%d @%d", r.Worst.Kept, r.Worst.Total, r.Worst.Turn)
		}
		_, _ = fmt.Fprintf(tw, "\t%s\t%d\t%d\t%d (%d/%d/%d/%d)\t%d", worst, r.InvalidViews, r.OverWindow, r.Compactions,
			r.PerTier["Warn"], r.PerTier["Soft"], r.PerTier["Full"], r.PerTier["Emergency"], r.SummarizerCalls)
		if r.SummarizerErrors > 0 {
			_, _ = fmt.Fprintf(tw, " (%d failed)", r.SummarizerErrors)
		}
		vc, c := r.ViewChangesTier, &r.Cost
		_, _ = fmt.Fprintf(tw, "\t%d (%d/%d/%d/%d)\t%s+%s", r.ViewChanges, vc["Warn"], vc["Soft"], vc["Full"], vc["Emergency"],
			humanCount(c.SummarizerInputTokens), humanCount(c.SummarizerOutputTokens))
		if c.SummarizerCalls != int(r.SummarizerCalls) {
			_, _ = fmt.Fprintf(tw, " (%d calls recorded)", c.SummarizerCalls)
		}
		if c.InputTokens > 0 {
			_, _ = fmt.Fprintf(tw, "\t%.1f%%\t%.1f%%\t%.2f", 100*c.CacheHit, 100*c.RawCacheHit, c.CostVsRaw)
		} else {
			_, _ = fmt.Fprint(tw, "\t-\t-\t-")
		}
		_, _ = fmt.Fprintf(tw, "\t%d", c.RawPeakTokens)
		if o := r.OffTurn; offTurn && o != nil {
			_, _ = fmt.Fprintf(tw, "\t%d/%d/%d\t%d (%s tokens)", o.UsedPrepared, o.Extractive, o.Waited, o.Wasted, humanCount(o.WastedTokens))
		}
		_, _ = fmt.Fprint(tw, "\n")
		invalid += r.InvalidViews
		over += r.OverWindow
	}
	_, _ = fmt.Fprint(tw, "total\t\t")
	for _, c := range probeCategories() {
		_, _ = fmt.Fprintf(tw, "\t%s", ratio(totals[c]))
	}
	_, _ = fmt.Fprintf(tw, "\t%d/%d\t\t\t%d\t%d\t\t\t\t\t\t\t\t\n", recovered, missed, invalid, over)
	_ = tw.Flush() // writes to a strings.Builder, which cannot fail
	if p := vf.prices; p != nil {
		fmt.Fprintf(&b, "\nCost per token: cache read %g, cache write %g, summarizer input and output %g; cost vs raw is the cost of the views\n"+
			"and the summarizer over that of sending the whole raw history (after the OffloadHook) every turn; raw peak is its tokens at the last turn.\n",
			p.CacheRead, p.CacheWrite, p.Fresh)
	}
	if offTurn {
		fmt.Fprintf(&b, "\nSummarizer latency %s, a turn every %s: of the Soft and Full compactions that summarized, prepared used a summary\n"+
			"prepared ahead, extractive summarized extractively at once (none was ready), waited waited for the summarizer;\n"+
			"wasted are the summaries made off the turn that were discarded (in the summarizer tokens and the cost).\n",
			vf.offTurn.latency, vf.offTurn.interval)
	}

	var missing, unavailable, bad []string
	for _, r := range runs {
		at := fmt.Sprintf("  %s @%d: ", r.Transcript, r.ContextWindow)
		if len(r.Missing) > 0 {
			missing = append(missing, at+r.describeMissing())
		}
		if len(r.Unavailable) > 0 {
			unavailable = append(unavailable, at+r.describe(r.Unavailable))
		}
		if r.FirstInvalid != "" {
			bad = append(bad, fmt.Sprintf("  %s @%d: %d invalid, first at %s", r.Transcript, r.ContextWindow, r.InvalidViews, r.FirstInvalid))
		}
	}
	if len(missing) > 0 {
		b.WriteString("\nMissing from the final view (recoverable: found by one search of the archive with the probe's words):\n" + strings.Join(missing, "\n") + "\n")
	} else {
		b.WriteString("\nEvery probe is in every final view.\n")
	}
	if len(unavailable) > 0 {
		b.WriteString("\nNot scored (the agent's history held them only in tool results offloaded at source, see --hook-threshold):\n" + strings.Join(unavailable, "\n") + "\n")
	}
	if len(bad) > 0 {
		b.WriteString("\nInvalid views:\n" + strings.Join(bad, "\n") + "\n")
	}
	return b.String()
}

// describe lists probe ids with their categories: "task (task), edit-models (artifact)".
func (r *evalRun) describe(ids []string) string {
	cat := map[string]string{}
	for _, p := range r.probes {
		cat[p.ID] = p.Category
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s (%s)", id, cat[id])
	}
	return strings.Join(parts, ", ")
}

// describeMissing lists the missing probes, each marked recoverable or not.
func (r *evalRun) describeMissing() string {
	parts := make([]string, len(r.Missing))
	for i, id := range r.Missing {
		parts[i] = r.describe([]string{id})
		if slices.Contains(r.Recoverable, id) {
			parts[i] += " recoverable"
		} else {
			parts[i] += " NOT recoverable"
		}
	}
	return strings.Join(parts, ", ")
}

func ratio(s categoryScore) string {
	if s.Total == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", s.Kept, s.Total)
}
