package compaction

import (
	"context"
	"fmt"
	"math"
	"time"
)

// The calibration factor (real/estimated prompt tokens) stays within these bounds, so one
// odd report (a prompt with large tool definitions, a caller's bug) cannot make the engine
// think a view is empty or four times the window.
const (
	minCalibration = 0.25
	maxCalibration = 4.0
	// calibrationWeight is how much one report moves the factor: several agree before the
	// tier changes because of them.
	calibrationWeight = 0.3
	// calibrationSaveShift is the relative change of the factor that is worth a state write
	// on a turn that writes nothing else.
	calibrationSaveShift = 0.10
)

// clampCalibration bounds a factor read from storage; 0 (none learnt) stays 0.
func clampCalibration(f float64) float64 {
	if f <= 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return min(max(f, minCalibration), maxCalibration)
}

// calibrated scales an estimate by the session's factor.
func calibrated(tokens int, factor float64) int {
	return int(math.Round(float64(tokens) * factor))
}

// calibrate folds the caller's report of its last prompt (promptTokens, 0 when not sent)
// into the session's factor and returns the factor to use this turn (1 until one report).
// The report measures the view this compactor returned last; after a restart that view is
// unknown and the report is not used.
func (c *ProgressiveCompactor) calibrate(promptTokens int, rec *CompactionRecord) float64 {
	f := c.state.Calibration
	if promptTokens > 0 && c.lastViewTokens > 0 {
		sample := min(max(float64(promptTokens)/float64(c.lastViewTokens), minCalibration), maxCalibration)
		if f == 0 {
			f = sample
		} else {
			f += calibrationWeight * (sample - f)
		}
		c.state.Calibration = f
		if sample == minCalibration || sample == maxCalibration {
			rec.Notes = append(rec.Notes, fmt.Sprintf("reported promptTokens %d is out of bounds for the last view's %d estimated tokens: counted as %.2fx",
				promptTokens, c.lastViewTokens, sample))
		}
	}
	if f == 0 {
		return 1
	}
	return f
}

// calibrationMoved reports whether the factor moved enough since the stored state to be
// worth saving on its own.
func (c *ProgressiveCompactor) calibrationMoved() bool {
	f, saved := c.state.Calibration, c.savedCalibration
	if f == 0 {
		return false
	}
	return saved == 0 || math.Abs(f-saved) > calibrationSaveShift*saved
}

// finishUsage fills the record's calibrated usage after the compaction and the room left
// before the next tier, and remembers the view's estimate for the next report.
func (c *ProgressiveCompactor) finishUsage(rec *CompactionRecord, factor float64) {
	after := calibrated(rec.TokensAfter, factor)
	rec.UsageAfter = c.cfg.Usage(after)
	rec.NextTier, rec.TokensToNextTier = c.cfg.NextTier(after)
	c.lastViewTokens = rec.TokensAfter
}

// shown is msgs with every result offloaded before shown as its placeholder (not with
// RawHistory, which replays the seed spec: each turn starts from the caller's raw history).
func (c *ProgressiveCompactor) shown(msgs []Message) []Message {
	if c.offloader == nil || c.cfg.RawHistory {
		return msgs
	}
	return c.offloader.ApplyKnown(msgs)
}

// targetChars is the target usage as estimated characters (the estimate's unit before /4).
func (c *ProgressiveCompactor) targetChars() int {
	return int(c.cfg.TargetThreshold * float64(c.windowChars()))
}

// warn is the Warn tier: large tool results of the head go to storage, in one batch worth
// its cost. Each offload changes the view from that message on, so a provider bills all
// that follows as new input again: results are taken from the newest in the head backwards,
// only as many as bring the view to the target, and none at all unless together they save
// MinSaving of the view. Until then they wait; usage grows into Soft, which offloads them
// with the span it summarizes anyway.
func (c *ProgressiveCompactor) warn(ctx context.Context, t *turn, view []Message, rec *CompactionRecord) []Message {
	head, tail := splitRest(t.rest, c.cfg.MinTailMessages)
	rec.PreservedTail = len(tail)
	if c.offloader == nil {
		return t.view()
	}
	if c.cfg.RawHistory {
		// The seed spec, which RawHistory replays: every large result of the head, every turn.
		return concat(t.system, t.carried, c.offload(ctx, t, head, rec), tail)
	}
	viewChars := charsOf(view)
	goal := viewChars - c.targetChars()
	saved, from := 0, len(head)
	for i := len(head) - 1; i >= 0 && saved < goal; i-- {
		if b := c.offloader.offloadSaving(&head[i]); b > 0 {
			saved += b
			from = i
		}
	}
	if minChars := int(c.cfg.MinSaving * float64(viewChars)); saved < minChars || saved == 0 {
		rec.Notes = append(rec.Notes, fmt.Sprintf("offload deferred: the large tool results of the head would save %.0f%% of the view (%d tokens), under the %.0f%% minimum",
			100*float64(saved)/float64(max(viewChars, 1)), saved/4, 100*c.cfg.MinSaving))
		return t.view()
	}
	return concat(t.system, t.carried, head[:from], c.offload(ctx, t, head[from:], rec), tail)
}

