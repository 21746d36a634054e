package compaction

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// CompactionHeader starts every message the engine writes into a compacted view.
const CompactionHeader = "[Context Compaction]"

// EmergencyError is the record error of the Emergency tier (spec 2.3).
const EmergencyError = "emergency fallback: forced truncation"

// Fallback is the compactor used without a summarizer: Compact when summarization fails.
// TokenBudgetCompactor is the default. (The Emergency tier cuts the minimal tail itself, so
// it can summarize what it drops; CompactForce is kept for callers of the fallback alone.)
type Fallback interface {
	Compact(msgs []Message) []Message
	CompactForce(msgs []Message) []Message
}

// ProgressiveCompactor is the tiered progressive compactor of the spec for one session. It is
// safe for concurrent use; calls for the same compactor are serialized so the incremental
// state is never lost.
type ProgressiveCompactor struct {
	cfg        Config
	sessionID  string
	summarizer Summarizer
	fallback   Fallback
	store      ToolResultStore
	offloader  *Offloader
	records    RecordStore
	states     StateStore
	extractor  MemoryExtractor
	todos      TodoInjector
	log        logr.Logger
	now        func() time.Time

	// revalidate: every call starts from the stored state (WithStateRevalidation).
	revalidate bool

	mu          sync.Mutex
	state       *State
	stateLoaded bool
	// stored is the state as last loaded or saved, with its version (revalidate only): each
	// call works on a copy of it while the store says it is current.
	stored *State
	// lastViewTokens is the estimate of the view returned last: the prompt the caller's next
	// reported promptTokens measured (0 when unknown, such as after a restart).
	lastViewTokens int
	// savedCalibration is the calibration factor of the stored state.
	savedCalibration float64
	// factor is the calibration factor of the compaction in progress (1 outside one).
	factor float64
	// budgetCharged is set when the compaction in progress charged a call to the session's
	// summarizer budget, so the state is saved even if nothing else changed.
	budgetCharged bool
}

// Option configures a ProgressiveCompactor.
type Option func(*ProgressiveCompactor)

// WithSummarizer sets the summarizer (default: ExtractiveSummarizer).
func WithSummarizer(s Summarizer) Option { return func(c *ProgressiveCompactor) { c.summarizer = s } }

// WithFallback replaces the default TokenBudgetCompactor.
func WithFallback(f Fallback) Option { return func(c *ProgressiveCompactor) { c.fallback = f } }

// WithStore uses one backend for offloaded results, records and state.
func WithStore(s Store) Option {
	return func(c *ProgressiveCompactor) { c.store, c.records, c.states = s, s, s }
}

// WithToolResultStore enables offloading into s.
func WithToolResultStore(s ToolResultStore) Option {
	return func(c *ProgressiveCompactor) { c.store = s }
}

// WithRecordStore persists every compaction record into s (fail-open).
func WithRecordStore(s RecordStore) Option { return func(c *ProgressiveCompactor) { c.records = s } }

// WithStateStore persists the incremental state (last summary, anchors, offloads) into s.
func WithStateStore(s StateStore) Option { return func(c *ProgressiveCompactor) { c.states = s } }

// WithSessionID names the session (default "default"); it must pass ValidateSessionID.
func WithSessionID(id string) Option { return func(c *ProgressiveCompactor) { c.sessionID = id } }

// WithMemoryExtractor sets the long-term-memory hook (fail-open).
func WithMemoryExtractor(e MemoryExtractor) Option {
	return func(c *ProgressiveCompactor) { c.extractor = e }
}

// WithTodoInjector sets the todo-list hook (fail-open).
func WithTodoInjector(t TodoInjector) Option { return func(c *ProgressiveCompactor) { c.todos = t } }

// WithLogger sets the logger (default: discard).
func WithLogger(l logr.Logger) Option { return func(c *ProgressiveCompactor) { c.log = l } }

// WithClock sets the clock used for record timestamps and IDs.
func WithClock(now func() time.Time) Option { return func(c *ProgressiveCompactor) { c.now = now } }

// WithLastViewTokens tells a compactor built for one request (as a server does) the estimate
// of the view the session's previous request returned, so the prompt size the caller reports
// for it calibrates the session's estimate (see LastViewTokens).
func WithLastViewTokens(n int) Option {
	return func(c *ProgressiveCompactor) { c.lastViewTokens = max(n, 0) }
}

