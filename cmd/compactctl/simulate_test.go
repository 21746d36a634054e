package main

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

// notificationRE is the first line of the spec's notification (5.4).
var notificationRE = regexp.MustCompile(`⚡ Context compressed \[(Warn|Soft|Full|Emergency)\] [0-9.]+K?->[0-9.]+K? tokens \([0-9]+% compression ratio\)`)

// detailRE is its second line.
var detailRE = regexp.MustCompile(`^ +[0-9]+ anchors \| [0-9]+ offload\([0-9.]+[KM]B\) \| [0-9]+ summarized \| tail: [0-9]+ preserved`)

var turnPrefixRE = regexp.MustCompile(`^\[turn ([0-9]+)\] `)

var compactionsRE = regexp.MustCompile(`compactions: +([0-9]+) \(Warn ([0-9]+), Soft ([0-9]+), Full ([0-9]+), Emergency ([0-9]+)\)`)

// lastTurnWindow returns the window that puts the history before the last assistant
// message at the given usage, so a replay climbs through every tier.
func lastTurnWindow(msgs []compaction.Message, ratio float64) int {
	last := 0
	for i := range msgs {
		if msgs[i].Role == compaction.RoleAssistant {
			last = i
		}
	}
	return max(1, windowFor(compaction.EstimateTokens(msgs[:last]), ratio))
}

// countTurns is the number of assistant messages preceded by a non-system message.
func countTurns(msgs []compaction.Message) int {
	n, seen := 0, false
	for _, m := range msgs {
		if m.Role == compaction.RoleAssistant && seen {
			n++
		}
		if m.Role != compaction.RoleSystem {
			seen = true
		}
	}
	return n
}

// simulationOutput is the parsed text output of simulate.
type simulationOutput struct {
	perTier map[string]int // notifications per tier
	turns   []int          // turn of each notification
	summary string
}

// parseSimulation checks every notification line pair and returns what it saw.
func parseSimulation(t *testing.T, stdout string) simulationOutput {
	t.Helper()
	out := simulationOutput{perTier: map[string]int{}}
	lines := strings.Split(stdout, "\n")
	i := 0
	for ; i < len(lines) && !strings.HasPrefix(lines[i], "Summary of "); i++ {
		m := turnPrefixRE.FindStringSubmatch(lines[i])
		if m == nil {
			t.Fatalf("line %d is neither a notification nor the summary: %q", i+1, lines[i])
		}
		n := notificationRE.FindStringSubmatch(lines[i])
		if n == nil {
			t.Fatalf("line %d is not a notification in the spec's format: %q", i+1, lines[i])
		}
		if i+1 >= len(lines) || !detailRE.MatchString(lines[i+1]) {
			t.Fatalf("notification on line %d lacks its detail line: %q", i+1, lines[min(i+1, len(lines)-1)])
		}
		turn, _ := strconv.Atoi(m[1])
		out.turns = append(out.turns, turn)
		out.perTier[n[1]]++
		i++
	}
	if i == len(lines) {
		t.Fatalf("no summary in the output:\n%s", clip(stdout, 3000))
	}
	out.summary = strings.Join(lines[i:], "\n")
	return out
}

func TestSimulateClimbsThroughEveryTier(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	msgs := genTranscript(genOptions{rounds: 40, bigResult: 6000})
	path := writeTranscript(t, dir, "climb.jsonl", msgs)
	store := filepath.Join(dir, "store")
	plot := filepath.Join(dir, "usage.svg")
	window := strconv.Itoa(lastTurnWindow(msgs, 0.99))

	// --raw-history: the seed spec's behaviour, where usage only climbs.
	r := runCLI(t, "", "simulate", "--raw-history", "--context-window", window, "--store", store, "--plot", plot, path)
	if r.code != exitOK {
		t.Fatalf("simulate: %v", r)
	}
	out := parseSimulation(t, r.stdout)
	for _, tier := range []string{"Warn", "Soft", "Full", "Emergency"} {
		if out.perTier[tier] == 0 {
			t.Errorf("no %s compaction in a replay that climbs to 99%%:\n%s", tier, clip(r.stdout, 3000))
		}
	}
	for i := 1; i < len(out.turns); i++ {
		if out.turns[i] <= out.turns[i-1] {
			t.Errorf("turns out of order: %v", out.turns)
		}
	}
	// The summary agrees with the notifications.
	turns := countTurns(msgs)
	if !strings.Contains(out.summary, strconv.Itoa(turns)+" turns") {
		t.Errorf("summary does not report %d turns:\n%s", turns, out.summary)
	}
	m := compactionsRE.FindStringSubmatch(out.summary)
	if m == nil {
		t.Fatalf("summary lacks the compactions per tier:\n%s", out.summary)
	}
	total := 0
	for i, tier := range []string{"Warn", "Soft", "Full", "Emergency"} {
		if n, _ := strconv.Atoi(m[i+2]); n != out.perTier[tier] {
			t.Errorf("summary counts %d %s compactions, the notifications %d", n, tier, out.perTier[tier])
		}
		total += out.perTier[tier]
	}
	if m[1] != strconv.Itoa(total) {
		t.Errorf("summary total %s, want %d", m[1], total)
	}
	for _, want := range []string{"peak usage:", "% at turn", "tokens saved:", "offloads:         1 tool results", "summarizer:", "0 errors", "store:"} {
		if !strings.Contains(out.summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, out.summary)
		}
	}
	// Every compaction was recorded in the trail.
	if n := countLines(t, filepath.Join(store, ".harness9", "compaction_records", defaultSessionID+".jsonl")); n != total {
		t.Errorf("trail has %d records, want %d", n, total)
	}
	checkSVG(t, plot, "climb.jsonl")
}