// summarizeToTarget is the Soft and Full flow, converging in one step: the compaction
// brings the view down to TargetThreshold, so the next one is many turns away instead of
// one or two, and none is done that saves too little to pay for its summarizer call and the
// rewrite of the cached prompt.
//   - Soft summarizes the oldest half of the head when that is predicted to reach the target
//     and save MinSaving of the view; otherwise the whole head, as Full, in the same turn.
//   - Full is not done when even the whole head would save less than MinSaving (a tail of
//     large recent results): the view waits, and Emergency catches an overflow.
//   - a Soft summary that still leaves the view above the target is followed by the rest of
//     the head in the same turn (a second call, only when the prediction was wrong).
//
// A Full result above the target (the preserved tail alone is that large) is kept: it is
// below the Emergency threshold, since Full runs below it and a summary is used only when it
// makes the view smaller. Emergency is for overflow, not for the target.
func (c *ProgressiveCompactor) summarizeToTarget(ctx context.Context, t *turn, view []Message, rec *CompactionRecord) []Message {
	head, tail := splitRest(t.rest, c.cfg.MinTailMessages)
	rec.PreservedTail = len(t.rest)
	if len(head) == 0 {
		rec.Notes = append(rec.Notes, fmt.Sprintf("nothing older than the last %d messages to summarize", c.cfg.MinTailMessages))
		return t.view()
	}
	viewChars := charsOf(view)
	target := c.targetChars()
	minChars := int(c.cfg.MinSaving * float64(viewChars))
	if rec.Tier == TierSoft {
		soft, kept := splitHalf(head)
		s, ok := c.predicts(t, soft, func(s int) bool { return s >= minChars && viewChars-s <= target })
		if ok {
			// Everything after the new compaction message is new to the provider's cache
			// anyway: the large results of the kept half go to storage in the same rewrite.
			kept = c.offload(ctx, t, kept, rec)
			out := c.summarizeSpan(ctx, t, soft, kept, tail, rec)
			if rec.Summarized == 0 || len(kept) == 0 || charsOf(closeView(c.shown(out))) <= target {
				c.noteSmallSaving(out, viewChars, rec)
				return out
			}
			rec.Notes = append(rec.Notes, "Soft result above the target: the rest of the head summarized too (Full)")
			rec.Tier = TierFull
			done := rec.Summarized
			t2 := turn{system: t.system, carried: c.carried(), rest: t.rest[len(soft):], base: t.base + len(soft)}
			rec.Summarized = 0
			out = c.summarizeSpan(ctx, &t2, kept, nil, tail, rec)
			rec.Summarized += done
			c.noteSmallSaving(out, viewChars, rec)
			return out
		}
		rec.Notes = append(rec.Notes, fmt.Sprintf("Soft escalated to Full: the oldest half of the head would bring the view to %.0f%% of the window (target %.0f%%)",
			100*float64(viewChars-s)/float64(c.windowChars()), 100*c.cfg.TargetThreshold))
		rec.Tier = TierFull
	}
	if s, ok := c.predicts(t, head, func(s int) bool { return s >= minChars }); !ok {
		rec.Notes = append(rec.Notes, fmt.Sprintf("summarization deferred: the whole head would save %.0f%% of the view, under the %.0f%% minimum",
			100*float64(s)/float64(max(viewChars, 1)), 100*c.cfg.MinSaving))
		return t.view()
	}
	out := c.summarizeSpan(ctx, t, head, nil, tail, rec)
	c.noteSmallSaving(out, viewChars, rec)
	return out
}

// noteSmallSaving says in the record when a summary turned out larger than predicted and the
// compaction saved less than MinSaving. It is kept: the call is paid, and dropping it would
// only have the next turn pay for another.
func (c *ProgressiveCompactor) noteSmallSaving(out []Message, viewChars int, rec *CompactionRecord) {
	if rec.Summarized == 0 || viewChars == 0 {
		return
	}
	if saved := 1 - float64(charsOf(closeView(c.shown(out))))/float64(viewChars); saved < c.cfg.MinSaving {
		rec.Notes = append(rec.Notes, fmt.Sprintf("saved %.0f%% of the view, under the %.0f%% minimum: the summary was larger than predicted", 100*saved, 100*c.cfg.MinSaving))
	}
}

// predicts reports whether the predicted saving of summarizing span is enough, and that
// prediction (predictSaving). A lower bound is tried first: when it is enough, so is the
// prediction (ok only grows with the saving, and the saving with what offloading saves),
// and the large results' placeholders are rendered beside the writes that store them
// instead of before. Only an answer of no needs them now, for the prediction's exact value.
func (c *ProgressiveCompactor) predicts(t *turn, span []Message, ok func(saving int) bool) (int, bool) {
	if s := c.predictSaving(t, span, false); ok(s) {
		return s, true
	}
	s := c.predictSaving(t, span, true)
	return s, ok(s)
}

