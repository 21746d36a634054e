package compaction

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// CompactionHeader starts every message the engine writes into a compacted view.
const CompactionHeader = "[Context Compaction]"

// EmergencyError is the record error of the Emergency tier (spec 2.3).
const EmergencyError = "emergency fallback: forced truncation"

// Fallback is the compactor used without a summarizer: Compact when summarization fails,
// CompactForce for the Emergency tier. TokenBudgetCompactor is the default.
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

	mu          sync.Mutex
	state       *State
	stateLoaded bool
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

// CompactWithRecord is the main entry point: it picks the tier from the usage ratio, runs its
// data flow and returns the derived view and the record. msgs is never modified. An invalid
// history is an error and nothing is stored.
func (c *ProgressiveCompactor) CompactWithRecord(ctx context.Context, msgs []Message) ([]Message, *CompactionRecord, error) {
	if err := Validate(msgs); err != nil {
		return nil, nil, fmt.Errorf("invalid history: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run(ctx, msgs, c.cfg.DetermineTier(EstimateTokens(msgs)))
}

// CompactForceWithRecord is CompactForce with its record.
func (c *ProgressiveCompactor) CompactForceWithRecord(ctx context.Context, msgs []Message) ([]Message, *CompactionRecord, error) {
	if err := Validate(msgs); err != nil {
		return nil, nil, fmt.Errorf("invalid history: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run(ctx, msgs, TierEmergency)
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

func (c *ProgressiveCompactor) run(ctx context.Context, msgs []Message, tier Tier) ([]Message, *CompactionRecord, error) {
	startWall := time.Now()
	ts := c.now()
	rec := &CompactionRecord{
		ID: newRecordID(ts), SessionID: c.sessionID, Timestamp: ts, Tier: tier,
		TokensBefore: EstimateTokens(msgs), MsgsBefore: len(msgs),
		Anchors: []Anchor{}, Offloaded: []OffloadEntry{},
	}
	if tier == TierNone { // no side effects at all
		rec.TokensAfter, rec.MsgsAfter, rec.PreservedTail = rec.TokensBefore, len(msgs), len(msgs)-systemPrefixLen(msgs)
		rec.DurationMs = msSince(startWall)
		return msgs[:len(msgs):len(msgs)], rec, nil
	}
	stateOK := true
	if err := c.loadState(ctx); err != nil {
		rec.addError("state load: %v", err)
		stateOK = false // never overwrite a state we could not read
	}
	offloadsBefore := 0
	if c.offloader != nil {
		offloadsBefore = len(c.offloader.Entries())
	}
	summarized := false

	var out []Message
	switch tier {
	case TierEmergency:
		out = c.fallback.CompactForce(msgs)
		rec.addError(EmergencyError)
		rec.PreservedTail = preservedCount(out)
	case TierWarn:
		prefix, head, tail := splitHeadTail(msgs, c.cfg.MinTailMessages)
		head = c.offload(ctx, head, rec)
		out = concat(prefix, head, tail)
		rec.PreservedTail = len(tail)
	case TierSoft, TierFull:
		prefix, head, tail := splitHeadTail(msgs, c.cfg.MinTailMessages)
		span, kept := head, []Message(nil)
		if tier == TierSoft {
			span, kept = splitHalf(head)
		}
		out, summarized = c.summarizeSpan(ctx, tier, prefix, span, kept, tail, rec)
	}

	if stateOK && c.states != nil && (summarized || (c.offloader != nil && len(c.offloader.Entries()) != offloadsBefore)) {
		c.saveState(ctx, rec)
	}
	rec.TokensAfter, rec.MsgsAfter = EstimateTokens(out), len(out)
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

// summarizeSpan is the Soft/Full flow: memory extraction, offload, summarization with the
// incremental merge, and the compaction message in place of span. It reports whether the
// state gained a new summary.
func (c *ProgressiveCompactor) summarizeSpan(ctx context.Context, tier Tier, prefix, span, kept, tail []Message, rec *CompactionRecord) ([]Message, bool) {
	rec.PreservedTail = len(kept) + len(tail)
	if len(span) == 0 {
		return concat(prefix, kept, tail), false
	}
	if c.extractor != nil {
		if err := c.extractor.Extract(ctx, c.sessionID, span); err != nil {
			c.log.V(1).Info("long-term memory extraction failed; skipped", "session", c.sessionID, "error", err.Error())
		}
	}
	span = c.offload(ctx, span, rec)

	raw, err := c.summarizer.Summarize(ctx, SummaryRequest{
		SessionID: c.sessionID, Tier: tier, Messages: span,
		PreviousSummary: c.state.LastSummary, PreviousAnchors: c.state.LastAnchors,
		MaxSummaryChars: c.cfg.MaxSummaryChars,
	})
	var anchors []Anchor
	var summary string
	if err == nil {
		var perr error
		anchors, summary, perr = ParseAnchorsAndSummary(raw)
		if perr != nil {
			rec.addError("%v", perr)
		}
		if summary == "" && CountAvailable(anchors) == 0 {
			err = errors.New("output holds no anchors and no summary")
		}
	}
	if err != nil {
		rec.addError("summarizer %s failed: %v; fell back to budget truncation", c.summarizer.Name(), err)
		out := c.fallback.Compact(concat(prefix, span, kept, tail))
		rec.PreservedTail = preservedCount(out)
		return out, false
	}
	summary = truncateUTF8(summary, c.cfg.MaxSummaryChars)
	merged := MergeAnchors(c.state.LastAnchors, anchors)
	msg := c.compactionMessage(ctx, merged, summary, span)
	if spanChars := charsOf(span); msg.Chars() >= spanChars {
		// Summarizing would grow the context: keep the span verbatim (already offloaded).
		rec.addError("summary (%d bytes) not smaller than the %d messages (%d bytes) it would replace; kept them", msg.Chars(), len(span), spanChars)
		return concat(prefix, span, kept, tail), false
	}
	rec.Anchors, rec.SummaryText, rec.Summarized = merged, summary, len(span)
	c.state.LastAnchors, c.state.LastSummary = merged, summary
	return RepairToolPairs(concat(prefix, []Message{msg}, kept, tail)), true
}

// compactionMessage builds the single message that stands for the summarized span.
func (c *ProgressiveCompactor) compactionMessage(ctx context.Context, anchors []Anchor, summary string, span []Message) Message {
	var b strings.Builder
	b.WriteString(CompactionHeader)
	b.WriteString("\nEarlier messages of this conversation were summarized to fit the context window.\n\n## Anchors\n")
	b.WriteString(FormatAnchors(anchors))
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

// loadState reads the persisted state once; a missing state is an empty one.
func (c *ProgressiveCompactor) loadState(ctx context.Context) error {
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
		if c.offloader != nil {
			c.offloader.Seed(st.Offloaded)
		}
	}
	c.stateLoaded = true
	return nil
}

func (c *ProgressiveCompactor) saveState(ctx context.Context, rec *CompactionRecord) {
	c.state.UpdatedAt = c.now()
	if c.offloader != nil {
		c.state.Offloaded = c.offloader.Entries()
	}
	if err := c.states.SaveState(ctx, c.sessionID, c.state); err != nil {
		rec.addError("state save: %v", err)
	}
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
		if !(out[i].Role == RoleUser && strings.HasPrefix(out[i].Content, CompactionHeader)) {
			n++
		}
	}
	return n
}

func msSince(t time.Time) float64 {
	return float64(time.Since(t).Microseconds()) / 1000
}
