package compaction

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// This file holds summaries made off the turn (WithBackground). With an LLM summarizer, a
// Soft or Full turn never waits for the model:
//
//   - ahead: once the view passes the prepare threshold (Warn by default), the summarization
//     the next Soft will need (the oldest half of the head) starts in the background; at the
//     crossing, a prepared summary that covers a prefix of the span is used at once, and
//     what came after it is merged in by the extractive summarizer (milliseconds);
//   - late: a crossing with no usable prepared summary is summarized extractively at once,
//     and the same span goes to the LLM in the background; its anchors and prose are merged
//     at the next Soft or Full compaction, with no rewrite of the view just for them.
//
// A summarization runs on a context of its own (Background), so a client that gives up on
// its request no longer cancels it. Results are kept in memory and in the state store,
// under PreparedID, so any replica can use them and they survive a restart. A claim written
// there (conditionally) lets only one replica prepare a span at a time.

// Background runs work off the caller's turn.
type Background interface {
	// Go runs work later on a worker of its own, with a context of its own (ended by the
	// work's timeout or when the session goes), and reports whether it took it: false when
	// its queue is full, and work is then never run. When the session goes, its context is
	// cancelled with the cause ErrSessionGone, and the work stores nothing.
	Go(sessionID string, work func(ctx context.Context)) bool
}

// ErrSessionGone is the cause a Background cancels a session's work with when the session
// is deleted: its objects are being deleted, and a summary stored now would outlive them.
var ErrSessionGone = errors.New("session deleted")

// sessionGone reports whether ctx was cancelled because its session was deleted.
func sessionGone(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrSessionGone) }

// WithBackground has Soft and Full turns never wait for a summarizer other than the
// extractive one: summaries are prepared ahead and made late by b (see PreparedSummary).
func WithBackground(b Background) Option { return func(c *ProgressiveCompactor) { c.background = b } }

// PreparedSummary is a summary made off the turn of the raw messages [From, To) of a
// conversation, merged onto the state whose PrefixHash was Base.
type PreparedSummary struct {
	From int `json:"from"`
	To   int `json:"to"`
	// SpanHash fingerprints the messages [From, To) the summary covers.
	SpanHash string `json:"spanHash"`
	// Base is the PrefixHash of the state the summary was merged onto ("" at watermark 0).
	Base string `json:"base"`
	// Late: made after a compaction that used the extractive summary for [From, To); it is
	// merged into the state while the state is still the one that compaction wrote (Applies).
	Late    bool   `json:"late,omitempty"`
	Applies string `json:"applies,omitempty"`
	// Anchors and Prose are the summarizer's answer, parsed.
	Anchors []Anchor `json:"anchors,omitempty"`
	Prose   string   `json:"prose,omitempty"`
	// Summarizer, InputTokens and OutputTokens say who made it and what it cost.
	Summarizer   string `json:"summarizer,omitempty"`
	InputTokens  int    `json:"inputTokens,omitempty"`
	OutputTokens int    `json:"outputTokens,omitempty"`
	// Error says why the call gave nothing to use (it still cost its tokens).
	Error string `json:"error,omitempty"`
	// Owner and Until claim the span while its summarization runs.
	Owner string    `json:"owner,omitempty"`
	Until time.Time `json:"until,omitzero"`
	// At is when the summary was finished.
	At time.Time `json:"at,omitzero"`
}

// done reports whether p holds a finished summarization (used or failed).
func (p *PreparedSummary) done() bool { return !p.At.IsZero() }

// preparedConversation opens the reserved conversation IDs under which a conversation's
// prepared summaries are kept (PreparedID): '.' first, so no caller can name one.
const preparedConversation = ".prepared"

// PreparedID is the ID (a conversation ID no caller can take, under the same session, so
// DeleteSession removes it) under which the summaries prepared for conversation ID id are
// kept in the state store.
func PreparedID(id string) string {
	base, conv := SplitSessionID(id)
	if conv == "" {
		return base + conversationSep + preparedConversation
	}
	return base + conversationSep + preparedConversation + "." + conv
}

