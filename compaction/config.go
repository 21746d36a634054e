package compaction

import (
	"cmp"
	"errors"
	"fmt"
	"math"
)

// Config holds the knobs of the progressive compactor. Thresholds are fractions of the
// context window (0.60 = 60%).
type Config struct {
	// ContextWindow is the model's window in tokens. Zero or less disables compaction.
	ContextWindow int

	WarnThreshold      float64 // default 0.60: start offloading large tool results
	SoftThreshold      float64 // default 0.70: summarize the oldest half of the head
	FullThreshold      float64 // default 0.80: summarize the whole head
	EmergencyThreshold float64 // default 0.95: forced truncation, no LLM
	// TargetThreshold is the usage a Soft or Full compaction brings the view down to, so one
	// compaction buys many turns instead of one: a Soft result that would stay above it is
	// done as Full in the same turn. Default 0.50; must be below WarnThreshold.
	TargetThreshold float64
	// MinSaving is the least share of the view a compaction must be predicted to save to be
	// done at all: a summarizer call or a rewrite of the cached prefix that saves less costs
	// more than it buys. Warn offloads wait until together they save this much; a Soft span
	// that saves less escalates to Full; a Full one that saves less waits. A summary that
	// comes out larger than predicted is kept (its call is paid) and its record says so.
	// Default 0.15; (0, 0.5].
	MinSaving float64

	// PrepareThreshold is the usage from which, with WithBackground and a summarizer other
	// than the extractive one, the summary the next Soft will need is prepared off the turn.
	// 0 means WarnThreshold; it must be below SoftThreshold.
	PrepareThreshold float64

	// SummarizerCallsPerHour bounds the calls a session makes to its summarizer (not the
	// extractive one, which costs nothing) in any hour; past it the session is summarized
	// extractively and its records say so. It stops one session from spending the
	// platform's LLM budget, for example by rewriting an early message every request so
	// each one starts over. 0 means no limit (the default). The calls are counted in the
	// session's state, or in a SummarizerBudget shared by several compactors
	// (WithSummarizerBudget: the API shares one among a session's conversations).
	SummarizerCallsPerHour int

	// OffloadThreshold: tool results in the head longer than this (bytes) are offloaded
	// during compaction. Default 4000.
	OffloadThreshold int
	// HookThreshold: the OffloadHook offloads results longer than this at source, before
	// they enter the history. Default 10000.
	HookThreshold int
	// PreviewLines is how many leading lines of an offloaded result stay in context. Default
	// 10; NoPreviewLines keeps none (0 takes the default, as for every field).
	PreviewLines int
	// ImageOffloadThreshold: images of the head (base64 content parts: OpenAI image_url and
	// input_image with a data URL, Anthropic image with a base64 source) whose data is
	// longer than this (bytes) are offloaded like large tool results. Default
	// DefaultImageOffloadThreshold (32 KiB); NoImageOffload offloads none.
	ImageOffloadThreshold int
	// MinTailMessages is the number of most recent messages always kept verbatim. Default 6.
	MinTailMessages int
	// MaxSummaryChars bounds the prose summary kept in the compaction message. Default 6000.
	MaxSummaryChars int
	// RawHistory makes every turn work on the full raw history, as the seed spec does,
	// instead of the derived view after the watermark. Then a session that outgrows the
	// window lands in Emergency on every turn; it exists to measure that difference.
	RawHistory bool

	// PinRule chooses the messages kept verbatim, right after the system messages, in every
	// view once a compaction has covered them (see PinRule). Default PinTaskAndInstructions.
	PinRule PinRule
	// PinBudget bounds the pinned messages to this fraction of the window. A pin over it is
	// kept as its head and tail, its full text offloaded and readable back. Default 0.15.
	PinBudget float64
}

// PinRule says which messages of a history are pinned. Messages the agent marks
// ("pinned": true) are pinned under every rule but PinNone.
type PinRule string

// The pin rules.
const (
	// PinTaskAndInstructions pins the task (the user message the agent first answered) and
	// every later user message, once per distinct text (a repeated nag is pinned once).
	PinTaskAndInstructions PinRule = "TaskAndInstructions"
	// PinTask pins only the task.
	PinTask PinRule = "Task"
	// PinMarked pins only the messages the agent marks.
	PinMarked PinRule = "Marked"
	// PinNone pins nothing, marks included.
	PinNone PinRule = "None"
)

