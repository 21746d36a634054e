package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/harness9/compaction-operator/compaction"
)

// turnResult is one turn of a simulation: the compaction run before one assistant message.
// It is also the JSON line --json prints.
type turnResult struct {
	Turn         int             `json:"turn"`
	Index        int             `json:"index"` // 0-based position of the assistant message in the transcript
	Tier         compaction.Tier `json:"tier"`
	TokensBefore int             `json:"tokensBefore"`
	TokensAfter  int             `json:"tokensAfter"`
	UsageBefore  float64         `json:"usageBefore"` // ratio of the window: 0.73 is 73%
	UsageAfter   float64         `json:"usageAfter"`
	MsgsBefore   int             `json:"msgsBefore"`
	MsgsAfter    int             `json:"msgsAfter"`
	// The prompt-cache accounting of the turn: inputTokens, cachedTokens, rawTokens,
	// rawCachedTokens, the summarizer's calls and tokens, changedView, cost and rawCost.
	turnCost
	// What the turn did with summaries made off the turn (--summarizer-latency); all absent
	// without it.
	compaction.OffTurnWork
}

// simStats is the closing summary of a simulation.
type simStats struct {
	turns          int
	perTier        [compaction.TierEmergency + 1]int
	peakUsage      float64
	peakTurn       int
	tokensSaved    int
	offloaded      int
	offloadedBytes int
	hookOffloads   int
	hookBytes      int
	summarizerCall int64
	summarizerErrs int64
	// Compactions that changed the view, per tier, and the smallest share of the view one
	// of them saved (at minSavingTurn; 0 when none did).
	changedPerTier  [compaction.TierEmergency + 1]int
	minSavingTurn   int
	minSavingShare  float64
	minSavingTokens int
	cost            costTotals
	// offTurn: the summaries made off the turn; nil without --summarizer-latency.
	offTurn *offTurnStats
}

func (s *simStats) changedViews() int {
	n := 0
	for t := compaction.TierWarn; t <= compaction.TierEmergency; t++ {
		n += s.changedPerTier[t]
	}
	return n
}

func (s *simStats) compactions() int {
	n := 0
	for t := compaction.TierWarn; t <= compaction.TierEmergency; t++ {
		n += s.perTier[t]
	}
	return n
}

type simulateFlags struct {
	plot    string
	quiet   bool
	json    bool
	prices  *prices
	offTurn *offTurnFlags
}