// checkSVG parses the plot as XML and checks it is a standalone SVG with the threshold
// labels, the title and one marker per compaction.
func checkSVG(t *testing.T, path, name string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read plot: %v", err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(data)))
	var root xml.StartElement
	elements := map[string]int{}
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("plot is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root.Name.Local == "" {
				root = tok
			}
			elements[tok.Name.Local]++
		case xml.CharData:
			text.Write(tok)
		}
	}
	if root.Name.Local != "svg" || root.Name.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root element is %v, want svg in the SVG namespace", root.Name)
	}
	for _, label := range []string{"Warn", "Soft", "Full", "Emergency", name, "Turn", "Context usage"} {
		if !strings.Contains(text.String(), label) {
			t.Errorf("plot text lacks %q", label)
		}
	}
	for _, el := range []string{"title", "polyline", "circle", "line", "text"} {
		if elements[el] == 0 {
			t.Errorf("plot has no <%s>", el)
		}
	}
}

func TestSimulateJSONSeries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	msgs := genTranscript(genOptions{rounds: 30, bigResult: 6000})
	path := writeTranscript(t, dir, "series.jsonl", msgs)
	window := lastTurnWindow(msgs, 0.99)
	r := runCLI(t, "", "simulate", "--json", "--raw-history", "--context-window", strconv.Itoa(window), "--store", "", path)
	if r.code != exitOK {
		t.Fatalf("simulate --json: %v", r)
	}
	cfg := compaction.DefaultConfig(window)
	var series []turnResult
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		var tr turnResult
		if err := dec.Decode(&tr); err != nil {
			t.Fatalf("line %d is not a turn: %v: %q", len(series)+1, err, sc.Text())
		}
		series = append(series, tr)
	}
	if len(series) != countTurns(msgs) {
		t.Fatalf("%d turns in the series, want %d", len(series), countTurns(msgs))
	}
	for i, tr := range series {
		if tr.Turn != i+1 || msgs[tr.Index].Role != compaction.RoleAssistant {
			t.Errorf("turn %d: number %d, index %d (%s)", i+1, tr.Turn, tr.Index, msgs[tr.Index].Role)
		}
		if want := compaction.EstimateTokens(msgs[:tr.Index]); tr.TokensBefore != want {
			t.Errorf("turn %d: tokensBefore %d, want the estimate of the history %d", tr.Turn, tr.TokensBefore, want)
		}
		// A Soft compaction that cannot reach the target is done as Full in the same turn.
		if want := cfg.DetermineTier(tr.TokensBefore); tr.Tier != want && (want != compaction.TierSoft || tr.Tier != compaction.TierFull) {
			t.Errorf("turn %d: tier %s, want %s", tr.Turn, tr.Tier, want)
		}
		if tr.Tier == compaction.TierNone && tr.TokensAfter != tr.TokensBefore {
			t.Errorf("turn %d: None changed the tokens %d -> %d", tr.Turn, tr.TokensBefore, tr.TokensAfter)
		}
		if tr.Tier >= compaction.TierSoft && tr.TokensAfter >= tr.TokensBefore {
			t.Errorf("turn %d: %s did not shrink the context (%d -> %d)", tr.Turn, tr.Tier, tr.TokensBefore, tr.TokensAfter)
		}
		if d := tr.UsageBefore - float64(tr.TokensBefore)/float64(window); d > 0.0001 || d < -0.0001 {
			t.Errorf("turn %d: usageBefore %v for %d tokens", tr.Turn, tr.UsageBefore, tr.TokensBefore)
		}
		checkTurnCost(t, msgs, series, i)
	}
	if !strings.Contains(r.stderr, "Summary of series.jsonl") {
		t.Errorf("--json: the summary is not on stderr:\n%s", r.stderr)
	}
}