func (r PinRule) valid() bool {
	switch r {
	case PinTaskAndInstructions, PinTask, PinMarked, PinNone:
		return true
	}
	return false
}

// NoPreviewLines as Config.PreviewLines keeps no line of an offloaded result in its
// placeholder: only its size and how to read it back.
const NoPreviewLines = -1

// maxSummarizerCallsPerHour bounds SummarizerCallsPerHour, and so the call times a state keeps.
const maxSummarizerCallsPerHour = 3600

// DefaultConfig returns the spec's defaults with the given window.
func DefaultConfig(contextWindow int) Config {
	return Config{
		ContextWindow:         contextWindow,
		WarnThreshold:         0.60,
		SoftThreshold:         0.70,
		FullThreshold:         0.80,
		EmergencyThreshold:    0.95,
		TargetThreshold:       0.50,
		MinSaving:             0.15,
		OffloadThreshold:      4000,
		HookThreshold:         10000,
		PreviewLines:          10,
		ImageOffloadThreshold: DefaultImageOffloadThreshold,
		MinTailMessages:       6,
		MaxSummaryChars:       6000,
		PinRule:               PinTaskAndInstructions,
		PinBudget:             0.15,
	}
}

// withDefaults fills zero values with the defaults, so a partly filled Config works.
func (c Config) withDefaults() Config {
	d := DefaultConfig(c.ContextWindow)
	c.WarnThreshold = cmp.Or(c.WarnThreshold, d.WarnThreshold)
	c.SoftThreshold = cmp.Or(c.SoftThreshold, d.SoftThreshold)
	c.FullThreshold = cmp.Or(c.FullThreshold, d.FullThreshold)
	c.EmergencyThreshold = cmp.Or(c.EmergencyThreshold, d.EmergencyThreshold)
	c.TargetThreshold = cmp.Or(c.TargetThreshold, d.TargetThreshold)
	c.MinSaving = cmp.Or(c.MinSaving, d.MinSaving)
	c.OffloadThreshold = cmp.Or(c.OffloadThreshold, d.OffloadThreshold)
	c.HookThreshold = cmp.Or(c.HookThreshold, d.HookThreshold)
	c.PreviewLines = cmp.Or(c.PreviewLines, d.PreviewLines)
	c.ImageOffloadThreshold = cmp.Or(c.ImageOffloadThreshold, d.ImageOffloadThreshold)
	c.MinTailMessages = cmp.Or(c.MinTailMessages, d.MinTailMessages)
	c.MaxSummaryChars = cmp.Or(c.MaxSummaryChars, d.MaxSummaryChars)
	c.PinRule = cmp.Or(c.PinRule, d.PinRule)
	c.PinBudget = cmp.Or(c.PinBudget, d.PinBudget)
	return c
}

// FieldError is one rule of Validate that a field of the Config breaks. Field is the Config
// field's name, so a caller that sets the field under a name of its own (a command-line flag,
// a policy field) can say which of its settings is at fault without repeating the rule.
type FieldError struct {
	// Field is the name of the Config field, for example "SoftThreshold"; for a rule between
	// two fields, the one that must change (the later threshold, the target).
	Field string
	msg   string
}

func (e *FieldError) Error() string { return e.msg }

func fieldErrorf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, msg: fmt.Sprintf(format, args...)}
}

