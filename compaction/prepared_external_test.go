package compaction_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// queueBackground is a Background whose work runs only when the test says (run), so each
// test decides whether a summary is ready at the crossing.
type queueBackground struct {
	mu     sync.Mutex
	works  []func(context.Context)
	reject bool
}

func (q *queueBackground) Go(_ string, work func(context.Context)) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.reject {
		return false
	}
	q.works = append(q.works, work)
	return true
}

// run runs the queued work, on a context of its own (the turn's has ended), and returns how
// many ran.
func (q *queueBackground) run() int {
	q.mu.Lock()
	works := q.works
	q.works = nil
	q.mu.Unlock()
	for _, w := range works {
		w(context.Background())
	}
	return len(works)
}

// llmSummarizer stands for an LLM: its answers carry a marker the extractive summarizer
// never writes, and it counts its calls.
type llmSummarizer struct {
	mu    sync.Mutex
	calls int
	fail  bool
}

func (l *llmSummarizer) setFail(v bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail = v
}

const llmMarker = "LLM-DECISION use the prepared parser"

func (l *llmSummarizer) Name() string { return "llm" }

func (l *llmSummarizer) Summarize(context.Context, compaction.SummaryRequest) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.fail {
		return "", errors.New("model overloaded")
	}
	anchors := []compaction.Anchor{{Type: compaction.AnchorKeyDecision, Content: "- " + llmMarker}}
	return compaction.FormatSummary(anchors, "LLM prose: the agent fixes the parser."), nil
}

func (l *llmSummarizer) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// offTurnSession is a session whose summarizer is an LLM and whose summaries are made off
// the turn, on a long history crossing Warn, Soft and Full.
type offTurnSession struct {
	t       *testing.T
	history []compaction.Message
	turns   []int
	store   *versionedStore
	bg      *queueBackground
	llm     *llmSummarizer
	cfg     compaction.Config
}

func newOffTurnSession(t *testing.T) *offTurnSession {
	t.Helper()
	h := genHistory(rand.New(rand.NewPCG(29, 1)), 160)
	cfg := compaction.DefaultConfig(windowFor(h, 2.5))
	// Nothing offloaded: Warn would keep this history under Soft for good.
	cfg.OffloadThreshold, cfg.HookThreshold = 1<<30, 1<<30
	return &offTurnSession{t: t, history: h, turns: compaction.AssistantTurns(h), store: newVersionedStore(),
		bg: &queueBackground{}, llm: &llmSummarizer{}, cfg: cfg}
}