// WithStateRevalidation is for a compactor kept between the requests of a session that other
// processes (replicas) serve too: every call starts from the stored state, as a compactor
// built for one request would, but reads it again only when the store says it changed (one
// conditional request when the store is a StateRevalidator, else a full read). What a call
// changes and does not save is never carried into the next one.
func WithStateRevalidation() Option { return func(c *ProgressiveCompactor) { c.revalidate = true } }

// NewProgressiveCompactor returns a compactor for one session. Zero fields of cfg take the
// spec's defaults.
func NewProgressiveCompactor(cfg Config, opts ...Option) (*ProgressiveCompactor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid compaction config: %w", err)
	}
	c := &ProgressiveCompactor{cfg: cfg, sessionID: "default", summarizer: ExtractiveSummarizer{}, log: logr.Discard(), now: time.Now}
	for _, o := range opts {
		o(c)
	}
	if err := ValidateSessionID(c.sessionID); err != nil {
		return nil, err
	}
	if c.fallback == nil {
		c.fallback = TokenBudgetCompactor{Budget: int(float64(cfg.ContextWindow) * cfg.WarnThreshold), MinTailMessages: cfg.MinTailMessages}
	}
	if c.store != nil {
		c.offloader = NewOffloader(c.store, c.sessionID, cfg.OffloadThreshold, cfg.PreviewLines)
	}
	return c, nil
}

// Config returns the effective configuration.
func (c *ProgressiveCompactor) Config() Config { return c.cfg }

// LastViewTokens is the estimate of the view returned last (0 before the first), for
// WithLastViewTokens on the compactor that serves the session's next request.
func (c *ProgressiveCompactor) LastViewTokens() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastViewTokens
}

// SessionID returns the session this compactor serves.
func (c *ProgressiveCompactor) SessionID() string { return c.sessionID }

// Offloader returns the session's offloader (nil without a tool-result store), for the
// OffloadHook at source.
func (c *ProgressiveCompactor) Offloader() *Offloader { return c.offloader }

// Compact returns the compacted view and discards the record (spec 7, backward compatible).
func (c *ProgressiveCompactor) Compact(ctx context.Context, msgs []Message) ([]Message, error) {
	out, _, err := c.CompactWithRecord(ctx, msgs)
	return out, err
}

// CompactForce runs the Emergency tier whatever the usage (the manual /compact).
func (c *ProgressiveCompactor) CompactForce(ctx context.Context, msgs []Message) ([]Message, error) {
	out, _, err := c.CompactForceWithRecord(ctx, msgs)
	return out, err
}

// CompactWithRecord is the main entry point: it builds the session's derived view of msgs
// (the full, ever-growing history), picks the tier from the view's usage ratio, runs the
// tier's data flow and returns the compacted view and the record. msgs is never modified.
// An invalid history is an error and nothing is stored.
//
// The derived view is [system, pins, compaction message, messages after the watermark]:
// once a compaction has summarized the first W messages, later turns work on the messages
// after them, so usage falls after a compaction and a session of any length cycles through
// the tiers instead of living in Emergency. Every view is valid for a provider: a tool call
// the history does not answer is closed with a synthetic result (see closeView).
func (c *ProgressiveCompactor) CompactWithRecord(ctx context.Context, msgs []Message) ([]Message, *CompactionRecord, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.compact(ctx, msgs, nil, false, 0)
}

// CompactForceWithRecord is CompactForce with its record.
func (c *ProgressiveCompactor) CompactForceWithRecord(ctx context.Context, msgs []Message) ([]Message, *CompactionRecord, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.compact(ctx, msgs, nil, true, 0)
}

// Delta identifies the part of a history a caller no longer sends: the watermark and prefix
// hash it got back in its last record.
type Delta struct {
	Watermark  int
	PrefixHash string
	// PromptTokens is the prompt size the caller's LLM reported for its last call (0:
	// unknown). It is recorded next to the engine's estimate and changes nothing else.
	PromptTokens int
}

// ErrStaleWatermark means a delta request's watermark or prefix hash is not the session's
// current one: the caller must send its full history.
var ErrStaleWatermark = errors.New("stale watermark: send the full history")