// Validate reports every problem with the config at once: an errors.Join of *FieldError, one
// per broken rule, or nil.
func (c Config) Validate() error {
	var errs []error
	if c.ContextWindow < 0 {
		errs = append(errs, fieldErrorf("ContextWindow", "context window %d is negative", c.ContextWindow))
	}
	th := []struct {
		field, name string
		v           float64
	}{{"WarnThreshold", "warn", c.WarnThreshold}, {"SoftThreshold", "soft", c.SoftThreshold}, {"FullThreshold", "full", c.FullThreshold}, {"EmergencyThreshold", "emergency", c.EmergencyThreshold}}
	for i, t := range th {
		if t.v <= 0 || t.v > 1 {
			errs = append(errs, fieldErrorf(t.field, "%s threshold %.2f must be in (0, 1]", t.name, t.v))
		}
		if i > 0 && t.v <= th[i-1].v {
			errs = append(errs, fieldErrorf(t.field, "%s threshold %.2f must be above %s threshold %.2f", t.name, t.v, th[i-1].name, th[i-1].v))
		}
	}
	if c.TargetThreshold <= 0 || c.TargetThreshold >= c.WarnThreshold {
		errs = append(errs, fieldErrorf("TargetThreshold", "target threshold %.2f must be in (0, warn threshold %.2f)", c.TargetThreshold, c.WarnThreshold))
	}
	if c.PrepareThreshold < 0 || (c.PrepareThreshold > 0 && c.PrepareThreshold >= c.SoftThreshold) {
		errs = append(errs, fieldErrorf("PrepareThreshold", "prepare threshold %.2f must be 0 (the warn threshold) or below the soft threshold %.2f", c.PrepareThreshold, c.SoftThreshold))
	}
	if c.MinSaving <= 0 || c.MinSaving > 0.5 {
		errs = append(errs, fieldErrorf("MinSaving", "min saving %.2f must be in (0, 0.5]", c.MinSaving))
	}
	if c.SummarizerCallsPerHour < 0 || c.SummarizerCallsPerHour > maxSummarizerCallsPerHour {
		errs = append(errs, fieldErrorf("SummarizerCallsPerHour", "summarizer calls per hour %d must be between 0 (no limit) and %d", c.SummarizerCallsPerHour, maxSummarizerCallsPerHour))
	}
	if c.OffloadThreshold < 1 {
		errs = append(errs, fieldErrorf("OffloadThreshold", "offload threshold %d must be positive", c.OffloadThreshold))
	}
	if c.HookThreshold < 1 {
		errs = append(errs, fieldErrorf("HookThreshold", "hook threshold %d must be positive", c.HookThreshold))
	}
	if c.PreviewLines < NoPreviewLines || c.PreviewLines > 1000 {
		errs = append(errs, fieldErrorf("PreviewLines", "preview lines %d must be between 0 and 1000 (or NoPreviewLines)", c.PreviewLines))
	}
	if c.ImageOffloadThreshold < NoImageOffload {
		errs = append(errs, fieldErrorf("ImageOffloadThreshold", "image offload threshold %d must be positive (or NoImageOffload)", c.ImageOffloadThreshold))
	}
	if c.MinTailMessages < 1 {
		errs = append(errs, fieldErrorf("MinTailMessages", "min tail messages %d must be at least 1", c.MinTailMessages))
	}
	if c.MaxSummaryChars < 200 {
		errs = append(errs, fieldErrorf("MaxSummaryChars", "max summary chars %d must be at least 200", c.MaxSummaryChars))
	}
	if !c.PinRule.valid() {
		errs = append(errs, fieldErrorf("PinRule", "pin rule %q must be one of %s, %s, %s, %s", c.PinRule, PinTaskAndInstructions, PinTask, PinMarked, PinNone))
	}
	if c.PinBudget <= 0 || c.PinBudget > 0.5 {
		errs = append(errs, fieldErrorf("PinBudget", "pin budget %.2f must be in (0, 0.5]", c.PinBudget))
	}
	return errors.Join(errs...)
}

// Usage is the ratio of the estimated tokens to the window (0 when the window is unset).
func (c Config) Usage(tokens int) float64 {
	if c.ContextWindow <= 0 {
		return 0
	}
	return float64(tokens) / float64(c.ContextWindow)
}

// NextTier is the tier above the one tokens is in and how many more tokens the view can
// take before reaching it (TierNone and 0 when tokens is already in Emergency or the window
// is unset).
func (c Config) NextTier(tokens int) (Tier, int) {
	if c.ContextWindow <= 0 {
		return TierNone, 0
	}
	for _, t := range []struct {
		tier Tier
		at   float64
	}{{TierWarn, c.WarnThreshold}, {TierSoft, c.SoftThreshold}, {TierFull, c.FullThreshold}, {TierEmergency, c.EmergencyThreshold}} {
		// The first token count at or above the threshold.
		at := int(math.Ceil(t.at * float64(c.ContextWindow)))
		if tokens < at {
			return t.tier, at - tokens
		}
	}
	return TierNone, 0
}

// DetermineTier maps an estimated token count to a tier, as the spec's determineTier.
func (c Config) DetermineTier(tokens int) Tier {
	if c.ContextWindow <= 0 {
		return TierNone
	}
	ratio := c.Usage(tokens)
	switch {
	case ratio >= c.EmergencyThreshold:
		return TierEmergency
	case ratio >= c.FullThreshold:
		return TierFull
	case ratio >= c.SoftThreshold:
		return TierSoft
	case ratio >= c.WarnThreshold:
		return TierWarn
	default:
		return TierNone
	}
}