// checkTurnCost checks the cost figures of series[i], a turn of a replay of msgs whose
// history is the transcript itself (no tool result long enough for the OffloadHook).
func checkTurnCost(t *testing.T, msgs []compaction.Message, series []turnResult, i int) {
	t.Helper()
	tr := series[i]
	if tr.InputTokens != tr.TokensAfter || tr.CachedTokens < 0 || tr.CachedTokens > tr.InputTokens {
		t.Errorf("turn %d: input %d (tokens after %d), cached %d", tr.Turn, tr.InputTokens, tr.TokensAfter, tr.CachedTokens)
	}
	if want := compaction.EstimateTokens(msgs[:tr.Index]); tr.RawTokens != want {
		t.Errorf("turn %d: raw tokens %d, want the history's %d", tr.Turn, tr.RawTokens, want)
	}
	// The raw history's cache holds the previous turn's history and its reply.
	want := 0
	if i > 0 {
		want = compaction.EstimateTokens(msgs[:series[i-1].Index+1])
	}
	if tr.RawCachedTokens != want {
		t.Errorf("turn %d: raw cached %d, want %d", tr.Turn, tr.RawCachedTokens, want)
	}
	// Two turns in a row that send the history as it is are cached like the raw history.
	if i > 0 && series[i-1].Tier == compaction.TierNone && tr.Tier == compaction.TierNone && series[i-1].TokensAfter == series[i-1].RawTokens &&
		tr.CachedTokens != tr.RawCachedTokens {
		t.Errorf("turn %d: uncompacted view cached %d, the raw history %d", tr.Turn, tr.CachedTokens, tr.RawCachedTokens)
	}
	if i == 0 && tr.CachedTokens != 0 {
		t.Errorf("turn 1: %d tokens cached before any request", tr.CachedTokens)
	}
	if (tr.SummarizerCalls == 0) != (tr.SummarizerInputTokens == 0 && tr.SummarizerOutputTokens == 0) {
		t.Errorf("turn %d: %d summarizer calls with %d+%d tokens", tr.Turn, tr.SummarizerCalls, tr.SummarizerInputTokens, tr.SummarizerOutputTokens)
	}
	if tr.ChangedView && tr.Tier == compaction.TierNone {
		t.Errorf("turn %d: None changed the view", tr.Turn)
	}
	cost := 0.1*float64(tr.CachedTokens) + 1.25*float64(tr.InputTokens-tr.CachedTokens) + float64(tr.SummarizerInputTokens+tr.SummarizerOutputTokens)
	raw := 0.1*float64(tr.RawCachedTokens) + 1.25*float64(tr.RawTokens-tr.RawCachedTokens)
	if math.Abs(tr.Cost-cost) > 0.0001 || math.Abs(tr.RawCost-raw) > 0.0001 {
		t.Errorf("turn %d: cost %v and raw cost %v, want %v and %v", tr.Turn, tr.Cost, tr.RawCost, cost, raw)
	}
}

var (
	promptCacheRE = regexp.MustCompile(`prompt cache: +([0-9.]+)% of [0-9.]+[KM]? input tokens cached, raw history ([0-9.]+)% of [0-9.]+[KM]? \(peak view [0-9.]+[KM]?, raw peak [0-9.]+[KM]? tokens\)`)
	costVsRawRE   = regexp.MustCompile(`cost vs raw: +([0-9.]+) \(`)
	recordedRE    = regexp.MustCompile(`summarizer: +([0-9]+) calls, 0 errors; recorded: ([0-9]+) calls, ([0-9]+) input \+ ([0-9]+) output tokens`)
)

// simulateSeries runs simulate --json and returns the series and the summary.
func simulateSeries(t *testing.T, args ...string) ([]turnResult, string) {
	t.Helper()
	r := runCLI(t, "", append([]string{"simulate", "--json", "--store", ""}, args...)...)
	if r.code != exitOK {
		t.Fatalf("simulate: %v", r)
	}
	var series []turnResult
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	for dec.More() {
		var tr turnResult
		if err := dec.Decode(&tr); err != nil {
			t.Fatalf("turn %d: %v", len(series)+1, err)
		}
		series = append(series, tr)
	}
	return series, r.stderr
}

// costFigures reads the cache hits and cost vs raw from a summary.
func costFigures(t *testing.T, summary string) (hit, rawHit, vsRaw float64) {
	t.Helper()
	m, c := promptCacheRE.FindStringSubmatch(summary), costVsRawRE.FindStringSubmatch(summary)
	if m == nil || c == nil || !recordedRE.MatchString(summary) {
		t.Fatalf("summary lacks the cost figures:\n%s", summary)
	}
	hit, _ = strconv.ParseFloat(m[1], 64)
	rawHit, _ = strconv.ParseFloat(m[2], 64)
	vsRaw, _ = strconv.ParseFloat(c[1], 64)
	return hit, rawHit, vsRaw
}