// ErrStateConflict means another compaction of the session saved its state while this one
// ran (for example on another replica): nothing of this compaction was recorded, and running
// it again on the new state is safe (offloads are idempotent).
var ErrStateConflict = errors.New("session state changed during the compaction: run it again")

// CompactDeltaWithRecord is CompactWithRecord for a caller that sends only what is new: msgs
// holds the history's leading system messages followed by the messages after d.Watermark.
// When d is not the session's current watermark and prefix hash it returns an error wrapping
// ErrStaleWatermark and changes nothing. A zero Delta means msgs is the full history.
func (c *ProgressiveCompactor) CompactDeltaWithRecord(ctx context.Context, d Delta, msgs []Message, force bool) ([]Message, *CompactionRecord, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.Watermark == 0 {
		return c.compact(ctx, msgs, nil, force, d.PromptTokens)
	}
	return c.compact(ctx, msgs, &d, force, d.PromptTokens)
}

// State returns a copy of the session's incremental state.
func (c *ProgressiveCompactor) State(ctx context.Context) (*State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.loadState(ctx); err != nil {
		return nil, err
	}
	return c.state.clone(), nil
}

// turn is one request resolved against the session's watermark.
type turn struct {
	system  []Message // leading system messages
	carried []Message // the pins and the compaction message; empty when the watermark is 0
	rest    []Message // raw messages after the watermark (after the system messages when 0)
	base    int       // raw-history index of rest[0]
	// historyTokens is the estimate of the full raw history, -1 for a delta request.
	historyTokens int
	// whole is the caller's history when the view is exactly that history (no watermark).
	whole []Message
}

func (t *turn) view() []Message {
	if t.whole != nil {
		return t.whole
	}
	return concat(t.system, t.carried, t.rest)
}

// resolve validates msgs and builds the turn. The state is not changed here, so an invalid
// request leaves everything as it was; reset reports that the stored prefix no longer matches.
func (c *ProgressiveCompactor) resolve(msgs []Message, d *Delta) (t turn, reset bool, err error) {
	p := systemPrefixLen(msgs)
	w, hash := c.state.Watermark, c.state.PrefixHash
	if d != nil {
		if d.Watermark != w || d.PrefixHash != hash {
			return turn{}, false, fmt.Errorf("%w: request has watermark %d (%.12s), session has %d (%.12s)", ErrStaleWatermark, d.Watermark, d.PrefixHash, w, hash)
		}
		if err := validate(msgs, c.state.OpenCalls); err != nil {
			return turn{}, false, fmt.Errorf("invalid history: %w", err)
		}
		return turn{system: msgs[:p], carried: c.carried(), rest: msgs[p:], base: w, historyTokens: -1}, false, nil
	}
	if c.cfg.RawHistory {
		w = 0
	}
	if w > 0 && w >= p && w <= len(msgs) && PrefixHash(msgs[:p], w, &msgs[w-1]) == hash {
		if err := validate(concat(msgs[:p], msgs[w:]), c.state.OpenCalls); err != nil {
			return turn{}, false, fmt.Errorf("invalid history: %w", adjustIndex(err, p, w))
		}
		return turn{system: msgs[:p], carried: c.carried(), rest: msgs[w:], base: w, historyTokens: EstimateTokens(msgs)}, false, nil
	}
	if err := Validate(msgs); err != nil {
		return turn{}, false, fmt.Errorf("invalid history: %w", err)
	}
	return turn{system: msgs[:p], rest: msgs[p:], base: p, historyTokens: EstimateTokens(msgs), whole: msgs}, w > 0 && !c.cfg.RawHistory, nil
}

// adjustIndex maps a validation error's index in [system, rest] back to the full history.
func adjustIndex(err error, p, w int) error {
	var ve *ValidationError
	if errors.As(err, &ve) && ve.Index >= p {
		return &ValidationError{Index: ve.Index - p + w, Reason: ve.Reason}
	}
	return err
}

// carried is what opens every view after the system messages once a compaction covered
// part of the history: the pins, then the compaction message (with a note when a state
// written by an older version says an emergency truncation dropped messages unsummarized).
func (c *ProgressiveCompactor) carried() []Message {
	if c.state.Watermark == 0 || c.state.CompactionMessage == "" {
		return nil
	}
	content := c.state.CompactionMessage
	if c.state.Dropped > 0 {
		content = strings.TrimRight(content, "\n") + fmt.Sprintf("\n\nNote: %d messages were dropped by emergency truncation without being summarized.\n", c.state.Dropped)
	}
	return append(pinMessages(c.state.Pins), Message{Role: RoleUser, Content: content})
}