// isPreparedConversation reports whether conv is a PreparedID's conversation.
func isPreparedConversation(conv string) bool {
	rest, ok := strings.CutPrefix(conv, preparedConversation)
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	inner, ok := strings.CutPrefix(rest, ".")
	return ok && ValidateConversationID(inner) == nil
}

// keptPrepared bounds the summaries kept per conversation: the newest ahead and late ones.
const keptPrepared = 4

// keptLineage bounds State.Lineage: a late summary older than that many compactions is
// discarded.
const keptLineage = 8

// appliesTo reports whether a late summary made for the state whose PrefixHash is applies
// can be merged into st: st is that state, or was compacted from it.
func appliesTo(st *State, applies string) bool {
	return applies == st.PrefixHash || (applies != "" && slices.Contains(st.Lineage, applies))
}

// preparedClaim is how long a claim holds a span against other replicas: past it, the
// preparer is taken to be gone.
const preparedClaim = 5 * time.Minute

// prepared is the compactor's side of the summaries made off the turn; its fields are
// shared with the background work, under mu.
type prepared struct {
	mu sync.Mutex
	// running: a summarization of this compactor is in flight, for job.
	running bool
	job     PreparedSummary
	// adopt, when set, is the PrefixHash of the state a compaction wrote after summarizing
	// extractively the span the running ahead job covers (a prefix of it): the job finishes
	// as a late summary for that state instead of one for a state gone.
	adopt string
	// results are the summaries known to this compactor, newest last.
	results []PreparedSummary
	// looked is 1 + the watermark at which the store's summaries were last read (0: never).
	looked int
}

func (p *prepared) add(s PreparedSummary) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results = keepPrepared(p.results, s)
}

// keepPrepared replaces the entry for s's span and kind by s, keeping the newest few.
func keepPrepared(list []PreparedSummary, s PreparedSummary) []PreparedSummary {
	out := make([]PreparedSummary, 0, len(list)+1)
	for _, e := range list {
		if e.From == s.From && e.Base == s.Base && e.Late == s.Late {
			continue
		}
		out = append(out, e)
	}
	out = append(out, s)
	if len(out) > keptPrepared {
		out = out[len(out)-keptPrepared:]
	}
	return out
}

// offTurn reports whether summaries are made off the turn: a Background and a summarizer
// that costs time (not the extractive one).
func (c *ProgressiveCompactor) offTurn() bool {
	return c.background != nil && c.summarizer.Name() != (ExtractiveSummarizer{}).Name() && !c.cfg.RawHistory
}

