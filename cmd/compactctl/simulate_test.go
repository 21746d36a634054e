package main

import (
	"bufio"
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