func (c *ProgressiveCompactor) compact(ctx context.Context, msgs []Message, d *Delta, force bool, promptTokens int) ([]Message, *CompactionRecord, error) {
	startWall := time.Now()
	ts := c.now()
	rec := &CompactionRecord{ID: newRecordID(ts), SessionID: c.sessionID, Timestamp: ts, Anchors: []Anchor{}, Offloaded: []OffloadEntry{},
		PromptTokens: promptTokens}

	stateOK := true
	if err := c.loadState(ctx); err != nil {
		if d != nil {
			return nil, nil, fmt.Errorf("load session state: %w", err)
		}
		// Fail open on the raw history, and never overwrite a state that could not be read.
		rec.addError("state load: %v", err)
		stateOK = false
	}
	t, reset, err := c.resolve(msgs, d)
	if err != nil {
		return nil, nil, err
	}
	if len(t.carried) > 0 {
		rec.WatermarkBefore = t.base
	}
	rec.HistoryTokens = t.historyTokens
	if reset {
		rec.Notes = append(rec.Notes, fmt.Sprintf("history prefix changed (watermark %d no longer matches): started over from the raw history", c.state.Watermark))
		// Keep the loaded version: this state replaces the stored one, it is not a new one.
		// The calibration and the summarizer budget belong to the session, not to the history:
		// a reset must not refill the budget (an agent could reset on every request).
		c.state = &State{Offloaded: c.state.Offloaded, Version: c.state.Version, Calibration: c.state.Calibration,
			SummarizerCalls: c.state.SummarizerCalls}
	}
	view := closeView(c.shown(t.view()))
	factor := c.calibrate(promptTokens, rec)
	c.factor = factor
	c.budgetCharged = false
	defer func() { c.factor = 1 }()
	rec.TokensBefore, rec.MsgsBefore = EstimateTokens(view), len(view)
	rec.Calibration = factor
	rec.UsageBefore = c.cfg.Usage(calibrated(rec.TokensBefore, factor))
	rec.Tier = c.cfg.DetermineTier(calibrated(rec.TokensBefore, factor))
	if force {
		rec.Tier = TierEmergency
	}
	wmBefore := c.state.Watermark
	if rec.Tier == TierNone { // no side effects at all
		rec.TokensAfter, rec.MsgsAfter, rec.PreservedTail = rec.TokensBefore, len(view), len(t.rest)
		rec.WatermarkAfter, rec.PrefixHash = c.state.Watermark, c.state.PrefixHash
		rec.PinnedMessages, rec.PinnedTokens, rec.PinnedHash = pinStats(c.state.Pins)
		c.finishUsage(rec, factor)
		rec.DurationMs = msSince(startWall)
		if (reset || c.calibrationMoved()) && stateOK && c.states != nil {
			if err := c.saveState(ctx, rec); err != nil {
				return nil, nil, err
			}
		}
		return view[:len(view):len(view)], rec, nil
	}
	offloadsBefore := 0
	if c.offloader != nil {
		offloadsBefore = c.offloader.Writes()
	}

	var out []Message
	switch rec.Tier {
	case TierEmergency:
		out = c.emergency(ctx, &t, rec)
	case TierWarn:
		out = c.warn(ctx, &t, view, rec)
	case TierSoft, TierFull:
		out = c.summarizeToTarget(ctx, &t, view, rec)
	}
	out = closeView(c.shown(out))

	rec.WatermarkAfter, rec.PrefixHash = c.state.Watermark, c.state.PrefixHash
	changed := reset || c.state.Watermark != wmBefore || (c.offloader != nil && c.offloader.Writes() != offloadsBefore) || c.calibrationMoved() || c.budgetCharged
	if changed && c.offloader != nil && !c.cfg.RawHistory {
		// Future views hold only messages after the watermark: forget the rest.
		c.offloader.Retain(toolIDs(t.rest[min(max(c.state.Watermark-t.base, 0), len(t.rest)):]))
	}
	if stateOK && c.states != nil && changed {
		if err := c.saveState(ctx, rec); err != nil {
			return nil, nil, err
		}
	}
	rec.TokensAfter, rec.MsgsAfter = EstimateTokens(out), len(out)
	rec.PinnedMessages, rec.PinnedTokens, rec.PinnedHash = pinStats(c.state.Pins)
	c.finishUsage(rec, factor)
	if rec.TokensBefore > 0 {
		rec.CompressionRatio = 1 - float64(rec.TokensAfter)/float64(rec.TokensBefore)
	}
	rec.DurationMs = msSince(startWall)
	if c.records != nil {
		if err := c.records.AppendRecord(ctx, rec); err != nil {
			// Spec 6.1: persistence failure is logged and does not affect the record.
			c.log.Error(err, "persisting compaction record failed", "session", c.sessionID, "record", rec.ID)
		}
	}
	return out, rec, nil
}

