package compaction

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// state is never lost, and a call whose context ends while it waits for an earlier one
// returns ErrBusy. A server needs no lock of its own around it.
type ProgressiveCompactor struct {
	cfg        Config
	sessionID  string
	summarizer Summarizer
	fallback   Fallback
	store      ToolResultStore
	offloader  *Offloader
	records    RecordStore
	states     StateStore
	// archive keeps the spans the watermark passes (nil: not archived).
	archive ArchiveStore
	// extractMemo is what the extractive summarizer read of each message, with RawHistory,
	// where every turn summarizes the head again (nil otherwise: a message the watermark
	// passed is not summarized again).
	extractMemo *extractMemo
	// archiveEncoding is the archive of the span being summarized, encoded beside the
	// summary; a turn waits for it before it ends.
	archiveEncoding archiveEncoding
	extractor       MemoryExtractor
	todos           TodoInjector
	log             logr.Logger
	now             func() time.Time

	// revalidate: every call starts from the stored state (WithStateRevalidation).
	revalidate bool
	// trustFor: how long after the store last confirmed stored a delta call that continues
	// from it skips the conditional read (WithStateTrust); 0 never skips it.
	trustFor time.Duration
	// confirmedAt is when the store last confirmed stored: read, revalidated or saved.
	confirmedAt time.Time
	// storedAbsent: the store said at confirmedAt that the session has no state yet (stored
	// is then the empty state).
	storedAbsent bool

	// turn is held (a value sent into it, capacity 1) by the call the compactor serves: the
	// calls of a session are serialized, and one waiting for its turn gives up when its
	// context ends (ErrBusy).
	turn        chan struct{}
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
	// budget, when set, counts the summarizer calls instead of the state (WithSummarizerBudget).
	budget SummarizerBudget
	// seen is the history the last call answered as it was, for a seen delta next (seen.go).
	seen seenPrefix
	// background runs summarizations off the turn (WithBackground); prep is their state.
	background Background
	prep       prepared
}

// Option configures a ProgressiveCompactor.
type Option func(*ProgressiveCompactor)

// WithSummarizer sets the summarizer (default: ExtractiveSummarizer).
func WithSummarizer(s Summarizer) Option { return func(c *ProgressiveCompactor) { c.summarizer = s } }

// WithFallback replaces the default TokenBudgetCompactor.
func WithFallback(f Fallback) Option { return func(c *ProgressiveCompactor) { c.fallback = f } }

// WithStore uses one backend for offloaded results, records and state, and for the archive
// of what summaries replace when it is an ArchiveStore too.
func WithStore(s Store) Option {
	return func(c *ProgressiveCompactor) {
		c.store, c.records, c.states = s, s, s
		c.archive, _ = s.(ArchiveStore)
	}
}

// WithArchiveStore archives into a the raw messages every compaction's watermark passes
// (fail-open); nil archives nothing.
func WithArchiveStore(a ArchiveStore) Option {
	return func(c *ProgressiveCompactor) { c.archive = a }
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

// WithSummarizerBudget counts the summarizer calls SummarizerCallsPerHour limits in b
// instead of the session's state, so several compactors (the conversations of one session,
// on any replica) share one budget. A budget that fails is not trusted: the compaction is
// summarized extractively and says so in its record.
func WithSummarizerBudget(b SummarizerBudget) Option {
	return func(c *ProgressiveCompactor) { c.budget = b }
}

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

// WithStateTrust, with WithStateRevalidation, lets a delta call skip the conditional read
// when it continues from the kept state: its watermark and prefix hash are those of the state
// this compactor last read or saved, and the store confirmed that state less than d ago. A
// caller sends those only after an answer of this compactor, or of one that computed the same
// state, so it is what the caller's view was made from. A call with the full history skips
// the read likewise while the kept state has not moved the watermark (the store said there is
// no state yet, or only offloads were saved) and was confirmed less than d ago: a
// conversation before its first summary, the most common turn of an agent with a large
// window. Only a versioned store (a StateRevalidator) is trusted, as its writes are
// conditional: a state another process saved meanwhile is never overwritten (the call fails
// with ErrStateConflict, to be run again on the stored state). What the skip can miss, for up
// to d, is what another process saved without moving the watermark (its offloads of results
// after the watermark, its calibration) or, before the watermark first moves, its first save
// or summary: a turn that writes nothing then answers from the kept state, and a turn that
// compacts may summarize again what the other one did before its write conflicts. Meant for
// requests a load balancer keeps on one process (session affinity); d <= 0 never skips.
func WithStateTrust(d time.Duration) Option {
	return func(c *ProgressiveCompactor) { c.trustFor = max(d, 0) }
}

// NewProgressiveCompactor returns a compactor for one session. Zero fields of cfg take the
// spec's defaults.
func NewProgressiveCompactor(cfg Config, opts ...Option) (*ProgressiveCompactor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid compaction config: %w", err)
	}
	c := &ProgressiveCompactor{turn: make(chan struct{}, 1), cfg: cfg, sessionID: "default", summarizer: ExtractiveSummarizer{}, log: logr.Discard(), now: time.Now}
	for _, o := range opts {
		o(c)
	}
	if err := ValidateSessionID(c.sessionID); err != nil {
		return nil, err
	}
	if cfg.RawHistory {
		c.extractMemo = newExtractMemo()
	}
	if c.fallback == nil {
		c.fallback = TokenBudgetCompactor{Budget: int(float64(cfg.ContextWindow) * cfg.WarnThreshold), MinTailMessages: cfg.MinTailMessages}
	}
	if c.store != nil {
		c.offloader = NewOffloader(c.store, c.sessionID, cfg.OffloadThreshold, cfg.PreviewLines).WithImages(cfg.ImageOffloadThreshold)
	}
	return c, nil
}