func simulateCommand() *command {
	return &command{
		name:     "simulate",
		synopsis: "replay a transcript turn by turn and report every compaction (and plot usage)",
		usage:    "compactctl simulate [flags] TRANSCRIPT",
		help: `Replays TRANSCRIPT (a file, or - for standard input) as an agent would run it, with one
compactor for the whole run so its state (last summary, anchors, offloaded results) carries
from turn to turn. A turn is an assistant message: before each one that follows the first
user message, the history so far is compacted, exactly as the agent does before its LLM call
(the rule of compaction.AssistantTurns, which the demo and the tests replay by too). Tool results longer than --hook-threshold are offloaded at source as they enter the
history, as the agent's OffloadHook does.

Every compaction above the None tier prints its two-line notification, prefixed with the turn;
a summary follows: turns, compactions per tier (and those that changed the view), peak
usage, tokens saved (and the smallest share of the view one compaction saved), offloads,
summarizer calls and tokens, and the prompt-cache cost. --plot writes an SVG chart of the
usage per turn, --json prints the per-turn series as JSON lines instead of the notifications
(the summary then goes to standard error).

Cost: every turn sends its view. The cached part of a view is its longest common prefix, in
whole messages equal field by field, with the previous view followed by the reply to it
(the assistant message that follows it in the transcript), counted in estimated tokens. A
view costs --price-cache-read per cached token and --price-cache-write per other input
token; a session costs the sum over its turns plus the summarizer's input and output
tokens (from the compaction records) at --price-fresh. "cost vs raw" divides that by the cost
of sending the raw history every turn (every message so far, after the OffloadHook: no
compaction, an unbounded window), counted the same way; the cache-hit ratios are cached /
input tokens.

Summaries off the turn: by default a Soft or Full compaction waits for the summarizer.
--summarizer-latency DURATION models a summarizer that takes that long, with summaries made off
the turn as the compaction API makes them: from --prepare-percent of the window (0, the
default: from --warn) the summary the next Soft will need is prepared ahead; a compaction uses
it if it is ready, and otherwise summarizes extractively at once and has the summarizer
summarize the same messages, merged at the next compaction. Time is simulated: turns are
--turn-interval apart (default 5s; transcripts carry no timestamps), and a summarization
handed off at a turn completes, between turns, at the first turn at least the latency later.
With --summarizer extractive, the extractive summarizer stands in for an LLM of that latency
(named ` + standInName + `). Each compaction, and each turn that starts a summarization off the
turn, then gets a line saying whether it used a prepared summary, summarized extractively or
merged a late one (--json: summarizerDeferred, preparedStarted, preparedUsed, preparedWasted,
preparedWastedTokens, preparedCovered, preparedLateMerged), and the summary adds the totals:
summaries started (ahead, late), used, wasted (with their tokens), still running and unused at
the end. A discarded summary is counted, with its tokens, in the record of the compaction that
discarded it: in the summarizer's recorded calls and tokens, and so in the cost; one unused at
the end is in the calls only.

The replay always starts the session from an empty state, whatever an earlier run left in the
store; offloaded results and records are written under --store (by default .harness9/ in a
per-user cache directory, see -h; --store '' keeps everything in memory).`,
		example: `  compactctl simulate --context-window 32000 --store '' --plot usage.svg session.jsonl
  compactctl simulate --json --store '' session.jsonl | jq -c 'select(.tier != "None")'
  compactctl simulate --store '' --summarizer-latency 15s --turn-interval 10s session.jsonl`,
		flags: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			ef := addEngineFlags(fs)
			sf := &simulateFlags{}
			fs.StringVar(&sf.plot, "plot", "", "write an SVG chart of the context usage per turn to `FILE`")
			fs.BoolVar(&sf.quiet, "quiet", false, "do not print the per-turn notifications, only the summary")
			fs.BoolVar(&sf.json, "json", false, "print the per-turn series as JSON lines (turn, index, tier, tokensBefore, tokensAfter,\nusageBefore, usageAfter, msgsBefore, msgsAfter; usage as a ratio; inputTokens, cachedTokens,\nrawTokens, rawCachedTokens, summarizerCalls, summarizerInputTokens, summarizerOutputTokens,\nchangedView, cost, rawCost) instead of notifications; the summary goes to standard error")
			sf.prices = addPriceFlags(fs)
			sf.offTurn = addOffTurnFlags(fs)
			return func(ctx context.Context, std *stdio, args []string) error {
				return runSimulate(ctx, std, ef, sf, args)
			}
		},
	}
}

