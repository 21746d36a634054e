package main

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
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
	}
	if !strings.Contains(r.stderr, "Summary of series.jsonl") {
		t.Errorf("--json: the summary is not on stderr:\n%s", r.stderr)
	}
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