// Without compaction (a window far above the transcript), the views are the raw history:
// the same cache hits, and cost vs raw exactly 1, with the OffloadHook or without it, in
// both history modes. With compaction, the figures the summary prints are the sums of the
// series, and the views cost less than the raw history.
func TestSimulateCost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	msgs := genTranscript(genOptions{rounds: 200, bigResult: 12000, resultLen: 1500})
	path := writeTranscript(t, dir, "cost.jsonl", msgs)
	huge := strconv.Itoa(100 * compaction.EstimateTokens(msgs))
	for _, extra := range [][]string{nil, {"--raw-history"}, {"--hook-threshold", "0"}} {
		series, summary := simulateSeries(t, append(extra, "--context-window", huge, path)...)
		if len(series) != countTurns(msgs) {
			t.Fatalf("%v: %d turns", extra, len(series))
		}
		for _, tr := range series {
			if tr.Tier != compaction.TierNone || tr.InputTokens != tr.RawTokens || tr.CachedTokens != tr.RawCachedTokens || tr.Cost != tr.RawCost {
				t.Fatalf("%v: turn %d without compaction differs from the raw history: %+v", extra, tr.Turn, tr)
			}
		}
		hit, rawHit, vsRaw := costFigures(t, summary)
		if hit != rawHit || vsRaw != 1 || hit < 50 {
			t.Errorf("%v: cache hit %v%%, raw %v%%, cost vs raw %v; want equal hits and 1.00:\n%s", extra, hit, rawHit, vsRaw, summary)
		}
	}

	// A window a tenth of the transcript: compactions in cycles, each turn adding about 5% of
	// the window.
	series, summary := simulateSeries(t, "--context-window", strconv.Itoa(compaction.EstimateTokens(msgs)/10), path)
	var tot costTotals
	tot.Prices = prices{Fresh: 1, CacheRead: 0.1, CacheWrite: 1.25}
	changed := 0
	for _, tr := range series {
		tot.InputTokens += tr.InputTokens
		tot.CachedTokens += tr.CachedTokens
		tot.RawInputTokens += tr.RawTokens
		tot.RawCachedTokens += tr.RawCachedTokens
		tot.SummarizerInputTokens += tr.SummarizerInputTokens
		tot.SummarizerOutputTokens += tr.SummarizerOutputTokens
		if tr.ChangedView {
			changed++
		}
	}
	tot.finish()
	t.Logf("compacted replay:\n%s", summary)
	hit, rawHit, vsRaw := costFigures(t, summary)
	if math.Abs(hit-100*tot.CacheHit) > 0.05 || math.Abs(rawHit-100*tot.RawCacheHit) > 0.05 || math.Abs(vsRaw-tot.CostVsRaw) > 0.005 {
		t.Errorf("summary %v%% %v%% %v, the series sum to %+v", hit, rawHit, vsRaw, tot)
	}
	if vsRaw <= 0 || vsRaw >= 1 || hit >= rawHit || changed == 0 {
		t.Errorf("compacted replay: cache hit %v%% (raw %v%%), cost vs raw %v, %d views changed", hit, rawHit, vsRaw, changed)
	}
	if !strings.Contains(summary, fmt.Sprintf("; %d changed the view (", changed)) || !strings.Contains(summary, "smallest saving:") {
		t.Errorf("summary does not report the %d compactions that changed the view:\n%s", changed, summary)
	}
	if m := recordedRE.FindStringSubmatch(summary); m == nil || atoi(m[2]) > atoi(m[1]) || (atoi(m[2]) == 0) != (atoi(m[3])+atoi(m[4]) == 0) {
		t.Errorf("summarizer figures: %v", m)
	}

	// Other prices change the cost, not the tokens: at one price for every token, cost vs
	// raw is the ratio of the tokens sent.
	_, summary2 := simulateSeries(t, "--context-window", strconv.Itoa(compaction.EstimateTokens(msgs)/10), "--price-cache-read", "2", "--price-cache-write", "2", "--price-fresh", "2", path)
	hit2, rawHit2, vsRaw2 := costFigures(t, summary2)
	flat := float64(tot.InputTokens+tot.SummarizerInputTokens+tot.SummarizerOutputTokens) / float64(tot.RawInputTokens)
	if hit2 != hit || rawHit2 != rawHit || math.Abs(vsRaw2-flat) > 0.005 || !strings.Contains(summary2, "cache read 2, cache write 2, summarizer 2") {
		t.Errorf("flat prices: %v %v %v, want %v %v %.2f:\n%s", hit2, rawHit2, vsRaw2, hit, rawHit, flat, summary2)
	}
	for _, bad := range [][]string{{"--price-cache-write", "0"}, {"--price-cache-read", "-1"}, {"--price-fresh", "NaN"}} {
		if r := runCLI(t, "", append(append([]string{"simulate", "--store", ""}, bad...), path)...); r.code != exitUsage || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("%v: %v", bad, r)
		}
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func TestSimulateQuietAndNoTurns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	msgs := genTranscript(genOptions{rounds: 20})
	path := writeTranscript(t, dir, "q.jsonl", msgs)
	r := runCLI(t, "", "simulate", "--quiet", "--store", "", "--context-window", strconv.Itoa(lastTurnWindow(msgs, 0.9)), path)
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "Summary of q.jsonl") || notificationRE.MatchString(r.stdout) {
		t.Fatalf("--quiet must print only the summary: %v", r)
	}

	// A transcript without a turn to compact still gives a summary and a valid plot.
	only := []compaction.Message{{Role: compaction.RoleSystem, Content: "sys"}, {Role: compaction.RoleAssistant, Content: "hello"}, {Role: compaction.RoleUser, Content: "hi"}}
	path = writeTranscript(t, dir, "none.jsonl", only)
	plot := filepath.Join(dir, "none.svg")
	r = runCLI(t, "", "simulate", "--store", "", "--plot", plot, path)
	if r.code != exitOK || !strings.Contains(r.stdout, "0 turns") {
		t.Fatalf("no turns: %v", r)
	}
	data, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(data, new(struct{})); err != nil {
		t.Fatalf("empty plot is not XML: %v", err)
	}
}

