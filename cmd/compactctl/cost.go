package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
)

// Prompt-cache cost accounting for simulate and eval (issue 13).
//
// Every turn sends a view. A provider's prompt cache holds what it was last sent, followed
// by the reply it generated; the cached part of the next request is the longest common
// prefix, in whole messages, of that request and the cache. A turn's view costs
// read*cached + write*(input-cached): the uncached rest is written to the cache, as every
// request with a cache breakpoint at its end does. A session costs the sum over its turns
// plus its summarizer tokens at the fresh price. The baseline is the agent's raw history
// (every message so far, after the OffloadHook) sent whole every turn: no compaction, an
// unbounded window, counted the same way; "cost vs raw" is the session's cost over the
// baseline's.

// Defaults of the price flags: relative prices per token, the fresh input price being 1.
const (
	defaultPriceFresh      = 1.0
	defaultPriceCacheRead  = 0.1
	defaultPriceCacheWrite = 1.25
)

// prices is the price model, per estimated token in any unit (only ratios are reported).
type prices struct {
	Fresh      float64 `json:"fresh"`      // summarizer input and output tokens
	CacheRead  float64 `json:"cacheRead"`  // input tokens found in the prompt cache
	CacheWrite float64 `json:"cacheWrite"` // input tokens not in it, written to it
}

// addPriceFlags registers --price-fresh, --price-cache-read and --price-cache-write.
func addPriceFlags(fs *flag.FlagSet) *prices {
	p := &prices{}
	fs.Float64Var(&p.Fresh, "price-fresh", defaultPriceFresh, "`price` of a summarizer input or output token (fresh: no prompt cache); prices are per\nestimated token, in any unit (only their ratios matter to cost vs raw)")
	fs.Float64Var(&p.CacheRead, "price-cache-read", defaultPriceCacheRead, "`price` of a view's input token read from the prompt cache (the prefix shared with the\nprevious view followed by its reply)")
	fs.Float64Var(&p.CacheWrite, "price-cache-write", defaultPriceCacheWrite, "`price` of a view's input token not in the prompt cache (written to it); must be above 0")
	return p
}

// check reports bad prices, each as a usage error message.
func (p prices) check() []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"price-fresh", p.Fresh}, {"price-cache-read", p.CacheRead}, {"price-cache-write", p.CacheWrite}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %v must be a finite price, at least 0", f.name, f.v))
		}
	}
	if p.CacheWrite == 0 {
		// The baseline would cost nothing: cost vs raw would have no meaning.
		errs = append(errs, errors.New("--price-cache-write must be above 0"))
	}
	return errs
}

// viewCost is the price of sending input tokens of which cached were in the prompt cache.
func (p prices) viewCost(input, cached int) float64 {
	return p.CacheRead*float64(cached) + p.CacheWrite*float64(input-cached)
}

// summarizerCost is the price of the summarizer's tokens.
func (p prices) summarizerCost(in, out int) float64 {
	return p.Fresh * float64(in+out)
}

// sameMessage reports whether a provider receives a and b as the same message: every field
// but Pinned, a local mark that is never sent.
func sameMessage(a, b *compaction.Message) bool {
	x, y := *a, *b
	x.Pinned, y.Pinned = false, false
	return x.Equal(&y)
}

// commonPrefix is the number of leading messages view shares with prev followed by reply.
func commonPrefix(view, prev, reply []compaction.Message) int {
	n := 0
	for n < len(view) {
		var c *compaction.Message
		switch {
		case n < len(prev):
			c = &prev[n]
		case n-len(prev) < len(reply):
			c = &reply[n-len(prev)]
		default:
			return n
		}
		if !sameMessage(&view[n], c) {
			return n
		}
		n++
	}
	return n
}

// replyAfter is the reply the LLM gave to a view: the assistant messages that open what the
// history gained after the view was taken. Tool results and user messages that follow are
// new input the provider has not seen: they are not in its cache.
func replyAfter(appended []compaction.Message) []compaction.Message {
	n := 0
	for n < len(appended) && appended[n].Role == compaction.RoleAssistant {
		n++
	}
	return appended[:n:n]
}