// spanHash fingerprints msgs.
func spanHash(msgs []Message) string {
	h := sha256.New()
	for i := range msgs {
		hashMessage(h, &msgs[i])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// prepareThreshold is the usage from which a summary is prepared ahead.
func (c *ProgressiveCompactor) prepareThreshold() float64 {
	if c.cfg.PrepareThreshold > 0 {
		return c.cfg.PrepareThreshold
	}
	return c.cfg.WarnThreshold
}

// maybePrepare starts, on a None or Warn turn past the prepare threshold, the summarization
// the next Soft will need: the oldest half of the head. One per watermark: what comes
// after it is merged in extractively at the crossing.
// Nothing is prepared from a state that could not be loaded (stateOK false).
func (c *ProgressiveCompactor) maybePrepare(ctx context.Context, t *turn, rec *CompactionRecord, stateOK bool) {
	if !stateOK || !c.offTurn() || rec.UsageBefore < c.prepareThreshold() {
		return
	}
	head, _ := splitRest(t.rest, c.cfg.MinTailMessages)
	span, _ := splitHalf(head)
	if len(span) == 0 {
		return
	}
	base := c.state.PrefixHash
	c.prep.mu.Lock()
	busy := c.prep.running
	for i := range c.prep.results {
		if r := &c.prep.results[i]; !r.Late && r.From == t.base && r.Base == base {
			busy = true
		}
	}
	c.prep.mu.Unlock()
	if busy {
		return
	}
	// The session's budget counts the call when it starts: a shared budget only, as the
	// state is not saved on a None turn.
	limit := c.cfg.SummarizerCallsPerHour
	if limit > 0 {
		if c.budget == nil {
			return
		}
		ok, _, err := c.budget.Charge(ctx, c.now(), limit)
		if err != nil || !ok {
			return
		}
	}
	job := PreparedSummary{From: t.base, To: t.base + len(span), SpanHash: spanHash(span), Base: base}
	req := SummaryRequest{SessionID: c.sessionID, Tier: TierSoft, Messages: append([]Message(nil), span...),
		PreviousSummary: c.state.LastSummary, PreviousAnchors: append([]Anchor(nil), c.state.LastAnchors...), MaxSummaryChars: c.cfg.MaxSummaryChars}
	if c.start(job, req) {
		rec.Notes = append(rec.Notes, fmt.Sprintf("summary of messages %d-%d being prepared ahead by %s", job.From, job.To, c.summarizer.Name()))
		rec.PreparedStarted = "ahead"
	}
}

// startLate has the summarizer summarize, off the turn, the span a compaction just
// summarized extractively (from the state before it, base), for the next compaction to merge.
func (c *ProgressiveCompactor) startLate(from int, span []Message, prevAnchors []Anchor, prevSummary, base string, rec *CompactionRecord) {
	if c.adoptAhead(from, from+len(span), base, rec) {
		return
	}
	job := PreparedSummary{From: from, To: from + len(span), SpanHash: spanHash(span), Base: base, Late: true, Applies: c.state.PrefixHash}
	req := SummaryRequest{SessionID: c.sessionID, Tier: rec.Tier, Messages: append([]Message(nil), span...),
		PreviousSummary: prevSummary, PreviousAnchors: append([]Anchor(nil), prevAnchors...), MaxSummaryChars: c.cfg.MaxSummaryChars}
	if c.start(job, req) {
		rec.PreparedStarted = "late"
		rec.Notes = append(rec.Notes, fmt.Sprintf("summarized extractively at once; %s summarizes the same messages off the turn, merged at the next compaction", c.summarizer.Name()))
	} else {
		rec.Notes = append(rec.Notes, fmt.Sprintf("summarized extractively at once; no %s summary of these messages (a summarization is already running, or the background queue is full)", c.summarizer.Name()))
	}
}

// adoptAhead turns the summary prepared ahead of a prefix of [from, to) from the state base,
// still running or finished too late for the compaction that just summarized the span
// extractively, into the late summary of that compaction: merged at the next one instead of
// wasted, and no second call for the same messages.
func (c *ProgressiveCompactor) adoptAhead(from, to int, base string, rec *CompactionRecord) bool {
	covers := func(j *PreparedSummary) bool {
		return !j.Late && j.From == from && j.Base == base && j.To > j.From && j.To <= to
	}
	c.prep.mu.Lock()
	defer c.prep.mu.Unlock()
	var j PreparedSummary
	switch {
	case c.prep.running && covers(&c.prep.job):
		c.prep.adopt, j = c.state.PrefixHash, c.prep.job
	default:
		i := slices.IndexFunc(c.prep.results, func(j PreparedSummary) bool { return covers(&j) && j.Error == "" })
		if i < 0 {
			return false
		}
		// Finished between this turn's look and now: kept here (the store has it as ahead).
		c.prep.results[i].Late, c.prep.results[i].Applies = true, c.state.PrefixHash
		j = c.prep.results[i]
	}
	rec.PreparedStarted = "late"
	rec.Notes = append(rec.Notes, fmt.Sprintf("summarized extractively at once; the %s summary of messages %d-%d prepared ahead was not ready, and is merged at the next compaction", c.summarizer.Name(), j.From, j.To))
	return true
}

// start hands job to the Background, unless one of this compactor's is running.
func (c *ProgressiveCompactor) start(job PreparedSummary, req SummaryRequest) bool {
	c.prep.mu.Lock()
	if c.prep.running {
		c.prep.mu.Unlock()
		return false
	}
	c.prep.running, c.prep.job, c.prep.adopt = true, job, ""
	c.prep.mu.Unlock()
	s, states, id, log, now := c.summarizer, c.states, PreparedID(c.sessionID), c.log, c.now
	ok := c.background.Go(c.sessionID, func(ctx context.Context) {
		res, err := runPrepared(ctx, s, states, id, job, req, now)
		c.prep.mu.Lock()
		applies := c.prep.adopt
		c.prep.running, c.prep.adopt = false, ""
		c.prep.mu.Unlock()
		if err != nil {
			log.V(1).Info("summary off the turn not made", "session", req.SessionID, "from", job.From, "to", job.To, "reason", err.Error())
			return
		}
		if applies != "" {
			res.Late, res.Applies = true, applies
			if states != nil && !sessionGone(ctx) {
				// Stored as the late summary too, for whichever replica compacts next.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				if serr := savePrepared(sctx, states, id, res, false); serr != nil {
					log.V(1).Info("late summary not stored", "session", req.SessionID, "from", res.From, "to", res.To, "reason", serr.Error())
				}
				cancel()
			}
		}
		c.prep.add(res)
	})
	if !ok {
		c.prep.mu.Lock()
		c.prep.running = false
		c.prep.mu.Unlock()
	}
	return ok
}

// errClaimed: another replica prepares (or prepared) the span.
var errClaimed = errors.New("another replica has the span")

// runPrepared claims job's span in states (when set), runs the summarizer and stores the
// result. It touches no compactor state: it runs beside the compactor's turns.
func runPrepared(ctx context.Context, s Summarizer, states StateStore, id string, job PreparedSummary, req SummaryRequest, now func() time.Time) (PreparedSummary, error) {
	if states != nil {
		job.Owner = newOwner()
		job.Until = now().Add(preparedClaim)
		if err := savePrepared(ctx, states, id, job, true); err != nil {
			return job, err
		}
	}
	res, err := Summarize(ctx, s, req)
	var rec CompactionRecord
	rec.countSummarizer(nil, req, res)
	job.Summarizer, job.InputTokens, job.OutputTokens = s.Name(), rec.SummarizerInputTokens, rec.SummarizerOutputTokens
	job.Owner, job.Until, job.At = "", time.Time{}, now()
	if err == nil {
		var perr error
		job.Anchors, job.Prose, perr = res.Parsed()
		if job.Prose == "" && CountAvailable(job.Anchors) == 0 {
			err = errors.Join(errors.New("output holds no anchors and no summary"), perr)
		}
	}
	if err != nil {
		job.Anchors, job.Prose, job.Error = nil, "", quietError(err)
	}
	if states != nil {
		// A deleted session's objects are being deleted: nothing of it is written again.
		if sessionGone(ctx) {
			return job, fmt.Errorf("prepared summary not stored: %w", context.Cause(ctx))
		}
		// Stored even after the work's context ended (timeout, shutdown): the tokens are
		// spent. Only the session's deletion stops the write.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		stopGone := context.AfterFunc(ctx, func() {
			if sessionGone(ctx) {
				cancel()
			}
		})
		defer stopGone()
		if serr := savePrepared(sctx, states, id, job, false); serr != nil {
			return job, fmt.Errorf("store the prepared summary: %w", serr)
		}
	}
	return job, nil
}

