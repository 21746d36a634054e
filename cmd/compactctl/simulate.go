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
	plot   string
	quiet  bool
	json   bool
	prices *prices
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

The replay always starts the session from an empty state, whatever an earlier run left in the
store; offloaded results and records are written under --store (by default .harness9/ in a
per-user cache directory, see -h; --store '' keeps everything in memory).`,
		example: `  compactctl simulate --context-window 32000 --store '' --plot usage.svg session.jsonl
  compactctl simulate --json --store '' session.jsonl | jq -c 'select(.tier != "None")'`,
		flags: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			ef := addEngineFlags(fs)
			sf := &simulateFlags{}
			fs.StringVar(&sf.plot, "plot", "", "write an SVG chart of the context usage per turn to `FILE`")
			fs.BoolVar(&sf.quiet, "quiet", false, "do not print the per-turn notifications, only the summary")
			fs.BoolVar(&sf.json, "json", false, "print the per-turn series as JSON lines (turn, index, tier, tokensBefore, tokensAfter,\nusageBefore, usageAfter, msgsBefore, msgsAfter; usage as a ratio; inputTokens, cachedTokens,\nrawTokens, rawCachedTokens, summarizerCalls, summarizerInputTokens, summarizerOutputTokens,\nchangedView, cost, rawCost) instead of notifications; the summary goes to standard error")
			sf.prices = addPriceFlags(fs)
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
	if errs := sf.prices.check(); len(errs) > 0 {
		return &usageError{err: errors.Join(errs...)}
	}
	cfg, err := ef.config()
	if err != nil {
		return err
	}
	base, err := ef.newSummarizer()
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
	c, err := compaction.NewProgressiveCompactor(cfg,
		compaction.WithStore(freshState{store}),
		compaction.WithSummarizer(summarizer),
		compaction.WithSessionID(ef.sessionID),
		compaction.WithLogger(ef.logger(std.err)),
	)
	if err != nil {
		return fmt.Errorf("create compactor: %w", err)
	}

	out := bufio.NewWriter(std.out)
	// On the error paths below, still show the turns written so far. The error returned is
	// the one worth reporting; the success path checks its own Flush.
	defer func() { _ = out.Flush() }()
	hook := &hookOffloader{off: c.Offloader(), threshold: ef.hookThreshold}
	series, stats, err := replay(ctx, c, hook, msgs, *sf.prices, func(t replayTurn) error {
		tr, rec := t.result, t.record
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
		case sf.quiet || rec.Tier == compaction.TierNone:
			return nil
		default:
			if _, err := io.WriteString(out, prefixLines(fmt.Sprintf("[turn %d] ", tr.Turn), rec.Notification())); err != nil {
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

// replay runs the turns of msgs through c and calls emit after each; the cost of every turn
// is accounted with prices.
func replay(ctx context.Context, c *compaction.ProgressiveCompactor, hook *hookOffloader, msgs []compaction.Message,
	p prices, emit func(replayTurn) error) ([]turnResult, *simStats, error) {
	cfg := c.Config()
	stats := &simStats{}
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