// promptCache models one provider's prompt cache across the requests of a session.
type promptCache struct {
	prev, reply []compaction.Message
}

// send accounts for one request: its input tokens and how many of them were cached. The
// view is kept (not copied): the caller must not modify it afterwards.
func (c *promptCache) send(view []compaction.Message) (input, cached int) {
	k := commonPrefix(view, c.prev, c.reply)
	input, cached = compaction.EstimateTokens(view), compaction.EstimateTokens(view[:k])
	c.prev, c.reply = view, nil
	return input, cached
}

// replied adds the reply to the last request to the cache.
func (c *promptCache) replied(reply []compaction.Message) {
	c.reply = reply
}

// turnCost is the cost accounting of one turn; it is part of simulate's JSON series.
type turnCost struct {
	// InputTokens is the estimate of the view sent; CachedTokens the estimate of its
	// leading messages found in the prompt cache.
	InputTokens  int `json:"inputTokens"`
	CachedTokens int `json:"cachedTokens"`
	// RawTokens and RawCachedTokens are the same for the raw history: the whole history so
	// far (after the OffloadHook), uncompacted.
	RawTokens       int `json:"rawTokens"`
	RawCachedTokens int `json:"rawCachedTokens"`
	// The summarizer's work in this turn's compaction, from its record.
	SummarizerCalls        int `json:"summarizerCalls"`
	SummarizerInputTokens  int `json:"summarizerInputTokens"`
	SummarizerOutputTokens int `json:"summarizerOutputTokens"`
	// ChangedView: a compaction above None that changed the view.
	ChangedView bool `json:"changedView"`
	// Cost is the view's cost plus the summarizer's; RawCost the raw transcript's.
	Cost    float64 `json:"cost"`
	RawCost float64 `json:"rawCost"`
}

// costTotals is the cost accounting of a session; it is eval's "cost" object.
type costTotals struct {
	Prices                 prices  `json:"prices"`
	InputTokens            int     `json:"inputTokens"`
	CachedTokens           int     `json:"cachedTokens"`
	CacheHit               float64 `json:"cacheHit"` // cached / input; 0 without input
	PeakTokens             int     `json:"peakTokens"`
	RawInputTokens         int     `json:"rawInputTokens"`
	RawCachedTokens        int     `json:"rawCachedTokens"`
	RawCacheHit            float64 `json:"rawCacheHit"`
	RawPeakTokens          int     `json:"rawPeakTokens"`
	SummarizerCalls        int     `json:"summarizerCalls"`
	SummarizerInputTokens  int     `json:"summarizerInputTokens"`
	SummarizerOutputTokens int     `json:"summarizerOutputTokens"`
	// WastedCalls and WastedTokens are the summaries made off the turn that a compaction
	// discarded (--summarizer-latency): already in the summarizer's calls and tokens, as
	// their records count them, so in the cost; absent when none.
	WastedCalls  int     `json:"wastedCalls,omitempty"`
	WastedTokens int     `json:"wastedTokens,omitempty"`
	Cost         float64 `json:"cost"`
	RawCost      float64 `json:"rawCost"`
	CostVsRaw    float64 `json:"costVsRaw"` // cost / rawCost; 0 without input
}

// finish computes the derived figures from the sums. The costs are computed from the token
// sums, so equal sums give exactly equal costs.
func (t *costTotals) finish() {
	t.Cost = t.Prices.viewCost(t.InputTokens, t.CachedTokens) + t.Prices.summarizerCost(t.SummarizerInputTokens, t.SummarizerOutputTokens)
	t.RawCost = t.Prices.viewCost(t.RawInputTokens, t.RawCachedTokens)
	t.CacheHit, t.RawCacheHit, t.CostVsRaw = 0, 0, 0
	if t.InputTokens > 0 {
		t.CacheHit = float64(t.CachedTokens) / float64(t.InputTokens)
	}
	if t.RawInputTokens > 0 {
		t.RawCacheHit = float64(t.RawCachedTokens) / float64(t.RawInputTokens)
	}
	if t.RawCost > 0 {
		t.CostVsRaw = t.Cost / t.RawCost
	}
}