// splitRest is the spec's head/tail split of the messages after the watermark.
func splitRest(rest []Message, minTail int) (head, tail []Message) {
	cut := len(rest) - minTail
	if cut <= 0 {
		return nil, rest
	}
	cut = groupStart(rest, cut, 0)
	return rest[:cut], rest[cut:]
}

// emergency is the Emergency tier: no LLM call (the spec: the context is too close to the
// limit to afford one). Everything but the minimal tail is summarized by the extractive
// summarizer, which costs milliseconds, and merged into the anchors, so the watermark never
// passes content no summary covers; then the largest kept messages are shortened until the
// view fits the budget of the fallback (the Warn threshold).
func (c *ProgressiveCompactor) emergency(ctx context.Context, t *turn, rec *CompactionRecord) []Message {
	rec.addError(EmergencyError)
	head, tail := splitRest(t.rest, c.cfg.MinTailMessages)
	rec.PreservedTail = len(tail)
	carried := t.carried
	if len(head) > 0 {
		offloaded := c.offload(ctx, head, rec)
		pins := c.pinsAfter(ctx, t, len(head), rec)
		msg, merged, summary, err := c.summarize(ctx, ExtractiveSummarizer{}, offloaded, pins, rec, false)
		if err != nil {
			// Only a cancelled context stops the extractive summarizer: keep the history
			// as it is and cut the view alone.
			rec.addError("extractive summary of the dropped messages failed: %v", err)
		} else {
			rec.Anchors, rec.SummaryText, rec.Summarized = merged, summary, len(head)
			c.state.LastAnchors, c.state.LastSummary = merged, summary
			c.advance(t, len(head), msg.Content, pins)
			carried = append(pinMessages(pins), msg)
		}
	}
	out := closeView(concat(t.system, carried, tail))
	budget := int(c.cfg.WarnThreshold*float64(c.windowChars())) / 4
	return shrinkToBudget(out, budget, len(t.system)+len(carried))
}

func isCompactionMessage(m *Message) bool {
	return m.Role == RoleUser && strings.HasPrefix(m.Content, CompactionHeader)
}

// summarizeSpan is the Soft/Full flow: memory extraction, offload, summarization with the
// incremental merge, the compaction message in place of span, and the watermark advanced
// past span.
func (c *ProgressiveCompactor) summarizeSpan(ctx context.Context, t *turn, span, kept, tail []Message, rec *CompactionRecord) []Message {
	rec.PreservedTail = len(kept) + len(tail)
	if len(span) == 0 {
		return concat(t.system, t.carried, kept, tail)
	}
	if c.extractor != nil {
		if err := c.extractor.Extract(ctx, c.sessionID, span); err != nil {
			c.log.V(1).Info("long-term memory extraction failed; skipped", "session", c.sessionID, "error", err.Error())
		}
	}
	offloaded := c.offload(ctx, span, rec)
	pins := c.pinsAfter(ctx, t, len(span), rec)
	summarizer, paid := c.summarizerFor(rec)
	msg, merged, summary, err := c.summarize(ctx, summarizer, offloaded, pins, rec, paid)
	if err != nil {
		rec.addError("summarizer %s failed: %v; fell back to budget truncation", summarizer.Name(), err)
		// Closed first, so the fallback's repair has no unanswered call to drop.
		forced := c.fallback.Compact(closeView(concat(t.system, offloaded, kept, tail)))
		rec.PreservedTail = preservedCount(forced)
		return concat(t.system, t.carried, forced[len(t.system):])
	}
	// Pins stay in the view either way; what the summary replaces is the old compaction
	// message and the span.
	replaced := c.compactionChars(t) + charsOf(offloaded)
	if added := msg.Chars() + charsOf(pinMessages(pins)) - charsOf(pinMessages(c.state.Pins)); added >= replaced {
		// Summarizing would grow the context: keep the span verbatim (already offloaded).
		rec.addError("summary (%d bytes) not smaller than the %d messages (%d bytes) it would replace; kept them", msg.Chars(), len(span), replaced)
		return concat(t.system, t.carried, offloaded, kept, tail)
	}
	rec.Anchors, rec.SummaryText, rec.Summarized = merged, summary, len(span)
	c.state.LastAnchors, c.state.LastSummary = merged, summary
	c.advance(t, len(span), msg.Content, pins)
	return concat(t.system, pinMessages(pins), []Message{msg}, kept, tail)
}