// The replay starts from an empty state even when an earlier run left one in the store, so
// two runs give the same result.
func TestSimulateIsRepeatable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	msgs := genTranscript(genOptions{rounds: 25, bigResult: 6000})
	path := writeTranscript(t, dir, "again.jsonl", msgs)
	args := []string{"simulate", "--json", "--store", dir, "--context-window", strconv.Itoa(lastTurnWindow(msgs, 0.9)), path}
	first := runCLI(t, "", args...)
	second := runCLI(t, "", args...)
	if first.code != exitOK || second.code != exitOK {
		t.Fatalf("runs failed:\n%v\n%v", first, second)
	}
	if first.stdout != second.stdout {
		t.Fatalf("a second replay differs from the first:\n%s\n---\n%s", first.stdout, second.stdout)
	}
}

// Every transcript in the repository's testdata replays cleanly. When the directory holds
// none yet, a generated transcript stands in, so the test never skips. The environment
// variable COMPACTCTL_TRANSCRIPTS may name one more directory of *.jsonl transcripts (for
// example the real agent runs kept outside the repository).
func TestSimulateRepositoryTranscripts(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join("..", "..", "testdata", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if extra := os.Getenv("COMPACTCTL_TRANSCRIPTS"); extra != "" {
		more, err := filepath.Glob(filepath.Join(extra, "*.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if len(more) == 0 {
			t.Fatalf("COMPACTCTL_TRANSCRIPTS=%s holds no *.jsonl file", extra)
		}
		paths = append(paths, more...)
	}
	if len(paths) == 0 {
		paths = []string{writeTranscript(t, t.TempDir(), "generated.jsonl", genTranscript(genOptions{rounds: 40, bigResult: 12000, resultLen: 1500}))}
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			msgs, err := compaction.DecodeTranscript(f, compaction.DecodeOptions{})
			f.Close()
			if err != nil {
				t.Fatalf("decode %s: %v", path, err)
			}
			dir := t.TempDir()
			plot := filepath.Join(dir, "plot.svg")
			// A window the transcript outgrows, so the replay reaches the upper tiers. The hook
			// is off: it would shrink large results before the window computed here sees them.
			window := lastTurnWindow(msgs, 1.2)
			r := runCLI(t, "", "simulate", "--context-window", strconv.Itoa(window), "--hook-threshold", "0",
				"--store", dir, "--plot", plot, path)
			if r.code != exitOK {
				t.Fatalf("simulate %s: %v", path, r)
			}
			out := parseSimulation(t, r.stdout)
			if !strings.Contains(out.summary, strconv.Itoa(countTurns(msgs))+" turns") {
				t.Errorf("summary:\n%s", out.summary)
			}
			if countTurns(msgs) > 0 && len(out.turns) == 0 {
				t.Errorf("no compaction although the transcript reaches 120%% of the window")
			}
			checkSVG(t, plot, filepath.Base(path))
		})
	}
}

// TestSimulateCyclesOnLongTranscript replays a transcript ten times the window: with the
// derived view after the watermark, usage falls after every summary and climbs again, and
// no turn needs an Emergency truncation; with --raw-history the same replay lives in
// Emergency.
func TestSimulateCyclesOnLongTranscript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	msgs := genTranscript(genOptions{rounds: 200, resultLen: 1500})
	path := writeTranscript(t, dir, "long.jsonl", msgs)
	window := strconv.Itoa(compaction.EstimateTokens(msgs) / 10)
	series := func(extra ...string) []turnResult {
		args := append([]string{"simulate", "--json", "--store", "", "--context-window", window}, extra...)
		r := runCLI(t, "", append(args, path)...)
		if r.code != exitOK {
			t.Fatalf("simulate: %v", r)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		out := make([]turnResult, 0, len(lines))
		for _, line := range lines {
			var tr turnResult
			if err := json.Unmarshal([]byte(line), &tr); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
			out = append(out, tr)
		}
		return out
	}
	falls, summaries, prev := 0, 0, 0.0
	for _, tr := range series() {
		if tr.Tier == compaction.TierEmergency {
			t.Fatalf("turn %d: Emergency in a replay whose turns each add far less than the headroom", tr.Turn)
		}
		if tr.Tier >= compaction.TierSoft {
			summaries++
		}
		if tr.UsageAfter > 1 {
			t.Fatalf("turn %d: usage after compaction %.2f exceeds the window", tr.Turn, tr.UsageAfter)
		}
		if tr.UsageBefore < prev-0.1 {
			falls++
		}
		prev = tr.UsageBefore
	}
	if summaries < 5 || falls < 5 {
		t.Fatalf("no cycles: %d summaries, usage fell %d times in a replay of ten windows", summaries, falls)
	}
	emergencies := 0
	for _, tr := range series("--raw-history") {
		if tr.Tier == compaction.TierEmergency {
			emergencies++
		}
	}
	if emergencies < 50 {
		t.Fatalf("--raw-history: %d emergencies, want the spec's behaviour of living in Emergency", emergencies)
	}
}