func (s *offTurnSession) compactor() *compaction.ProgressiveCompactor {
	s.t.Helper()
	c, err := compaction.NewProgressiveCompactor(s.cfg, compaction.WithSummarizer(s.llm), compaction.WithStore(s.store), compaction.WithSessionID("sess-29"),
		compaction.WithBackground(s.bg), compaction.WithStateRevalidation())
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// turn compacts the history's first n messages and checks the LLM was not called on the
// turn.
func (s *offTurnSession) turn(c *compaction.ProgressiveCompactor, n int) ([]compaction.Message, *compaction.CompactionRecord) {
	s.t.Helper()
	before := s.llm.count()
	out, rec, err := c.CompactWithRecord(context.Background(), s.history[:n])
	if err != nil {
		s.t.Fatalf("turn at %d messages: %v", n, err)
	}
	if got := s.llm.count(); got != before {
		s.t.Fatalf("turn at %d messages (%s): the LLM summarizer was called on the turn", n, rec.Tier)
	}
	return out, rec
}

func hasMarker(view []compaction.Message) bool {
	for i := range view {
		if strings.Contains(view[i].Content, llmMarker) {
			return true
		}
	}
	return false
}

// TestPreparedAheadAndUsed: past Warn the summary the next Soft needs is prepared off the
// turn; the crossing uses it at once (no call on the turn), the LLM's anchors are in the
// view, and the record counts the call.
func TestPreparedAheadAndUsed(t *testing.T) {
	s := newOffTurnSession(t)
	c := s.compactor()
	started, used := false, false
	for _, n := range s.turns {
		view, rec := s.turn(c, n)
		if rec.PreparedStarted == "ahead" {
			started = true
			if s.bg.run() != 1 {
				t.Fatal("an ahead preparation was reported but not queued")
			}
		}
		if rec.Tier == compaction.TierSoft || rec.Tier == compaction.TierFull {
			if !started {
				continue
			}
			if rec.PreparedUsed != 1 || rec.PreparedCovered == 0 || rec.SummarizerCalls != 1 || rec.SummarizerDeferred {
				t.Fatalf("crossing at %d: used %d, covered %d, calls %d, deferred %v; notes %q", n, rec.PreparedUsed, rec.PreparedCovered, rec.SummarizerCalls, rec.SummarizerDeferred, rec.Notes)
			}
			if !hasMarker(view) {
				t.Fatalf("crossing at %d: the prepared LLM anchors are not in the view", n)
			}
			used = true
			break
		}
	}
	if !started || !used {
		t.Fatalf("no preparation (%v) or no crossing that used it (%v)", started, used)
	}
	if s.llm.count() != 1 {
		t.Errorf("LLM calls = %d, want 1 (the prepared one)", s.llm.count())
	}
}

// TestPreparedStale: a summary prepared for messages the agent then rewrote is discarded
// (the record says so and counts it as wasted), and the crossing is summarized
// extractively at once with the LLM started late.
func TestPreparedStale(t *testing.T) {
	s := newOffTurnSession(t)
	c := s.compactor()
	rewritten := false
	for _, n := range s.turns {
		if rewritten {
			// The agent edited a message the prepared span covers.
			s.history[len(s.history[:n])/2].Content += " (edited)"
		}
		_, rec := s.turn(c, n)
		if rec.PreparedStarted == "ahead" && !rewritten {
			s.bg.run()
			rewritten = true
			// Rewrite an early message of the span: the system prompt and task are pinned, so
			// change the first message after them.
			for i := 2; i < n; i++ {
				if s.history[i].Role == compaction.RoleAssistant && s.history[i].Content != "" {
					s.history[i].Content += " (rewritten)"
					break
				}
			}
			continue
		}
		if rewritten && (rec.Tier == compaction.TierSoft || rec.Tier == compaction.TierFull) {
			if rec.PreparedWasted != 1 || rec.PreparedUsed != 0 || !rec.SummarizerDeferred || rec.PreparedStarted != "late" {
				t.Fatalf("crossing at %d: wasted %d, used %d, deferred %v, started %q; notes %q", n, rec.PreparedWasted, rec.PreparedUsed, rec.SummarizerDeferred, rec.PreparedStarted, rec.Notes)
			}
			if rec.PreparedWastedTokens == 0 || !strings.Contains(strings.Join(rec.Notes, "\n"), "discarded") {
				t.Errorf("the discarded summary is not accounted: %d tokens, notes %q", rec.PreparedWastedTokens, rec.Notes)
			}
			return
		}
	}
	t.Fatal("no crossing after the rewrite")
}

// TestNonePreparedLateMerged: a crossing with no usable summary (the one prepared ahead
// failed) is summarized extractively at once; the LLM summarizes the same span off the
// turn, and the next Soft or Full merges its anchors without a call on the turn. With the
// background queue full, the crossing is still answered at once, and the record says no LLM
// summary is coming.
func TestNonePreparedLateMerged(t *testing.T) {
	s := newOffTurnSession(t)
	c := s.compactor()
	s.llm.setFail(true)
	late := false
	for _, n := range s.turns {
		view, rec := s.turn(c, n)
		if rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull {
			s.bg.run()
			continue
		}
		if !late {
			if !rec.SummarizerDeferred || rec.SummarizerCalls != 1 || rec.PreparedWasted != 1 || hasMarker(view) || rec.PreparedStarted != "late" {
				t.Fatalf("first crossing at %d: deferred %v, calls %d, wasted %d, started %q; notes %q", n, rec.SummarizerDeferred, rec.SummarizerCalls, rec.PreparedWasted, rec.PreparedStarted, rec.Notes)
			}
			s.llm.setFail(false)
			if s.bg.run() != 1 {
				t.Fatal("the late summary was not queued")
			}
			late = true
			continue
		}
		if !rec.PreparedLateMerged || !hasMarker(view) {
			t.Fatalf("next crossing at %d: late merged %v, marker %v; notes %q", n, rec.PreparedLateMerged, hasMarker(view), rec.Notes)
		}
		break
	}
	if !late {
		t.Fatal("no crossing")
	}

	full := newOffTurnSession(t)
	full.bg.reject = true
	c = full.compactor()
	for _, n := range full.turns {
		_, rec := full.turn(c, n)
		if rec.Tier == compaction.TierSoft || rec.Tier == compaction.TierFull {
			if !rec.SummarizerDeferred || rec.PreparedStarted != "" || !strings.Contains(strings.Join(rec.Notes, "\n"), "queue is full") {
				t.Fatalf("crossing with the queue full: deferred %v, started %q, notes %q", rec.SummarizerDeferred, rec.PreparedStarted, rec.Notes)
			}
			return
		}
	}
	t.Fatal("no crossing with the queue full")
}

// TestPreparedStillRunningAdopted: a summary prepared ahead that is still running at the
// crossing is not wasted, and no second call is made for the same messages: the crossing
// is extractive, the ahead summary finishes as the crossing's late summary, stored for any
// replica, and the next Soft or Full (here on a new compactor over the same store) merges it.
func TestPreparedStillRunningAdopted(t *testing.T) {
	s := newOffTurnSession(t)
	c := s.compactor()
	crossed := false
	for _, n := range s.turns {
		view, rec := s.turn(c, n)
		if rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull {
			continue
		}
		if !crossed {
			notes := strings.Join(rec.Notes, "\n")
			if !rec.SummarizerDeferred || rec.PreparedWasted != 0 || rec.PreparedStarted != "late" || !strings.Contains(notes, "prepared ahead was not ready") {
				t.Fatalf("crossing at %d: deferred %v, wasted %d, started %q; notes %q", n, rec.SummarizerDeferred, rec.PreparedWasted, rec.PreparedStarted, rec.Notes)
			}
			if got := s.bg.run(); got != 1 {
				t.Fatalf("%d summarizations queued by the crossing, want the ahead one only", got)
			}
			crossed = true
			c = s.compactor() // another replica compacts next
			continue
		}
		if !rec.PreparedLateMerged || rec.PreparedWasted != 0 || !hasMarker(view) {
			t.Fatalf("next compaction at %d: late merged %v, wasted %d, marker %v; notes %q", n, rec.PreparedLateMerged, rec.PreparedWasted, hasMarker(view), rec.Notes)
		}
		if s.llm.count() != 1 {
			t.Errorf("LLM calls = %d, want 1: the ahead summary, adopted", s.llm.count())
		}
		return
	}
	t.Fatalf("crossed %v, but no compaction after", crossed)
}

// TestLateMergedAfterLaterCompactions: a summary that finishes after more than one
// compaction (a slow model, quick turns) still applies: the state descends from the one it
// was made for (State.Lineage), so it is merged under the newer anchors instead of wasted.
// Once the lineage no longer holds that state, it is discarded.
func TestLateMergedAfterLaterCompactions(t *testing.T) {
	s := newOffTurnSession(t)
	c := s.compactor()
	crossings := 0
	for _, n := range s.turns {
		view, rec := s.turn(c, n)
		if rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull {
			continue
		}
		crossings++
		switch crossings {
		case 1: // the ahead summary is still running: adopted as this crossing's late one
			if rec.PreparedStarted != "late" {
				t.Fatalf("first crossing at %d: started %q; notes %q", n, rec.PreparedStarted, rec.Notes)
			}
		case 2: // still running: nothing to merge, nothing new started
			if rec.PreparedLateMerged || rec.PreparedWasted != 0 {
				t.Fatalf("second crossing at %d: late merged %v, wasted %d; notes %q", n, rec.PreparedLateMerged, rec.PreparedWasted, rec.Notes)
			}
			if got := s.bg.run(); got != 1 {
				t.Fatalf("%d summarizations queued, want the ahead one only", got)
			}
		case 3:
			if !rec.PreparedLateMerged || rec.PreparedWasted != 0 || !hasMarker(view) {
				t.Fatalf("third crossing at %d: late merged %v, wasted %d, marker %v; notes %q", n, rec.PreparedLateMerged, rec.PreparedWasted, hasMarker(view), rec.Notes)
			}
			if !strings.Contains(strings.Join(rec.Notes, "\n"), "under the newer anchors") {
				t.Errorf("notes %q do not say the summary was merged under newer anchors", rec.Notes)
			}
			return
		}
	}
	t.Fatalf("%d crossings, want 3", crossings)
}

// TestPreparedSurvivesTheClient: the work runs on the Background's context, not the turn's:
// a client that gives up right after its turn does not cancel it, and its result is stored
// for any replica (a second compactor on the same store uses it).
func TestPreparedSurvivesTheClient(t *testing.T) {
	s := newOffTurnSession(t)
	a := s.compactor()
	for i, n := range s.turns {
		ctx, cancel := context.WithCancel(context.Background())
		_, rec, err := a.CompactWithRecord(ctx, s.history[:n])
		cancel() // the client gives up
		if err != nil {
			t.Fatal(err)
		}
		if rec.PreparedStarted != "ahead" {
			continue
		}
		if s.bg.run() != 1 || s.llm.count() != 1 {
			t.Fatalf("the preparation did not run to its end: LLM calls %d", s.llm.count())
		}
		// Another replica (a compactor of its own on the same store) takes the next turns.
		b := s.compactor()
		for _, m := range s.turns[i+1:] {
			_, r := s.turn(b, m)
			// B may queue the span too (it does not know A's in memory); its claim fails.
			s.bg.run()
			if s.llm.count() != 1 {
				t.Fatalf("replica B summarized the span A prepared (at %d): LLM calls %d", m, s.llm.count())
			}
			if r.Tier == compaction.TierSoft || r.Tier == compaction.TierFull {
				if r.PreparedUsed != 1 {
					t.Fatalf("replica B's crossing at %d did not use A's summary: notes %q", m, r.Notes)
				}
				return
			}
		}
		t.Fatal("no crossing on replica B")
	}
	t.Fatal("no preparation")
}

// TestOnePreparerPerSpan: two replicas past Warn at the same watermark both queue a
// preparation; the claim in the store lets only one call the summarizer.
func TestOnePreparerPerSpan(t *testing.T) {
	s := newOffTurnSession(t)
	a, b := s.compactor(), s.compactor()
	for _, n := range s.turns {
		_, ra := s.turn(a, n)
		_, rb := s.turn(b, n)
		if ra.PreparedStarted == "ahead" && rb.PreparedStarted == "ahead" {
			if got := s.bg.run(); got != 2 {
				t.Fatalf("queued %d preparations, want 2", got)
			}
			if s.llm.count() != 1 {
				t.Fatalf("LLM calls = %d, want 1: the second replica's claim should have failed", s.llm.count())
			}
			return
		}
		if ra.Tier >= compaction.TierSoft {
			break
		}
		s.bg.run()
	}
	t.Fatal("the two replicas never prepared at the same watermark")
}

// goneSummarizer is an LLM whose session is deleted while it answers: it cancels the work's
// context with ErrSessionGone (as a Background does on deletion), then answers anyway.
type goneSummarizer struct {
	*llmSummarizer
	gone func()
}

func (g goneSummarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	g.gone()
	return g.llmSummarizer.Summarize(ctx, req)
}

// TestPreparedNotStoredOnceSessionGone: issue 29, item 4. A summarization off the turn whose
// session is deleted while it runs (its context cancelled with ErrSessionGone) stores
// nothing: the session's objects are being deleted, and a result written now would outlive
// them. The summarizer answered; its answer is dropped.
func TestPreparedNotStoredOnceSessionGone(t *testing.T) {
	s := newOffTurnSession(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	c, err := compaction.NewProgressiveCompactor(s.cfg, compaction.WithSummarizer(goneSummarizer{s.llm, func() { cancel(compaction.ErrSessionGone) }}), compaction.WithStore(s.store),
		compaction.WithSessionID("sess-29"), compaction.WithBackground(s.bg), compaction.WithStateRevalidation())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range s.turns {
		_, rec, err := c.CompactWithRecord(context.Background(), s.history[:n])
		if err != nil {
			t.Fatal(err)
		}
		if rec.PreparedStarted == "" {
			continue
		}
		s.bg.mu.Lock()
		works := s.bg.works
		s.bg.works = nil
		s.bg.mu.Unlock()
		if len(works) != 1 {
			t.Fatalf("%d works queued, want 1", len(works))
		}
		works[0](ctx)
		if s.llm.count() != 1 {
			t.Fatalf("LLM calls = %d, want 1", s.llm.count())
		}
		st, err := s.store.LoadState(context.Background(), compaction.PreparedID("sess-29"))
		if err != nil {
			t.Fatalf("the claim written before the call: %v", err)
		}
		for _, p := range st.Prepared {
			if !p.At.IsZero() { // done
				t.Fatalf("a summary of messages %d-%d stored after the session was deleted", p.From, p.To)
			}
		}
		return
	}
	t.Fatal("nothing was summarized off the turn")
}