// Config returns the effective configuration.
func (c *ProgressiveCompactor) Config() Config { return c.cfg }

// LastViewTokens is the estimate of the view returned last (0 before the first), for
// WithLastViewTokens on the compactor that serves the session's next request.
func (c *ProgressiveCompactor) LastViewTokens() int {
	c.turn <- struct{}{}
	defer c.release()
	return c.lastViewTokens
}

// SessionID returns the session this compactor serves.
func (c *ProgressiveCompactor) SessionID() string { return c.sessionID }

// Offloader returns the session's offloader (nil without a tool-result store), for the
// OffloadHook at source.
func (c *ProgressiveCompactor) Offloader() *Offloader { return c.offloader }

// Request is one call of Compact: a turn of the session.
type Request struct {
	// Messages is the agent's history, the full ever-growing one, or with Delta its leading
	// system messages followed by what is new. A message with Pinned set asks to be kept
	// verbatim in every view (within the policy's pin rule and budget). Never modified.
	Messages []Message
	// Force runs the Emergency tier whatever the usage (the manual /compact).
	Force bool
	// Delta names the part of the history the caller no longer sends, and the prompt size
	// its LLM last reported (Delta.PromptTokens); zero: Messages is the full history.
	Delta Delta
}

// Result is what Compact returns.
type Result struct {
	// View is the compacted view to send to the model: with a Delta.Seen request, only its
	// messages after the caller's first Seen.
	View []Message
	// Record is the compaction's audit entry, stored with the session's records.
	Record *CompactionRecord
}

// Compact is the engine's entry point: it builds the session's derived view of the request's
// history, picks the tier from the view's usage ratio, runs the tier's data flow and returns
// the compacted view and its record (see CompactWithRecord for the derived view). An invalid
// history is an error and nothing is stored; a Delta that is not the session's current one
// wraps ErrStaleWatermark and changes nothing.
func (c *ProgressiveCompactor) Compact(ctx context.Context, req Request) (Result, error) {
	view, rec, err := c.compactRequest(ctx, req.Delta, req.Messages, req.Force)
	return Result{View: view, Record: rec}, err
}

// CompactWithRecord is Compact of a full history, without force: it builds the session's derived view of msgs
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
	if err := c.acquire(ctx); err != nil {
		return nil, nil, err
	}
	defer c.release()
	return c.compact(ctx, msgs, nil, false, 0)
}

// Delta identifies the part of a history a caller no longer sends: the watermark and prefix
// hash it got back in its last record.
type Delta struct {
	Watermark  int
	PrefixHash string
	// Seen, with Watermark 0 and PrefixHash the SeenHash of the compactor's last record,
	// makes msgs the history's leading system messages followed by the messages after its
	// first Seen: the history that record answered as it was (CompactionRecord.Seen). The
	// call then returns the view's messages after those Seen, the view being the caller's
	// first Seen messages followed by them. It is answered only on a turn that compacts
	// nothing; anything else wraps ErrStaleWatermark and needs the full history.
	Seen int
	// PromptTokens is the prompt size the caller's LLM reported for its last call (0:
	// unknown). It is recorded next to the engine's estimate and changes nothing else.
	PromptTokens int
}

// ErrStaleWatermark means a delta request's watermark or prefix hash is not the session's
// current one: the caller must send its full history.
var ErrStaleWatermark = errors.New("stale watermark: send the full history")

// ErrBusy is returned when the caller's context ends while an earlier call of the session
// still holds the compactor (its calls are serialized); the error also wraps the context's.
var ErrBusy = errors.New("an earlier call of this session is still running")

// acquire waits for the compactor's turn, or until ctx ends (ErrBusy). A free compactor is
// taken whatever ctx.
func (c *ProgressiveCompactor) acquire(ctx context.Context) error {
	select {
	case c.turn <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
	}
}

func (c *ProgressiveCompactor) release() { <-c.turn }

// ErrStateConflict means another compaction of the session saved its state while this one
// ran (for example on another replica): nothing of this compaction was recorded, and running
// it again on the new state is safe (offloads are idempotent).
var ErrStateConflict = errors.New("session state changed during the compaction: run it again")