// offTurnSummaryRE reads the two summary lines of --summarizer-latency.
var offTurnSummaryRE = regexp.MustCompile(`off the turn: +summarizer latency (\S+), a turn every (\S+); ([0-9]+) Soft/Full compactions summarized: ([0-9]+) used a prepared summary, ([0-9]+) summarized extractively at once, ([0-9]+) waited \(([0-9]+) merged a late summary\)\n` +
	`  off-turn calls: +([0-9]+) summaries started \(([0-9]+) ahead, ([0-9]+) late\): ([0-9]+) used, ([0-9]+) wasted \(([0-9.]+K?) tokens, in the cost\), ([0-9]+) still running and ([0-9]+) unused at the end\n`)

// latencyReplay is one simulate --json run with --summarizer-latency over the repository's
// long transcript, at a window it outgrows several times.
type latencyReplay struct {
	series             []turnResult
	summary            string
	totals             offTurnStats // read back from the summary's lines
	summarizedSoftFull int
}

func replayWithLatency(t *testing.T, extra ...string) latencyReplay {
	t.Helper()
	series, summary := simulateSeries(t, append([]string{"--context-window", "30000"}, append(extra, filepath.Join("..", "..", "testdata", "long-session.jsonl"))...)...)
	m := offTurnSummaryRE.FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("the summary lacks the off-the-turn totals:\n%s", summary)
	}
	r := latencyReplay{series: series, summary: summary, totals: offTurnStats{SummarizerLatency: m[1], TurnInterval: m[2],
		Compactions: atoi(m[3]), UsedPrepared: atoi(m[4]), Extractive: atoi(m[5]), Waited: atoi(m[6]), LateMerged: atoi(m[7]),
		Started: atoi(m[8]), StartedAhead: atoi(m[9]), StartedLate: atoi(m[10]), Used: atoi(m[11]), Wasted: atoi(m[12]),
		Running: atoi(m[14]), Unused: atoi(m[15])}}
	// The totals are the sums of the turns, and add up.
	var sum offTurnStats
	for _, tr := range series {
		switch tr.PreparedStarted {
		case "ahead":
			sum.StartedAhead++
		case "late":
			sum.StartedLate++
		case "":
		default:
			t.Errorf("turn %d: preparedStarted %q", tr.Turn, tr.PreparedStarted)
		}
		sum.Used += tr.PreparedUsed
		sum.Wasted += tr.PreparedWasted
		sum.WastedTokens += tr.PreparedWastedTokens
		if tr.PreparedLateMerged {
			sum.LateMerged++
		}
		if tr.Tier == compaction.TierSoft || tr.Tier == compaction.TierFull {
			if tr.PreparedCovered > 0 && tr.SummarizerDeferred {
				t.Errorf("turn %d: used a prepared summary and summarized extractively for want of one", tr.Turn)
			}
			switch {
			case tr.PreparedCovered > 0:
				sum.UsedPrepared++
			case tr.SummarizerDeferred:
				sum.Extractive++
			}
			if tr.ChangedView {
				r.summarizedSoftFull++
			}
		}
		// A discarded summary's tokens are counted in the turn's summarizer tokens, so in
		// its cost.
		if tr.PreparedWastedTokens > tr.SummarizerInputTokens+tr.SummarizerOutputTokens || (tr.PreparedWasted > 0) != (tr.PreparedWastedTokens > 0) {
			t.Errorf("turn %d: %d wasted summaries of %d tokens, %d+%d summarizer tokens counted", tr.Turn, tr.PreparedWasted,
				tr.PreparedWastedTokens, tr.SummarizerInputTokens, tr.SummarizerOutputTokens)
		}
	}
	tt := r.totals
	if tt.StartedAhead != sum.StartedAhead || tt.StartedLate != sum.StartedLate || tt.Started != tt.StartedAhead+tt.StartedLate ||
		tt.Used != sum.Used || tt.Wasted != sum.Wasted || tt.LateMerged != sum.LateMerged ||
		tt.UsedPrepared != sum.UsedPrepared || tt.Extractive != sum.Extractive {
		t.Errorf("summary totals %+v, the turns add up to %+v", tt, sum)
	}
	if m[13] != humanCount(sum.WastedTokens) {
		t.Errorf("summary says %s wasted tokens, the turns %d", m[13], sum.WastedTokens)
	}
	if tt.Used+tt.Wasted+tt.Running+tt.Unused != tt.Started || tt.Unused < 0 || tt.Running < 0 {
		t.Errorf("of %d summaries started, %d used + %d wasted + %d running + %d unused", tt.Started, tt.Used, tt.Wasted, tt.Running, tt.Unused)
	}
	if tt.UsedPrepared+tt.Extractive+tt.Waited != tt.Compactions || tt.Compactions < r.summarizedSoftFull {
		t.Errorf("%d Soft/Full compactions summarized (%d changed the view): %d prepared + %d extractive + %d waited",
			tt.Compactions, r.summarizedSoftFull, tt.UsedPrepared, tt.Extractive, tt.Waited)
	}
	if wasted := regexp.MustCompile(`with ([0-9]+) wasted summarizer calls`).FindStringSubmatch(summary); (wasted != nil) != (sum.Wasted > 0) ||
		(wasted != nil && atoi(wasted[1]) != sum.Wasted) {
		t.Errorf("the cost line does not give the %d wasted calls:\n%s", sum.Wasted, summary)
	}
	return r
}