// summarize runs s on the span and builds the compaction message from its output merged
// with the session's anchors. An error means there is no usable summary.
//
// A call of the session's summarizer (count) is counted in the record with its tokens: as
// its server reported them, or estimated from the request and the answer.
func (c *ProgressiveCompactor) summarize(ctx context.Context, s Summarizer, span []Message, pins []Pin, rec *CompactionRecord, count bool) (Message, []Anchor, string, error) {
	req := SummaryRequest{
		SessionID: c.sessionID, Tier: rec.Tier, Messages: span,
		PreviousSummary: c.state.LastSummary, PreviousAnchors: c.state.LastAnchors,
		MaxSummaryChars: c.cfg.MaxSummaryChars,
	}
	var raw string
	var usage SummaryUsage
	var err error
	if us, ok := s.(UsageSummarizer); ok {
		raw, usage, err = us.SummarizeWithUsage(ctx, req)
	} else {
		raw, err = s.Summarize(ctx, req)
	}
	if count {
		rec.countSummarizer(req, raw, usage)
	}
	if err != nil {
		return Message{}, nil, "", err
	}
	anchors, summary, perr := ParseAnchorsAndSummary(raw)
	if perr != nil {
		rec.addError("%v", perr)
	}
	if summary == "" && CountAvailable(anchors) == 0 {
		return Message{}, nil, "", errors.New("output holds no anchors and no summary")
	}
	merged := MergeAnchors(c.state.LastAnchors, anchors)
	// The prose is the supplement: it gives way first when anchors and prose together would
	// take more than a fifth of the window.
	limit := c.cfg.MaxSummaryChars
	// What the pins show verbatim is not repeated in the anchors the view shows.
	shown := withoutPinned(merged, pins)
	rendered := FormatAnchors(shown)
	if capBytes := c.windowChars() / 5; capBytes > 0 {
		// Anchors are what an agent continues from: they give way only in a window too small
		// for them (more than a third of it), where they would crowd out the recent messages.
		// (Cut down to the fifth, they lost half the decisions and errors at 8,000 tokens
		// for 10% fewer compactions.)
		rendered = FormatAnchorsWithin(shown, c.windowChars()/3)
		limit = min(limit, max(capBytes-len(rendered), minProseChars))
	}
	summary = truncateUTF8(summary, limit)
	msg := c.compactionMessage(ctx, rendered, summary, span)
	return msg, merged, summary, nil
}

// compactionChars is the size of the compaction message that opens t's view (0 for none).
func (c *ProgressiveCompactor) compactionChars(t *turn) int {
	if len(t.carried) == 0 {
		return 0
	}
	return t.carried[len(t.carried)-1].Chars()
}

// pinsAfter is the session's pins once the watermark passes the first n messages of t.rest:
// the pins so far and the span's messages that the pin rule keeps, within the pin budget.
func (c *ProgressiveCompactor) pinsAfter(ctx context.Context, t *turn, n int, rec *CompactionRecord) []Pin {
	if c.cfg.RawHistory {
		return nil
	}
	return c.selectPins(ctx, c.state.Pins, c.newPinCandidates(t, n), c.pinBudgetChars(), rec)
}

// newPinCandidates are the messages among the first n of t.rest that the pin rule keeps.
func (c *ProgressiveCompactor) newPinCandidates(t *turn, n int) []Pin {
	if !c.state.TaskKnown {
		if ti := taskIndex(t.rest, t.base); ti >= 0 {
			c.state.TaskIndex, c.state.TaskKnown = ti, true
		}
	}
	task := -1
	if c.state.TaskKnown {
		task = c.state.TaskIndex
	}
	return pinCandidates(c.cfg, t.rest[:n], t.base, task)
}