func runSimulate(ctx context.Context, std *stdio, ef *engineFlags, sf *simulateFlags, args []string) error {
	path, err := transcriptArg(args)
	if err != nil {
		return err
	}
	if errs := append(sf.prices.check(), sf.offTurn.check(ef)...); len(errs) > 0 {
		return &usageError{err: errors.Join(errs...)}
	}
	cfg, base, err := sf.offTurn.engine(ef)
	if err != nil {
		return err
	}
	if sf.plot != "" {
		if err := checkOutputDir(sf.plot); err != nil {
			return err
		}
	}
	msgs, err := readTranscript(path, std.in)
	if err != nil {
		return err
	}
	store, storeDesc, err := ef.openStore(std.err)
	if err != nil {
		return err
	}
	summarizer := newCountingSummarizer(base)
	bg := sf.offTurn.background()
	c, err := compaction.NewProgressiveCompactor(cfg, compactorOptions(freshState{store}, summarizer, ef.sessionID, ef.logger(std.err), bg)...)
	if err != nil {
		return fmt.Errorf("create compactor: %w", err)
	}

	out := bufio.NewWriter(std.out)
	// On the error paths below, still show the turns written so far. The error returned is
	// the one worth reporting; the success path checks its own Flush.
	defer func() { _ = out.Flush() }()
	hook := &hookOffloader{off: c.Offloader(), threshold: ef.hookThreshold}
	series, stats, err := replay(ctx, c, hook, msgs, *sf.prices, bg, func(t replayTurn) error {
		tr, rec := t.result, t.record
		note := ""
		if bg != nil {
			note = offTurnText(rec, tr.Turn, bg)
		}
		switch {
		case sf.json:
			b, err := json.Marshal(tr)
			if err != nil {
				return fmt.Errorf("encode turn %d: %w", tr.Turn, err)
			}
			if _, err := out.Write(append(b, '\n')); err != nil {
				return fmt.Errorf("write turn %d: %w", tr.Turn, err)
			}
			return nil
		case sf.quiet || (rec.Tier == compaction.TierNone && note == ""):
			return nil
		default:
			text := note
			if rec.Tier != compaction.TierNone {
				text = rec.Notification()
				if note != "" {
					text += "\n   " + note // under the notification's second line
				}
			}
			if _, err := io.WriteString(out, prefixLines(fmt.Sprintf("[turn %d] ", tr.Turn), text)); err != nil {
				return fmt.Errorf("write turn %d: %w", tr.Turn, err)
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	stats.summarizerCall, stats.summarizerErrs = summarizer.calls.Load(), summarizer.failures.Load()
	stats.hookOffloads, stats.hookBytes = hook.count, hook.bytes

	summaryOut := io.Writer(out)
	if sf.json {
		summaryOut = std.err
	}
	name := displayName(path)
	summary := summaryText(name, len(msgs), cfg, base.Name(), storeDesc, ef.sessionID, stats)
	if _, err := io.WriteString(summaryOut, summary); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if sf.plot != "" {
		svg := renderPlot(plotInput{Title: name, Config: cfg, Series: series})
		if err := writeFileAtomic(sf.plot, []byte(svg)); err != nil {
			return fmt.Errorf("write plot: %w", err)
		}
	}
	return nil
}

// replayTurn is what one turn of a replay produced, for the caller's callback.
type replayTurn struct {
	result turnResult
	record *compaction.CompactionRecord
	// view is what the agent sends to its LLM this turn; history is what it had before the
	// compaction (every message so far, after the OffloadHook). Neither may be modified.
	view    []compaction.Message
	history []compaction.Message
}

// compactorOptions are the options of a replay's compactor: bg (nil: none) makes summaries
// off the turn.
func compactorOptions(store compaction.Store, s compaction.Summarizer, sessionID string, log logr.Logger, bg *simBackground) []compaction.Option {
	opts := []compaction.Option{
		compaction.WithStore(store),
		compaction.WithSummarizer(s),
		compaction.WithSessionID(sessionID),
		compaction.WithLogger(log),
	}
	if f, ok := store.(freshState); ok {
		// The archive is read back as it was written: only the state starts fresh.
		if a, ok := f.Store.(compaction.ArchiveStore); ok {
			opts = append(opts, compaction.WithArchiveStore(a))
		}
	}
	if bg != nil {
		opts = append(opts, compaction.WithBackground(bg))
	}
	return opts
}

// replay runs the turns of msgs through c and calls emit after each; the cost of every turn
// is accounted with prices. With bg (c's Background), the work it holds runs between turns,
// as simulated time passes.
func replay(ctx context.Context, c *compaction.ProgressiveCompactor, hook *hookOffloader, msgs []compaction.Message,
	p prices, bg *simBackground, emit func(replayTurn) error) ([]turnResult, *simStats, error) {
	cfg := c.Config()
	stats := &simStats{}
	if bg != nil {
		stats.offTurn = &offTurnStats{SummarizerLatency: bg.latency.String(), TurnInterval: bg.interval.String()}
	}
	cost := newCostTracker(p)
	var series []turnResult
	history := make([]compaction.Message, 0, len(msgs))
	turns := compaction.AssistantTurns(msgs)
	for i := range msgs {
		if len(turns) > 0 && turns[0] == i {
			turns = turns[1:]
			if err := ctx.Err(); err != nil {
				return nil, nil, fmt.Errorf("simulation stopped before turn %d: %w", stats.turns+1, err)
			}
			stats.turns++
			if bg != nil {
				bg.advance(ctx, stats.turns)
			}
			// The full slice expression keeps the engine from ever appending into history.
			view, rec, err := c.CompactWithRecord(ctx, history[:len(history):len(history)])
			if err != nil {
				return nil, nil, fmt.Errorf("turn %d (message %d): %w", stats.turns, i, err)
			}
			tr := turnResult{
				Turn: stats.turns, Index: i, Tier: rec.Tier,
				TokensBefore: rec.TokensBefore, TokensAfter: rec.TokensAfter,
				UsageBefore: round4(cfg.Usage(rec.TokensBefore)), UsageAfter: round4(cfg.Usage(rec.TokensAfter)),
				MsgsBefore: rec.MsgsBefore, MsgsAfter: len(view),
				turnCost: cost.turn(view, history[:len(history):len(history)], rec),
			}
			if bg != nil {
				tr.OffTurnWork = rec.OffTurnWork
				stats.offTurn.add(rec)
			}
			series = append(series, tr)
			stats.perTier[rec.Tier]++
			if u := cfg.Usage(rec.TokensBefore); u > stats.peakUsage || stats.peakTurn == 0 {
				stats.peakUsage, stats.peakTurn = u, tr.Turn
			}
			if rec.Tier != compaction.TierNone {
				stats.tokensSaved += rec.TokensBefore - rec.TokensAfter
				stats.offloaded += len(rec.Offloaded)
				stats.offloadedBytes += rec.OffloadedBytes()
			}
			if tr.ChangedView {
				stats.changedPerTier[rec.Tier]++
				saved := rec.TokensBefore - rec.TokensAfter
				share := 0.0
				if rec.TokensBefore > 0 {
					share = float64(saved) / float64(rec.TokensBefore)
				}
				if stats.minSavingTurn == 0 || share < stats.minSavingShare {
					stats.minSavingTurn, stats.minSavingShare, stats.minSavingTokens = tr.Turn, share, saved
				}
			}
			if err := emit(replayTurn{result: tr, record: rec, view: view, history: history[:len(history):len(history)]}); err != nil {
				return nil, nil, err
			}
		}
		m, err := hook.apply(ctx, msgs[i])
		if err != nil {
			return nil, nil, fmt.Errorf("message %d: %w", i, err)
		}
		history = append(history, m)
	}
	stats.cost = cost.totals
	if bg != nil {
		stats.offTurn.finish(bg)
	}
	return series, stats, nil
}

// summaryText renders the closing summary of a simulation.
func summaryText(name string, nmsgs int, cfg compaction.Config, summarizer, store, session string, s *simStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Summary of %s: %d messages, %d turns, window %d tokens, summarizer %s\n", name, nmsgs, s.turns, cfg.ContextWindow, summarizer)
	fmt.Fprintf(&b, "  compactions:      %d (Warn %d, Soft %d, Full %d, Emergency %d); %d changed the view (Warn %d, Soft %d, Full %d, Emergency %d)\n", s.compactions(),
		s.perTier[compaction.TierWarn], s.perTier[compaction.TierSoft], s.perTier[compaction.TierFull], s.perTier[compaction.TierEmergency],
		s.changedViews(), s.changedPerTier[compaction.TierWarn], s.changedPerTier[compaction.TierSoft], s.changedPerTier[compaction.TierFull], s.changedPerTier[compaction.TierEmergency])
	if s.turns > 0 {
		fmt.Fprintf(&b, "  peak usage:       %.1f%% at turn %d (before compaction)\n", s.peakUsage*100, s.peakTurn)
	} else {
		b.WriteString("  peak usage:       n/a (no turn to compact)\n")
	}
	saved := fmt.Sprintf("%d", s.tokensSaved)
	if s.tokensSaved >= 1000 {
		saved += " (" + humanCount(s.tokensSaved) + ")"
	}
	fmt.Fprintf(&b, "  tokens saved:     %s (sum of tokens before - after over all compactions)\n", saved)
	if s.minSavingTurn > 0 {
		fmt.Fprintf(&b, "  smallest saving:  %.1f%% of the view (%d tokens) at turn %d, among the compactions that changed the view\n",
			100*s.minSavingShare, s.minSavingTokens, s.minSavingTurn)
	}
	fmt.Fprintf(&b, "  offloads:         %d tool results, %s (during compaction)\n", s.offloaded, humanBytes(s.offloadedBytes))
	fmt.Fprintf(&b, "  hook offloads:    %d tool results, %s (at source)\n", s.hookOffloads, humanBytes(s.hookBytes))
	fmt.Fprintf(&b, "  summarizer:       %d calls, %d errors; recorded: %d calls, %d input + %d output tokens\n", s.summarizerCall, s.summarizerErrs,
		s.cost.SummarizerCalls, s.cost.SummarizerInputTokens, s.cost.SummarizerOutputTokens)
	if s.offTurn != nil {
		b.WriteString(offTurnSummary(s.offTurn))
	}
	b.WriteString(costText(&s.cost))
	fmt.Fprintf(&b, "  store:            %s (session %s)\n", store, session)
	return b.String()
}

// prefixLines puts prefix before the first line of text and aligns the other lines under it.
func prefixLines(prefix, text string) string {
	indent := strings.Repeat(" ", len([]rune(prefix)))
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var b strings.Builder
	for i, l := range lines {
		if i == 0 {
			b.WriteString(prefix)
		} else {
			b.WriteString(indent)
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func round4(v float64) float64 { return math.Round(v*10000) / 10000 }

func displayName(path string) string {
	if path == "-" {
		return "<stdin>"
	}
	return filepath.Base(path)
}

// freshState makes a replay start from an empty session state, whatever an earlier run
// saved under the same session ID; the replay's own saves overwrite it.
type freshState struct{ compaction.Store }

func (freshState) LoadState(context.Context, string) (*compaction.State, error) {
	return nil, compaction.ErrNotFound
}

// checkOutputDir fails early when the directory of an output file does not exist, so a
// long simulation does not end in an unwritable path.
func checkOutputDir(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("output %s: %w", path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("output %s: %s is not a directory", path, dir)
	}
	return nil
}

// writeFileAtomic writes data to a temporary file next to path and renames it over path,
// so a reader never sees half a file.
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Clean up after a failure: the file may already be closed, and a leftover
			// temporary file is harmless, so only the first error is reported.
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Summaries made off the turn (issue 29): --summarizer-latency replays a session whose
// summarizer takes that long, as the compaction API runs it (compaction.WithBackground), on
// simulated time: turns are --turn-interval apart (transcripts carry no timestamps), and a
// summarization handed off at one turn completes, between turns, at the first turn at least
// the latency later. Deterministic: the work runs synchronously, in the order it was handed.

const defaultTurnInterval = 5 * time.Second

// standInName names the extractive summarizer when it stands in for an LLM.
const standInName = "extractive-as-llm"

// offTurnFlags are --summarizer-latency, --turn-interval and --prepare-percent.
type offTurnFlags struct {
	latency  time.Duration
	interval time.Duration
	prepare  int
	fs       *flag.FlagSet
}

func addOffTurnFlags(fs *flag.FlagSet) *offTurnFlags {
	f := &offTurnFlags{fs: fs}
	fs.DurationVar(&f.latency, "summarizer-latency", 0, "model a summarizer that takes `DURATION` to answer, with summaries made off the turn as the\n"+
		"compaction API makes them: prepared ahead, or made late and merged at the next compaction;\n"+
		"0 (the default) waits for the summarizer on the turn. With --summarizer extractive, the\n"+
		"extractive summarizer stands in for the LLM ("+standInName+")")
	fs.DurationVar(&f.interval, "turn-interval", defaultTurnInterval, "simulated `DURATION` between two turns, with --summarizer-latency (transcripts carry no\ntimestamps)")
	fs.IntVar(&f.prepare, "prepare-percent", 0, "with --summarizer-latency, the usage in `percent` of the window from which the summary the\n"+
		"next Soft will need is prepared ahead, below --soft; 0 prepares from --warn (the policy's\nsummarizer.preparePercent)")
	return f
}

func (f *offTurnFlags) enabled() bool { return f.latency > 0 }

// check reports bad values and flags that would be ignored, as usage error messages.
func (f *offTurnFlags) check(ef *engineFlags) []error {
	var errs []error
	if f.latency < 0 {
		errs = append(errs, fmt.Errorf("--summarizer-latency %s must not be negative", f.latency))
	}
	if f.interval <= 0 {
		errs = append(errs, fmt.Errorf("--turn-interval %s must be positive", f.interval))
	}
	if f.prepare < 0 || (f.prepare > 0 && f.prepare >= ef.soft) {
		errs = append(errs, fmt.Errorf("--prepare-percent %d must be 0 (from --warn) or below --soft %d", f.prepare, ef.soft))
	}
	if f.latency == 0 {
		f.fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "turn-interval" || fl.Name == "prepare-percent" {
				errs = append(errs, fmt.Errorf("--%s only applies with --summarizer-latency", fl.Name))
			}
		})
	}
	if f.latency > 0 && ef.rawHistory {
		errs = append(errs, errors.New("--summarizer-latency does not apply with --raw-history (the seed spec summarizes on the turn)"))
	}
	return errs
}

// engine is the configuration and summarizer of a replay: those of ef, with a latency the
// prepare threshold of the flags and the extractive summarizer standing in for an LLM.
func (f *offTurnFlags) engine(ef *engineFlags) (compaction.Config, compaction.Summarizer, error) {
	cfg, err := ef.config()
	if err != nil {
		return compaction.Config{}, nil, err
	}
	if f.enabled() {
		cfg.PrepareThreshold = float64(f.prepare) / 100
	}
	s, err := ef.newSummarizer()
	if err != nil {
		return compaction.Config{}, nil, err
	}
	return cfg, f.summarizer(s), nil
}

// summarizer is the summarizer a replay uses: base, or with a latency the extractive one
// under another name, as the engine makes summaries off the turn only for a summarizer that
// takes time.
func (f *offTurnFlags) summarizer(base compaction.Summarizer) compaction.Summarizer {
	if f.enabled() && base.Name() == (compaction.ExtractiveSummarizer{}).Name() {
		return standIn{base}
	}
	return base
}

// standIn is the extractive summarizer standing in for an LLM of --summarizer-latency.
type standIn struct{ compaction.Summarizer }

func (standIn) Name() string { return standInName }

func (s standIn) SummarizeResult(ctx context.Context, req compaction.SummaryRequest) (compaction.SummaryResult, error) {
	res, err := compaction.Summarize(ctx, s.Summarizer, req)
	if err != nil {
		return res, fmt.Errorf("extractive summary: %w", err)
	}
	return res, nil
}

// background returns the simulated Background of a replay, nil without a latency.
func (f *offTurnFlags) background() *simBackground {
	if !f.enabled() {
		return nil
	}
	return &simBackground{latency: f.latency, interval: f.interval}
}

// simBackground is a compaction.Background on simulated time.
type simBackground struct {
	latency, interval time.Duration

	mu    sync.Mutex // the engine may hand work from any goroutine; a replay uses one
	now   time.Duration
	queue []simWork
	done  int // work items run
}

type simWork struct {
	due  time.Duration
	work func(context.Context)
}

// Go queues work, due once simulated time has advanced by the latency.
func (b *simBackground) Go(_ string, work func(context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = append(b.queue, simWork{due: b.now + b.latency, work: work})
	return true
}

// turnAt is the simulated time of turn n (1-based).
func (b *simBackground) turnAt(n int) time.Duration { return time.Duration(n-1) * b.interval }

// readyTurn is the first turn at which work handed off at turn n has completed.
func (b *simBackground) readyTurn(n int) int {
	return n + int((b.latency+b.interval-1)/b.interval)
}

// advance moves simulated time to that of turn n and runs, in the order they were handed,
// the work items due by then (with one latency for all, due times only grow).
func (b *simBackground) advance(ctx context.Context, n int) {
	b.mu.Lock()
	b.now = b.turnAt(n)
	b.mu.Unlock()
	for {
		b.mu.Lock()
		if len(b.queue) == 0 || b.queue[0].due > b.now {
			b.mu.Unlock()
			return
		}
		w := b.queue[0]
		b.queue = b.queue[1:]
		b.done++
		b.mu.Unlock()
		w.work(ctx)
	}
}

// pending is the number of work items not run yet.
func (b *simBackground) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// offTurnStats are the totals of summaries made off the turn in a replay; it is eval's
// "offTurn" object.
type offTurnStats struct {
	SummarizerLatency string `json:"summarizerLatency"`
	TurnInterval      string `json:"turnInterval"`
	// Compactions are the Soft and Full compactions that summarized: UsedPrepared used a
	// summary prepared ahead, Extractive summarized extractively at once (none was ready),
	// Waited waited for the summarizer on the turn (none when every summary is made off
	// the turn); LateMerged of them merged a late summary.
	Compactions  int `json:"compactions"`
	UsedPrepared int `json:"usedPrepared"`
	Extractive   int `json:"extractive"`
	Waited       int `json:"waited"`
	LateMerged   int `json:"lateMerged"`
	// Started summarizations off the turn (ahead and late); of them Used and Wasted were
	// used or discarded by a compaction (WastedTokens their input and output tokens, counted
	// in the cost), Running had not completed by the end of the transcript and Unused had
	// but no compaction took them.
	Started      int `json:"started"`
	StartedAhead int `json:"startedAhead"`
	StartedLate  int `json:"startedLate"`
	Used         int `json:"used"`
	Wasted       int `json:"wasted"`
	WastedTokens int `json:"wastedTokens"`
	Running      int `json:"running"`
	Unused       int `json:"unused"`
}

// add counts one turn's record.
func (s *offTurnStats) add(rec *compaction.CompactionRecord) {
	switch rec.PreparedStarted {
	case "ahead":
		s.Started++
		s.StartedAhead++
	case "late":
		s.Started++
		s.StartedLate++
	}
	s.Used += rec.PreparedUsed
	s.Wasted += rec.PreparedWasted
	s.WastedTokens += rec.PreparedWastedTokens
	if rec.PreparedLateMerged {
		s.LateMerged++
	}
	if rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull {
		return
	}
	switch {
	case rec.PreparedCovered > 0:
		s.UsedPrepared++
	case rec.SummarizerDeferred:
		s.Extractive++
	case rec.Summarized > 0:
		s.Waited++
	default:
		return // nothing summarized: a compaction that saved too little waited
	}
	s.Compactions++
}

// finish adds what the background still held at the end.
func (s *offTurnStats) finish(b *simBackground) {
	s.Running = b.pending()
	s.Unused = s.Started - s.Used - s.Wasted - s.Running
}

// offTurnText says what a turn did with summaries made off the turn, "" when nothing;
// b places the turn in time.
func offTurnText(rec *compaction.CompactionRecord, turn int, b *simBackground) string {
	var parts []string
	switch {
	case rec.PreparedCovered > 0:
		parts = append(parts, fmt.Sprintf("used the summary prepared ahead (it covers %d of the %d messages summarized)", rec.PreparedCovered, rec.Summarized))
	case rec.SummarizerDeferred:
		parts = append(parts, "no prepared summary ready: summarized extractively at once")
	}
	if rec.PreparedLateMerged {
		parts = append(parts, "merged the late summary")
	}
	if rec.PreparedWasted > 0 {
		parts = append(parts, fmt.Sprintf("discarded %d (%s tokens wasted)", rec.PreparedWasted, humanCount(rec.PreparedWastedTokens)))
	}
	switch rec.PreparedStarted {
	case "ahead":
		parts = append(parts, fmt.Sprintf("started a summary ahead, ready at turn %d", b.readyTurn(turn)))
	case "late":
		parts = append(parts, fmt.Sprintf("started the summary of the same messages, ready at turn %d and merged at the next compaction", b.readyTurn(turn)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "off the turn: " + strings.Join(parts, "; ")
}

// offTurnSummary renders the totals for simulate's summary.
func offTurnSummary(s *offTurnStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  off the turn:     summarizer latency %s, a turn every %s; %d Soft/Full compactions summarized: %d used a prepared summary, %d summarized extractively at once, %d waited (%d merged a late summary)\n",
		s.SummarizerLatency, s.TurnInterval, s.Compactions, s.UsedPrepared, s.Extractive, s.Waited, s.LateMerged)
	fmt.Fprintf(&b, "  off-turn calls:   %d summaries started (%d ahead, %d late): %d used, %d wasted (%s tokens, in the cost), %d still running and %d unused at the end\n",
		s.Started, s.StartedAhead, s.StartedLate, s.Used, s.Wasted, humanCount(s.WastedTokens), s.Running, s.Unused)
	return b.String()
}