// TestSimulateSummarizerLatency: --summarizer-latency replays summaries made off the turn on
// simulated time. 0 is today's replay, byte for byte. A latency shorter than a turn has every
// Soft and Full compaction use a summary prepared ahead; one of several turns has some use
// one, others summarize extractively and merge the summaries that came late at a later
// compaction; one longer than the session has every compaction summarize extractively.
// Every run's totals are the sums of its turns and add up.
func TestSimulateSummarizerLatency(t *testing.T) {
	t.Parallel()
	transcript := filepath.Join("..", "..", "testdata", "long-session.jsonl")
	for _, mode := range [][]string{{"--quiet"}, {"--json"}, nil} {
		base := runCLI(t, "", append(append([]string{"simulate", "--store", "", "--context-window", "30000"}, mode...), transcript)...)
		zero := runCLI(t, "", append(append([]string{"simulate", "--store", "", "--context-window", "30000", "--summarizer-latency", "0"}, mode...), transcript)...)
		if base.code != exitOK || zero.code != exitOK {
			t.Fatalf("simulate %v: %v\n%v", mode, base, zero)
		}
		if base.stdout != zero.stdout || base.stderr != zero.stderr || strings.Contains(base.stdout+base.stderr, "off the turn") {
			t.Errorf("simulate %v: --summarizer-latency 0 changed the output:\n%s\n---\n%s", mode, clip(base.stdout, 1500), clip(zero.stdout, 1500))
		}
	}

	fast := replayWithLatency(t, "--summarizer-latency", "2s")
	if fast.totals.SummarizerLatency != "2s" || fast.totals.TurnInterval != "5s" || !strings.Contains(fast.summary, "summarizer extractive-as-llm") {
		t.Errorf("latency 2s at the default interval:\n%s", fast.summary)
	}
	if fast.totals.Compactions == 0 || fast.totals.UsedPrepared != fast.totals.Compactions || fast.totals.Wasted != 0 {
		t.Errorf("a summarizer faster than a turn: %+v, want every Soft/Full compaction to use a prepared summary", fast.totals)
	}

	slow := replayWithLatency(t, "--summarizer-latency", "40s")
	// A summary still running at a crossing becomes that crossing's late summary, and one
	// that finishes after later compactions is merged under their anchors: none wasted.
	if slow.totals.UsedPrepared == 0 || slow.totals.Extractive == 0 || slow.totals.LateMerged == 0 || slow.totals.Wasted != 0 {
		t.Errorf("a summarizer eight turns slow: %+v, want some compactions to use prepared summaries, others extractive and later merged, none wasted", slow.totals)
	}
	// The turn interval places the turns: the same latency at a 10 s interval is four turns.
	spaced := replayWithLatency(t, "--summarizer-latency", "40s", "--turn-interval", "10s")
	if spaced.totals.TurnInterval != "10s" || spaced.totals.UsedPrepared <= slow.totals.UsedPrepared {
		t.Errorf("40s at a turn every 10s: %d compactions used a prepared summary, at every 5s %d; want more", spaced.totals.UsedPrepared, slow.totals.UsedPrepared)
	}

	never := replayWithLatency(t, "--summarizer-latency", "1000h")
	if never.totals.Compactions == 0 || never.totals.Extractive != never.totals.Compactions || never.totals.UsedPrepared != 0 ||
		never.totals.Used != 0 || never.totals.Running == 0 {
		t.Errorf("a summarizer that never answers in time: %+v, want every compaction extractive", never.totals)
	}
	for _, tr := range never.series {
		if tr.PreparedCovered > 0 || tr.PreparedLateMerged {
			t.Errorf("turn %d used a summary that cannot have completed", tr.Turn)
		}
	}

	// --prepare-percent moves the point from which a summary is prepared ahead.
	first := func(r latencyReplay) turnResult {
		for _, tr := range r.series {
			if tr.PreparedStarted == "ahead" {
				return tr
			}
		}
		t.Fatal("no summary prepared ahead")
		return turnResult{}
	}
	fromWarn, early := first(fast), first(replayWithLatency(t, "--summarizer-latency", "2s", "--prepare-percent", "45"))
	if fromWarn.UsageBefore < 0.60 || early.UsageBefore < 0.45 || early.Turn >= fromWarn.Turn {
		t.Errorf("first summary prepared ahead at turn %d (usage %.2f) from --warn, at turn %d (%.2f) with --prepare-percent 45",
			fromWarn.Turn, fromWarn.UsageBefore, early.Turn, early.UsageBefore)
	}
}