func (c *ProgressiveCompactor) pinBudgetChars() int {
	return int(float64(c.windowChars()) * c.cfg.PinBudget)
}

// windowChars is the window in estimated characters (the estimate's unit before /4), under
// the session's calibration: shares of the window are shares of the real tokens.
func (c *ProgressiveCompactor) windowChars() int {
	f := c.factor
	if f <= 0 {
		f = 1
	}
	return int(float64(c.cfg.ContextWindow) * 4 / f)
}

// advance moves the watermark past the first n messages of t.rest, which msgContent and
// pins now stand for, and fingerprints the new prefix.
func (c *ProgressiveCompactor) advance(t *turn, n int, msgContent string, pins []Pin) {
	if c.cfg.RawHistory {
		return
	}
	w := t.base + n
	c.state.Watermark = w
	c.state.PrefixHash = PrefixHash(t.system, w, &t.rest[n-1])
	c.state.CompactionMessage = msgContent
	c.state.Pins = pins
	c.state.OpenCalls = openCalls(c.state.OpenCalls, t.rest[:n])
}

// PrefixHash fingerprints the part of a history a watermark covers: the watermark itself,
// the system messages and the last covered message. That detects an agent that reset,
// truncated or replaced its history in constant time per turn, whatever the session's length,
// and it can be computed from a delta request, which holds those messages but not the
// middle. An edit deep inside the summarized part goes unnoticed, and does not matter: the
// summary already stands for those messages.
func PrefixHash(system []Message, watermark int, last *Message) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "watermark=%d\n", watermark) // hash writes never fail
	for i := range system {
		hashMessage(h, &system[i])
	}
	hashMessage(h, last)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func hashMessage(h hash.Hash, m *Message) {
	field := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		_, _ = h.Write(n[:])
		_, _ = io.WriteString(h, s) // hash writes never fail
	}
	field(string(m.Role))
	field(m.Content)
	field(string(m.ContentParts))
	field(m.ToolCallID)
	for _, tc := range m.ToolCalls {
		field(tc.ID)
		field(tc.Function.Name)
		field(tc.Function.Arguments)
	}
}

// minProseChars is the least prose a compaction message keeps beside its anchors.
const minProseChars = 500

// compactionMessage builds the single message that stands for the summarized span, from the
// rendered anchors and the prose.
func (c *ProgressiveCompactor) compactionMessage(ctx context.Context, anchors, summary string, span []Message) Message {
	var b strings.Builder
	b.WriteString(CompactionHeader)
	b.WriteString("\nEarlier messages of this conversation were summarized to fit the context window.\n\n## Anchors\n")
	b.WriteString(anchors)
	b.WriteString("\n## Summary\n")
	b.WriteString(strings.TrimSpace(summary))
	b.WriteString("\n")
	if c.todos != nil {
		todos, err := c.todos.Todos(ctx, c.sessionID)
		switch {
		case err != nil:
			c.log.V(1).Info("todo injection failed; skipped", "session", c.sessionID, "error", err.Error())
		case strings.TrimSpace(todos) != "":
			b.WriteString("\n## Todo\n")
			b.WriteString(strings.TrimSpace(todos))
			b.WriteString("\n")
		}
	}
	var ids []string
	for i := range span {
		if span[i].Role == RoleTool && strings.HasPrefix(span[i].Content, PlaceholderPrefix) {
			ids = append(ids, span[i].ToolCallID)
		}
	}
	if len(ids) > 0 {
		const maxListed = 20
		b.WriteString("\n## Offloaded tool results\nRead back by tool_call_id: ")
		if len(ids) > maxListed {
			b.WriteString(strings.Join(ids[len(ids)-maxListed:], ", "))
			fmt.Fprintf(&b, " (and %d earlier)", len(ids)-maxListed)
		} else {
			b.WriteString(strings.Join(ids, ", "))
		}
		b.WriteString("\n")
	}
	return Message{Role: RoleUser, Content: b.String()}
}

func (c *ProgressiveCompactor) offload(ctx context.Context, msgs []Message, rec *CompactionRecord) []Message {
	if c.offloader == nil {
		return msgs
	}
	return c.offloader.OffloadMessages(ctx, msgs, rec)
}