// quietError is err's text, bounded.
func quietError(err error) string { return textcut.Head(err.Error(), 300) }

// savePrepared writes job into the conversation's prepared summaries: as a claim (refused
// with errClaimed when another live claim or a result holds the span), or as a result (in
// place of the claim). Conditional writes make a concurrent writer retry.
func savePrepared(ctx context.Context, states StateStore, id string, job PreparedSummary, claim bool) error {
	var lastErr error
	for range stateBudgetAttempts {
		st, err := states.LoadState(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			st = &State{}
		case err != nil:
			return fmt.Errorf("load prepared summaries: %w", err)
		}
		if claim {
			for _, e := range st.Prepared {
				if e.From == job.From && e.Base == job.Base && e.Late == job.Late && (e.done() || e.Until.After(time.Now())) {
					return errClaimed
				}
			}
		}
		st.Prepared = keepPrepared(st.Prepared, job)
		st.UpdatedAt = time.Now()
		err = states.SaveState(ctx, id, st)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrConflict) {
			return fmt.Errorf("save prepared summaries: %w", err)
		}
		if claim {
			return errClaimed
		}
		lastErr = err
	}
	return lastErr
}

func newOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// knownPrepared is the summaries this compactor knows, after reading the store's once per
// watermark w (a GET on a Soft or Full turn only). Of the store's, only those made for the
// state as it is are taken: the others were used or discarded by whoever moved it on.
func (c *ProgressiveCompactor) knownPrepared(ctx context.Context, w int) []PreparedSummary {
	c.prep.mu.Lock()
	looked := c.prep.looked == w+1
	c.prep.looked = w + 1
	c.prep.mu.Unlock()
	if !looked && c.states != nil {
		st, err := c.states.LoadState(ctx, PreparedID(c.sessionID))
		if err == nil {
			for _, e := range st.Prepared {
				if e.done() && ((!e.Late && e.Base == c.state.PrefixHash) || (e.Late && appliesTo(c.state, e.Applies))) {
					c.prep.add(e)
				}
			}
		}
	}
	c.prep.mu.Lock()
	defer c.prep.mu.Unlock()
	return append([]PreparedSummary(nil), c.prep.results...)
}