// The text output names, for each compaction, what it did with summaries made off the turn,
// and the turns that start one say when it is ready; a second replay is the same.
func TestSimulateSummarizerLatencyText(t *testing.T) {
	t.Parallel()
	args := []string{"simulate", "--store", "", "--context-window", "30000", "--summarizer-latency", "12s", filepath.Join("..", "..", "testdata", "long-session.jsonl")}
	r := runCLI(t, "", args...)
	if r.code != exitOK {
		t.Fatalf("simulate: %v", r)
	}
	ready := regexp.MustCompile(`(?m)^\[turn ([0-9]+)\] .*\n.*\n +off the turn: started a summary ahead, ready at turn ([0-9]+)$`).FindAllStringSubmatch(r.stdout, -1)
	if len(ready) == 0 {
		t.Fatalf("no turn says it started a summary ahead:\n%s", clip(r.stdout, 3000))
	}
	for _, m := range ready {
		if atoi(m[2]) != atoi(m[1])+3 { // 12 s at a turn every 5 s: ready three turns later
			t.Errorf("started at turn %s, ready at %s; want three turns later", m[1], m[2])
		}
	}
	if !regexp.MustCompile(`(?m)^\[turn [0-9]+\] ⚡ Context compressed \[(Soft|Full)\].*\n +[0-9]+ anchors .*\n +off the turn: used the summary prepared ahead \(it covers [0-9]+ of the [0-9]+ messages summarized\)`).MatchString(r.stdout) {
		t.Errorf("no Soft or Full compaction says it used the prepared summary:\n%s", clip(r.stdout, 3000))
	}
	if again := runCLI(t, "", args...); again.stdout != r.stdout {
		t.Errorf("a second replay differs")
	}
}

// simBackground completes work at the first turn at least the latency after the one that
// handed it off, which is the turn readyTurn names.
func TestSimBackgroundRunsWorkWhenDue(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ latency, interval time.Duration }{
		{time.Second, 5 * time.Second}, {5 * time.Second, 5 * time.Second}, {12 * time.Second, 5 * time.Second}, {10 * time.Second, 5 * time.Second}, {time.Hour, time.Minute},
	} {
		b := &simBackground{latency: tc.latency, interval: tc.interval}
		ranAt := map[int]int{} // handed-off turn -> turn it ran before
		turn := 0
		for turn = 1; turn <= 200; turn++ {
			b.advance(ctx, turn)
			if turn == 2 || turn == 3 {
				from := turn
				if !b.Go("s", func(context.Context) { ranAt[from] = turn }) {
					t.Fatal("Go refused work")
				}
			}
		}
		for _, from := range []int{2, 3} {
			if got, want := ranAt[from], b.readyTurn(from); got != want || time.Duration(got-from)*tc.interval < tc.latency {
				t.Errorf("latency %s, a turn every %s: work of turn %d ran at turn %d, readyTurn says %d", tc.latency, tc.interval, from, got, want)
			}
		}
		if b.pending() != 0 || b.done != 2 {
			t.Errorf("latency %s: %d pending, %d done", tc.latency, b.pending(), b.done)
		}
	}
}

// The off-the-turn flags check their values and refuse to be silently ignored.
func TestSimulateSummarizerLatencyUsage(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "testdata", "long-session.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--summarizer-latency", "-1s"}, "--summarizer-latency -1s must not be negative"},
		{[]string{"--summarizer-latency", "5s", "--turn-interval", "0s"}, "--turn-interval 0s must be positive"},
		{[]string{"--turn-interval", "10s"}, "--turn-interval only applies with --summarizer-latency"},
		{[]string{"--prepare-percent", "50"}, "--prepare-percent only applies with --summarizer-latency"},
		{[]string{"--summarizer-latency", "5s", "--prepare-percent", "70"}, "--prepare-percent 70 must be 0 (from --warn) or below --soft 70"},
		{[]string{"--summarizer-latency", "5s", "--raw-history"}, "--summarizer-latency does not apply with --raw-history"},
	} {
		for _, cmd := range []string{"simulate", "eval"} {
			args := append([]string{cmd, "--store", ""}, tc.args...)
			if cmd == "eval" {
				args = append(args, "--probes", filepath.Join("..", "..", "testdata", "probes"))
			}
			r := runCLI(t, "", append(args, path)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("%s %v: %v\nwant a usage error containing %q", cmd, tc.args, r, tc.want)
			}
		}
	}
}