// loadState reads the persisted state once (on every call with revalidate); a missing state
// is an empty one.
func (c *ProgressiveCompactor) loadState(ctx context.Context) error {
	if c.revalidate && c.states != nil {
		return c.refreshState(ctx)
	}
	if c.stateLoaded {
		return nil
	}
	if c.state == nil {
		c.state = &State{}
	}
	if c.states == nil {
		c.stateLoaded = true
		return nil
	}
	st, err := c.states.LoadState(ctx, c.sessionID)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	default:
		c.state = st
		c.state.Calibration = clampCalibration(st.Calibration)
		c.savedCalibration = c.state.Calibration
		if c.offloader != nil {
			c.offloader.Seed(st.Offloaded)
		}
	}
	c.stateLoaded = true
	return nil
}

// refreshState starts a call from the stored state: the copy kept from the last call while
// the store says it is current, else the stored state read again. The offloader starts from
// the state's offloads, as a new compactor's would.
func (c *ProgressiveCompactor) refreshState(ctx context.Context) error {
	var st *State
	var err error
	rv, ok := c.states.(StateRevalidator)
	if ok && c.stored != nil && c.stored.Version != "" {
		st, err = rv.LoadStateIfChanged(ctx, c.sessionID, c.stored.Version)
		if err == nil && st == nil {
			st = c.stored
		}
	} else {
		st, err = c.states.LoadState(ctx, c.sessionID)
	}
	if errors.Is(err, ErrNotFound) {
		st, err = &State{}, nil
	}
	if err != nil {
		c.stored, c.state, c.stateLoaded = nil, &State{}, false
		c.resetOffloader(nil)
		return err
	}
	if st != c.stored {
		st.Calibration = clampCalibration(st.Calibration)
		c.stored = st
	}
	c.state, c.stateLoaded = c.stored.clone(), true
	c.savedCalibration = c.stored.Calibration
	c.resetOffloader(c.stored.Offloaded)
	return nil
}

// resetOffloader gives the compactor a new offloader that knows entries.
func (c *ProgressiveCompactor) resetOffloader(entries map[string]OffloadEntry) {
	if c.store == nil {
		return
	}
	c.offloader = NewOffloader(c.store, c.sessionID, c.cfg.OffloadThreshold, c.cfg.PreviewLines)
	c.offloader.Seed(entries)
}

// saveState persists the state. A failure fails open (the record says so), except a
// conflict: another compaction saved first, so this one's merge must not overwrite it. The
// in-memory state is then dropped, to be reloaded by the next call, and ErrStateConflict
// returned before anything is recorded.
func (c *ProgressiveCompactor) saveState(ctx context.Context, rec *CompactionRecord) error {
	c.state.UpdatedAt = c.now()
	if c.offloader != nil {
		c.state.Offloaded = c.offloader.Entries()
	}
	err := c.states.SaveState(ctx, c.sessionID, c.state)
	if err == nil {
		c.savedCalibration = c.state.Calibration
		if c.revalidate {
			c.stored = c.state.clone()
		}
	}
	switch {
	case errors.Is(err, ErrConflict):
		c.state, c.stateLoaded, c.stored = &State{}, false, nil
		return fmt.Errorf("%w: %v", ErrStateConflict, err)
	case err != nil:
		rec.addError("state save: %v", err)
	}
	return nil
}

// toolIDs are the tool call IDs of the tool results in msgs.
func toolIDs(msgs []Message) map[string]bool {
	ids := map[string]bool{}
	for i := range msgs {
		if msgs[i].Role == RoleTool {
			ids[msgs[i].ToolCallID] = true
		}
	}
	return ids
}

func concat(parts ...[]Message) []Message {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]Message, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func charsOf(msgs []Message) int {
	n := 0
	for i := range msgs {
		n += msgs[i].Chars()
	}
	return n
}

// preservedCount is the number of original messages a fallback result kept after the
// system prefix (its notice is not one of them).
func preservedCount(out []Message) int {
	n := 0
	for i := systemPrefixLen(out); i < len(out); i++ {
		if !isCompactionMessage(&out[i]) {
			n++
		}
	}
	return n
}

func msSince(t time.Time) float64 {
	return float64(time.Since(t).Microseconds()) / 1000
}