// forget drops a summary once used or discarded.
func (c *ProgressiveCompactor) forget(s PreparedSummary) {
	c.prep.mu.Lock()
	defer c.prep.mu.Unlock()
	out := c.prep.results[:0]
	for _, e := range c.prep.results {
		if e.From != s.From || e.Base != s.Base || e.Late != s.Late {
			out = append(out, e)
		}
	}
	c.prep.results = out
}

// countPrepared adds a summary made off the turn to the record of the compaction that used
// or discarded it: its call and tokens were spent for this session.
func (r *CompactionRecord) countPrepared(p PreparedSummary, used bool) {
	r.SummarizerCalls++
	r.SummarizerInputTokens += p.InputTokens
	r.SummarizerOutputTokens += p.OutputTokens
	if used {
		r.PreparedUsed++
	} else {
		r.PreparedWasted++
		r.PreparedWastedTokens += p.InputTokens + p.OutputTokens
	}
}

// mergeLate merges a late summary made for the state as it is (the previous compaction
// summarized its span extractively) into the state's anchors and prose, before this
// compaction summarizes on top of them. Late summaries for earlier states are discarded.
func (c *ProgressiveCompactor) mergeLate(known []PreparedSummary, rec *CompactionRecord) {
	for _, p := range known {
		if !p.Late {
			continue
		}
		c.forget(p)
		switch {
		case p.Error != "":
			rec.Notes = append(rec.Notes, fmt.Sprintf("late %s summary of messages %d-%d failed: %s", p.Summarizer, p.From, p.To, p.Error))
			rec.countPrepared(p, false)
		case !appliesTo(c.state, p.Applies):
			rec.Notes = append(rec.Notes, fmt.Sprintf("late %s summary of messages %d-%d discarded: the state moved on (history rewritten, or more than %d compactions since)", p.Summarizer, p.From, p.To, keptLineage))
			rec.countPrepared(p, false)
		case p.Applies != c.state.PrefixHash:
			// Made for an earlier state: the current anchors are newer, so they win where the
			// two disagree (the next step); the LLM's adds what the extractive one missed.
			c.state.LastAnchors = mergeAnchors(p.Anchors, c.state.LastAnchors)
			rec.PreparedLateMerged = true
			rec.Notes = append(rec.Notes, fmt.Sprintf("late %s summary of messages %d-%d merged under the newer anchors", p.Summarizer, p.From, p.To))
			rec.countPrepared(p, true)
		default:
			c.state.LastAnchors = mergeAnchors(c.state.LastAnchors, p.Anchors)
			if p.To == c.state.Watermark {
				c.state.LastSummary = p.Prose
			}
			rec.PreparedLateMerged = true
			rec.Notes = append(rec.Notes, fmt.Sprintf("late %s summary of messages %d-%d merged", p.Summarizer, p.From, p.To))
			rec.countPrepared(p, true)
		}
	}
}