// costTracker accounts for the turns of one replay: the views the compactor returns and the
// raw history beside them.
type costTracker struct {
	totals  costTotals
	view    promptCache
	raw     promptCache
	histLen int // length of the history when the last view was taken
	started bool
}

func newCostTracker(p prices) *costTracker {
	return &costTracker{totals: costTotals{Prices: p}}
}

// turn accounts for the turn whose view was compacted from history, the agent's raw history
// (every message so far, after the OffloadHook), which only grows from turn to turn. Neither
// slice may be modified afterwards.
func (t *costTracker) turn(view, history []compaction.Message, rec *compaction.CompactionRecord) turnCost {
	if t.started {
		reply := replyAfter(history[min(t.histLen, len(history)):])
		t.view.replied(reply)
		t.raw.replied(reply)
	}
	t.started, t.histLen = true, len(history)
	var tc turnCost
	tc.InputTokens, tc.CachedTokens = t.view.send(view)
	tc.RawTokens, tc.RawCachedTokens = t.raw.send(history)
	if rec != nil {
		tc.SummarizerCalls = rec.SummarizerCalls
		tc.SummarizerInputTokens, tc.SummarizerOutputTokens = rec.SummarizerInputTokens, rec.SummarizerOutputTokens
		tc.ChangedView = rec.ChangedView()
	}
	p := t.totals.Prices
	tc.Cost = round4(p.viewCost(tc.InputTokens, tc.CachedTokens) + p.summarizerCost(tc.SummarizerInputTokens, tc.SummarizerOutputTokens))
	tc.RawCost = round4(p.viewCost(tc.RawTokens, tc.RawCachedTokens))

	s := &t.totals
	s.InputTokens += tc.InputTokens
	s.CachedTokens += tc.CachedTokens
	s.PeakTokens = max(s.PeakTokens, tc.InputTokens)
	s.RawInputTokens += tc.RawTokens
	s.RawCachedTokens += tc.RawCachedTokens
	s.RawPeakTokens = max(s.RawPeakTokens, tc.RawTokens)
	s.SummarizerCalls += tc.SummarizerCalls
	s.SummarizerInputTokens += tc.SummarizerInputTokens
	s.SummarizerOutputTokens += tc.SummarizerOutputTokens
	if rec != nil {
		s.WastedCalls += rec.PreparedWasted
		s.WastedTokens += rec.PreparedWastedTokens
	}
	s.finish()
	return tc
}

// costText renders the session figures for simulate's summary.
func costText(t *costTotals) string {
	if t.InputTokens == 0 {
		return "  prompt cache:     n/a (no turn)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  prompt cache:     %.1f%% of %s input tokens cached, raw history %.1f%% of %s (peak view %s, raw peak %s tokens)\n",
		100*t.CacheHit, humanCount(t.InputTokens), 100*t.RawCacheHit, humanCount(t.RawInputTokens), humanCount(t.PeakTokens), humanCount(t.RawPeakTokens))
	wasted := ""
	if t.WastedCalls > 0 {
		wasted = fmt.Sprintf("; with %d wasted summarizer calls, %s tokens", t.WastedCalls, humanCount(t.WastedTokens))
	}
	fmt.Fprintf(&b, "  cost vs raw:      %.2f (%s vs %s; per token: cache read %g, cache write %g, summarizer %g%s)\n",
		t.CostVsRaw, humanCount(int(math.Round(t.Cost))), humanCount(int(math.Round(t.RawCost))), t.Prices.CacheRead, t.Prices.CacheWrite, t.Prices.Fresh, wasted)
	return b.String()
}