// predictSaving estimates, before any call or write, how many characters summarizing span
// (the first messages of t.rest) takes out of the view: the span as shown and the compaction
// message it replaces, less the new compaction message and the pins the span adds. The new
// message is a guess on the safe side, which the Soft flow corrects after the call. Unless
// exact, what offloading the span's results saves is a lower bound (offloadSavings), and so
// is the estimate.
func (c *ProgressiveCompactor) predictSaving(t *turn, span []Message, exact bool) int {
	shownSpan := c.shown(span)
	spanChars := charsOf(shownSpan)
	// What the summarizer reads: the span once its large results are offloaded.
	summarized := spanChars
	if c.offloader != nil {
		summarized -= c.offloader.offloadSavings(shownSpan, exact)
	}
	old := c.compactionChars(t)
	// The merged message grows by a few percent of the span in most compactions, up to a
	// third of it (measured over the real transcripts at 8k-32k); a tenth keeps the
	// prediction on the safe side in nine cases of ten. A first one is about a sixth.
	msg := min(summarized/3, c.windowChars()/5)
	if old > 0 {
		msg = max(old, min(old+summarized/10, c.windowChars()/3+minProseChars))
	}
	pins := 0
	if !c.cfg.RawHistory {
		room := c.pinBudgetChars() - charsOf(pinMessages(c.state.Pins))
		for _, p := range c.newPinCandidates(t, len(span)) {
			pins += p.Message.Chars()
		}
		pins = min(pins, max(room, 0))
	}
	return spanChars + old - msg - pins
}

// countSummarizer counts one summarizer call with its tokens: the server's usage when it
// reported one, otherwise estimated from the prompt an LLM summarizer would be sent and the
// answer.
func (r *CompactionRecord) countSummarizer(m *extractMemo, req SummaryRequest, res SummaryResult) {
	in, out := res.Usage.InputTokens, res.Usage.OutputTokens
	if in <= 0 {
		// The prompt an LLM summarizer is sent (each message bounded, see BuildSummaryPrompt).
		in = (len(SummaryInstructions) + summaryPromptLen(m, req)) / 4
	}
	if out <= 0 {
		out = res.size() / 4
	}
	r.SummarizerCalls++
	r.SummarizerInputTokens += in
	r.SummarizerOutputTokens += out
}

// summarizerFor is the summarizer of this compaction and whether it is the session's own
// (counted in the record): the extractive one instead when SummarizerCallsPerHour calls of
// the last hour used up the session's budget. A call is charged to the budget when it is
// made, whatever its outcome. The calls are counted in the state, or in the shared budget
// of WithSummarizerBudget; one that cannot be charged (its storage fails) is not made.
func (c *ProgressiveCompactor) summarizerFor(ctx context.Context, rec *CompactionRecord) (Summarizer, bool) {
	limit := c.cfg.SummarizerCallsPerHour
	// By name: a server wraps the extractive summarizer (to time it) and it stays free.
	if limit == 0 || c.summarizer.Name() == (ExtractiveSummarizer{}).Name() {
		return c.summarizer, true
	}
	now := c.now()
	if c.budget != nil {
		ok, next, err := c.budget.Charge(ctx, now, limit)
		switch {
		case err != nil:
			// Spend protection wins: without a count, no paid call. The view is still made.
			rec.SummarizerThrottled = true
			rec.Notes = append(rec.Notes, fmt.Sprintf("summarizer budget unavailable (%v): summarized extractively", err))
			return ExtractiveSummarizer{}, false
		case !ok:
			rec.SummarizerThrottled = true
			rec.Notes = append(rec.Notes, budgetUsedUp(limit, next))
			return ExtractiveSummarizer{}, false
		}
		return c.summarizer, true
	}
	calls := pruneCalls(c.state.SummarizerCalls, now)
	if len(calls) >= limit {
		c.state.SummarizerCalls = calls
		rec.SummarizerThrottled = true
		rec.Notes = append(rec.Notes, budgetUsedUp(limit, calls[0].Add(time.Hour)))
		return ExtractiveSummarizer{}, false
	}
	c.state.SummarizerCalls = append(calls, now)
	c.budgetCharged = true
	return c.summarizer, true
}

func budgetUsedUp(limit int, next time.Time) string {
	return fmt.Sprintf("summarizer budget of %d calls per hour used up (next call allowed at %s): summarized extractively",
		limit, next.UTC().Format(time.RFC3339))
}

// pruneCalls drops the calls (oldest first) made an hour or more before now.
func pruneCalls(calls []time.Time, now time.Time) []time.Time {
	for len(calls) > 0 && now.Sub(calls[0]) >= time.Hour {
		calls = calls[1:]
	}
	return calls
}
