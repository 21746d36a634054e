package compaction

import "context"

// What the external tests (package compaction_test) need from inside the package.

// Unexported identifiers of the engine the external tests' assertions use.
var (
	HasOrphans      = hasOrphans
	ViewClosed      = viewClosed
	CloseView       = closeView
	SystemPrefixLen = systemPrefixLen
	Calibrated      = calibrated
	PinMessages     = pinMessages
	SplitRest       = splitRest
	FormatAnchors   = formatAnchors
)

const (
	MaxPreviewBytes     = maxPreviewBytes
	MaxPreviewLineBytes = maxPreviewLineBytes
	PreviewTailLines    = previewTailLines
	ReadBackScanBytes   = readBackScanBytes
	StateBudgetAttempts = stateBudgetAttempts
)

// Test helpers the internal tests use too, defined once in this package's test files.
var (
	Sys               = sys
	User              = user
	Asst              = asst
	Call              = call
	ToolResultMessage = result
	GenHistory        = genHistory
	Lines             = lines
	CompactDelta      = compactDelta
	IDs               = ids
	AnchorMap         = anchorMap
	Pixels            = pixels
	ChatImage         = chatImage
	ResponsesImage    = responsesImage
	AnthropicImage    = anthropicImage
	PytestVerboseLog  = pytestVerboseLog
)

// Unexported methods and fields white-box tests of the external package look at.

func (o *Offloader) CachedPlaceholder(m *Message) (string, bool) { return o.cachedPlaceholder(m) }

func (o *Offloader) OffloadSaving(m *Message) int { return o.offloadSaving(m) }

func (o *Offloader) Offload(ctx context.Context, m *Message) (placeholder string, entry OffloadEntry, created bool, err error) {
	return o.offload(ctx, m)
}

// MeasuredLen is the number of previews offloadSaving measured and no offload used yet.
func (o *Offloader) MeasuredLen() int { return o.measured.Len() }

func (e *OffloadEntry) Matches(content string) bool { return e.matches(content) }

// SaveEmptyState saves an empty state as if the compactor had loaded it: another
// compactor's save, with its offloads, at watermark 0.
func (c *ProgressiveCompactor) SaveEmptyState(ctx context.Context) error {
	c.state = &State{}
	c.stateLoaded = true
	return c.saveState(ctx, &CompactionRecord{})
}