// compactRequest is Compact for a caller that may send only what is new: msgs holds the
// history's leading system messages followed by the messages after d.Watermark. When d is
// not the session's current watermark and prefix hash it returns an error wrapping
// ErrStaleWatermark and changes nothing. A zero Delta means msgs is the full history.
func (c *ProgressiveCompactor) compactRequest(ctx context.Context, d Delta, msgs []Message, force bool) ([]Message, *CompactionRecord, error) {
	if err := c.acquire(ctx); err != nil {
		return nil, nil, err
	}
	defer c.release()
	switch {
	case d.Seen > 0 && d.Watermark == 0:
		return c.compactSeen(ctx, msgs, &d, force)
	case d.Seen != 0:
		c.seen = seenPrefix{}
		return nil, nil, fmt.Errorf("%w: a delta continues a watermark or a seen history, not both", ErrStaleWatermark)
	case d.Watermark == 0:
		return c.compact(ctx, msgs, nil, force, d.PromptTokens)
	}
	return c.compact(ctx, msgs, &d, force, d.PromptTokens)
}

// State returns a copy of the session's incremental state.
func (c *ProgressiveCompactor) State(ctx context.Context) (*State, error) {
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.release()
	if err := c.loadState(ctx, nil); err != nil {
		return nil, err
	}
	return c.state.clone(), nil
}

func (c *ProgressiveCompactor) compact(ctx context.Context, msgs []Message, d *Delta, force bool, promptTokens int) ([]Message, *CompactionRecord, error) {
	startWall := time.Now()
	ts := c.now()
	rec := &CompactionRecord{ID: newRecordID(ts), SessionID: c.sessionID, Timestamp: ts, Anchors: []Anchor{}, Offloaded: []OffloadEntry{},
		PromptTokens: promptTokens}

	c.seen = seenPrefix{}
	defer c.archiveEncoding.wait()
	stateOK := true
	if err := c.loadState(ctx, d); err != nil {
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
	rec.FixedTokens = calibrated(fixedTokens(t.system, c.state.Pins), factor)
	if rec.FixedTokens > 0 && c.cfg.Usage(rec.FixedTokens) >= c.cfg.EmergencyThreshold {
		rec.WindowTooSmall = true
		if !force && rec.Tier == TierEmergency && c.state.Watermark > 0 {
			// Compacted once already: another Emergency cannot bring the view under the
			// threshold, only rewrite it (and the provider's prompt cache) every turn.
			rec.Notes = append(rec.Notes, fmt.Sprintf("window too small: the system prompt and pins alone are %d tokens, %.0f%% of the %d-token window, over the Emergency threshold; not compacted again until they fit",
				rec.FixedTokens, 100*c.cfg.Usage(rec.FixedTokens), c.cfg.ContextWindow))
			rec.Tier = TierNone
		}
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
		if d == nil && rec.Error == "" {
			c.noteSeen(msgs, view, &t, stateOK, rec)
		}
		c.maybePrepare(ctx, &t, rec, stateOK)
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
		c.maybePrepare(ctx, &t, rec, stateOK)
	case TierSoft, TierFull:
		out = c.summarizeToTarget(ctx, &t, view, rec)
	}
	out = closeView(c.shown(out))
	if c.state.Watermark > wmBefore {
		// Before Retain below forgets the span's offloads, and before the state that moves
		// the watermark is saved: a saved watermark has had its archive written, or its
		// record says why not.
		c.archiveSpan(ctx, &t, rec)
	}

	rec.WatermarkAfter, rec.PrefixHash = c.state.Watermark, c.state.PrefixHash
	changed := reset || c.state.Watermark != wmBefore || (c.offloader != nil && c.offloader.Writes() != offloadsBefore) || c.calibrationMoved() || c.budgetCharged
	if changed && c.offloader != nil && !c.cfg.RawHistory {
		// Future views hold only messages after the watermark: forget the rest.
		after := t.rest[min(max(c.state.Watermark-t.base, 0), len(t.rest)):]
		keep := toolIDs(after)
		c.offloader.imageIDsIn(after, keep)
		c.offloader.Retain(keep)
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
		offloaded := c.offload(ctx, t, head, rec)
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

// minProseChars is the least prose a compaction message keeps beside its anchors.
const minProseChars = 500

// offload offloads the large tool results and images of msgs, a part of t.rest.
func (c *ProgressiveCompactor) offload(ctx context.Context, t *turn, msgs []Message, rec *CompactionRecord) []Message {
	if c.offloader == nil {
		return msgs
	}
	return c.offloader.offloadMessages(ctx, msgs, t.indexOf(msgs), rec)
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

// fixedTokens estimates the part of every view no compaction shrinks: the system messages and
// the pins (counted without pinStats, whose hash of the pins is not needed on every turn).
func fixedTokens(system []Message, pins []Pin) int {
	chars := 0
	for i := range system {
		chars += system[i].Chars()
	}
	for i := range pins {
		chars += pins[i].Message.Chars()
	}
	return chars / 4
}