// usablePrepared returns the summary prepared ahead that covers a prefix of span (the raw
// messages from t.base, before offload) onto the current state, and how many of span's
// messages it covers; others prepared at this watermark are discarded and the record says why.
func (c *ProgressiveCompactor) usablePrepared(known []PreparedSummary, t *turn, span []Message, rec *CompactionRecord) (*PreparedSummary, int) {
	var use *PreparedSummary
	n := 0
	for i := range known {
		p := known[i]
		if p.Late {
			continue
		}
		why := ""
		switch {
		case p.Error != "":
			why = "its call failed: " + p.Error
		case p.From != t.base || p.Base != c.state.PrefixHash:
			why = "the state moved on (history rewritten, or another compaction since)"
		case p.To-p.From > len(span) || p.To <= p.From:
			why = fmt.Sprintf("it covers %d messages, more than the %d to summarize", p.To-p.From, len(span))
		case spanHash(span[:p.To-p.From]) != p.SpanHash:
			why = "the messages it covers changed"
		case use != nil && p.To-p.From <= n:
			why = "a larger one covers the same messages"
		}
		c.forget(p)
		if why != "" {
			rec.Notes = append(rec.Notes, fmt.Sprintf("prepared %s summary of messages %d-%d discarded: %s", p.Summarizer, p.From, p.To, why))
			rec.countPrepared(p, false)
			continue
		}
		if use != nil {
			rec.Notes = append(rec.Notes, fmt.Sprintf("prepared %s summary of messages %d-%d discarded: a larger one covers the same messages", use.Summarizer, use.From, use.To))
			rec.countPrepared(*use, false)
		}
		use, n = &p, p.To-p.From
	}
	return use, n
}

// summarizeOffTurn is summarize for a compaction that must not wait for the summarizer: a
// summary prepared ahead, completed extractively, or the extractive summary with the
// session's summarizer started off the turn (late reports that, for the caller to start it
// once the watermark moved).
func (c *ProgressiveCompactor) summarizeOffTurn(ctx context.Context, t *turn, span, offloaded []Message, pins []Pin, rec *CompactionRecord) (msg Message, merged []Anchor, summary string, late bool, err error) {
	known := c.knownPrepared(ctx, c.state.Watermark)
	c.mergeLate(known, rec)
	if p, n := c.usablePrepared(known, t, span, rec); p != nil {
		rec.countPrepared(*p, true)
		rec.PreparedCovered = n
		anchors, prose := mergeAnchors(c.state.LastAnchors, p.Anchors), p.Prose
		rec.Notes = append(rec.Notes, fmt.Sprintf("prepared %s summary of messages %d-%d used; the %d messages after it merged extractively", p.Summarizer, p.From, p.To, len(span)-n))
		if n < len(span) {
			if anchors, prose, err = c.summarizeOnto(ctx, ExtractiveSummarizer{}, offloaded[n:], rec, false, anchors, prose); err != nil {
				return Message{}, nil, "", false, err
			}
		}
		msg, merged, summary = c.summaryMessage(ctx, offloaded, pins, anchors, prose)
		return msg, merged, summary, false, nil
	}
	summarizer, paid := c.summarizerFor(ctx, rec)
	if !paid || summarizer.Name() == (ExtractiveSummarizer{}).Name() {
		msg, merged, summary, err = c.summarize(ctx, summarizer, offloaded, pins, rec, paid)
		return msg, merged, summary, false, err
	}
	rec.SummarizerDeferred = true
	msg, merged, summary, err = c.summarize(ctx, ExtractiveSummarizer{}, offloaded, pins, rec, false)
	return msg, merged, summary, err == nil, err
}
