package compaction

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strings"
	"time"
	"unsafe"
)

// OffloadEntry describes one tool result moved out of the context.
type OffloadEntry struct {
	ToolCallID string `json:"toolCallID"`
	Bytes      int    `json:"bytes"`
	// CRC32C is the Castagnoli CRC of the content (0 in entries stored before it existed):
	// with Bytes, it tells a result offloaded under the ID from another result of the same
	// length that reuses the ID, which must not get the first one's placeholder.
	CRC32C uint32 `json:"crc32c,omitempty"`
	// Ref says where the full text lives (a file path or an s3:// URL); the agent reads it
	// back by ToolCallID.
	Ref string `json:"ref"`
	// Kind is OffloadKindImage for an image (ToolCallID is then the image's ID, Bytes the
	// size of its data URL), empty for a tool result.
	Kind string `json:"kind,omitempty"`
	// MediaType is an image's media type (image/png, ...).
	MediaType string `json:"mediaType,omitempty"`
	// Message is the index, in the conversation, of the message an image was first
	// offloaded from, when known.
	Message *int `json:"message,omitempty"`
}

// OffloadKindImage is OffloadEntry.Kind of an offloaded image.
const OffloadKindImage = "image"

// OffTurnWork is what one compaction did with summaries made off the turn (WithBackground),
// part of its CompactionRecord.
type OffTurnWork struct {
	// SummarizerDeferred: this compaction did not wait for the summarizer and summarized
	// extractively. PreparedStarted: it started a summarization off the turn, "ahead" (for
	// the next Soft) or "late" (of what it just summarized extractively). PreparedUsed and
	// PreparedWasted count the summaries made off the turn this compaction used or discarded
	// (their calls and tokens are counted in the record's SummarizerCalls and token fields;
	// the wasted tokens in PreparedWastedTokens); PreparedCovered is how many messages of the
	// span a prepared summary covered; PreparedLateMerged says a late summary was merged into
	// the anchors and prose.
	SummarizerDeferred   bool   `json:"summarizerDeferred,omitempty"`
	PreparedStarted      string `json:"preparedStarted,omitempty"`
	PreparedUsed         int    `json:"preparedUsed,omitempty"`
	PreparedWasted       int    `json:"preparedWasted,omitempty"`
	PreparedWastedTokens int    `json:"preparedWastedTokens,omitempty"`
	PreparedCovered      int    `json:"preparedCovered,omitempty"`
	PreparedLateMerged   bool   `json:"preparedLateMerged,omitempty"`
}

// CompactionRecord is the audit entry of one compaction (spec 5.1), written as one JSONL line.
type CompactionRecord struct {
	ID               string         `json:"id"`
	SessionID        string         `json:"sessionID"`
	Timestamp        time.Time      `json:"timestamp"`
	Tier             Tier           `json:"tier"`
	TokensBefore     int            `json:"tokensBefore"`
	TokensAfter      int            `json:"tokensAfter"`
	MsgsBefore       int            `json:"msgsBefore"`
	MsgsAfter        int            `json:"msgsAfter"`
	Anchors          []Anchor       `json:"anchors"`
	Offloaded        []OffloadEntry `json:"offloaded"`
	Summarized       int            `json:"summarized"`
	PreservedTail    int            `json:"preservedTail"`
	SummaryText      string         `json:"summaryText"`
	CompressionRatio float64        `json:"compressionRatio"`
	// DurationMs is the wall time of the compaction in milliseconds.
	DurationMs float64 `json:"durationMs"`
	// HistoryTokens estimates the caller's whole raw history (-1 when the request was a
	// delta); TokensBefore counts the derived view the tier was chosen on.
	HistoryTokens int `json:"historyTokens"`
	// PromptTokens is the prompt size the caller's LLM reported for its previous call, when
	// the caller sent it: the real count beside the estimate. 0 when not sent.
	PromptTokens int `json:"promptTokens,omitempty"`
	// Calibration is the session's factor real/estimated tokens, learnt from the prompt
	// sizes callers report (1 until one is reported). The tier is chosen on TokensBefore
	// times Calibration; UsageBefore and UsageAfter are those calibrated ratios of the window.
	Calibration float64 `json:"calibration,omitempty"`
	UsageBefore float64 `json:"usageBefore"`
	UsageAfter  float64 `json:"usageAfter"`
	// NextTier and TokensToNextTier say how many more (calibrated) tokens the returned view
	// can take before the next tier starts; empty and 0 in Emergency.
	NextTier         Tier `json:"nextTier,omitempty"`
	TokensToNextTier int  `json:"tokensToNextTier"`
	// SummarizerCalls, SummarizerInputTokens and SummarizerOutputTokens count the
	// summarizer's work in this compaction: the tokens its server reported (OpenAI-compatible
	// usage), estimated from the prompt and the answer when it reported none. The extractive
	// summarizer's are what an LLM would have been sent and returned; Emergency's extractive
	// summary is not counted (it makes no call).
	SummarizerCalls        int `json:"summarizerCalls,omitempty"`
	SummarizerInputTokens  int `json:"summarizerInputTokens,omitempty"`
	SummarizerOutputTokens int `json:"summarizerOutputTokens,omitempty"`
	// SummarizerThrottled says the session's summarizer budget (SummarizerCallsPerHour)
	// was used up: this compaction was summarized extractively instead.
	SummarizerThrottled bool `json:"summarizerThrottled,omitempty"`
	// What this compaction did with summaries made off the turn (WithBackground).
	OffTurnWork
	// WatermarkBefore and WatermarkAfter are how many leading raw messages the compaction
	// message stood for before and after this compaction; PrefixHash fingerprints the
	// history up to WatermarkAfter. A caller sends both back for a delta request.
	WatermarkBefore int    `json:"watermarkBefore"`
	WatermarkAfter  int    `json:"watermarkAfter"`
	PrefixHash      string `json:"prefixHash,omitempty"`
	// Seen and SeenHash, on a turn that compacted nothing before the first summary and
	// returned the history as it was, let the caller's next call send only what follows
	// the history's first Seen messages (Delta.Seen). Only a compactor kept between requests
	// gives them (WithStateRevalidation); never persisted, as only such turns carry them.
	Seen     int    `json:"-"`
	SeenHash string `json:"-"`
	// PinnedMessages, PinnedTokens and PinnedHash describe the pins that open the view after
	// this compaction: how many, their estimated tokens and a hash of their bytes (empty
	// without pins), so anyone can check from the trail that pins never changed.
	PinnedMessages int    `json:"pinnedMessages"`
	PinnedTokens   int    `json:"pinnedTokens"`
	PinnedHash     string `json:"pinnedHash,omitempty"`
	// FixedTokens estimates (calibrated) the part of the view no compaction shrinks: the
	// system messages and the pins.
	FixedTokens int `json:"fixedTokens,omitempty"`
	// WindowTooSmall says the fixed part alone is at or over the Emergency threshold of the
	// window: every turn would be Emergency. The session has been compacted once; until the
	// fixed part fits (or the window grows), turns are left as they are instead of running
	// Emergency on each of them.
	WindowTooSmall bool `json:"windowTooSmall,omitempty"`
	// Archive names the object (the store's reference) that holds the raw messages the
	// watermark passed in this compaction, as the agent sent them (offloaded results as their
	// placeholders): ArchiveKey of the range ArchiveFrom to WatermarkAfter. Empty when the
	// watermark did not move, the store keeps no archives, or the write failed (see Error).
	Archive     string `json:"archive,omitempty"`
	ArchiveFrom int    `json:"archiveFrom,omitempty"`
	// Reset marks the record of a reset (ResetState): the session's compaction state was
	// forgotten, so its next turn starts from the agent's full history. WatermarkBefore is
	// the watermark it had; its archives are kept.
	Reset bool `json:"reset,omitempty"`
	// Notes says what happened besides the tier's data flow, such as a history reset.
	Notes []string `json:"notes,omitempty"`
	// Error lists what failed open during the compaction ("; "-separated); empty when all went well.
	Error string `json:"error"`
}

// JSONLine renders the record as one line of a JSONL trail, newline included. encoding/json
// escapes control characters inside strings, so the terminating newline is the only one;
// HTML escaping is off because the trail is read by people and tools, not embedded in HTML.
func (r *CompactionRecord) JSONLine() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encode record %s: %w", r.ID, err)
	}
	return buf.Bytes(), nil
}

// addError appends a fail-open cause to the record.
func (r *CompactionRecord) addError(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if r.Error == "" {
		r.Error = msg
		return
	}
	r.Error += "; " + msg
}

// ChangedView reports whether the compaction changed the view it was given: it offloaded,
// summarized or cut something. A record above TierNone that did not only waited (a Warn
// offload batch or a summarization not worth doing yet, see its notes).
func (r *CompactionRecord) ChangedView() bool {
	return r.Tier != TierNone &&
		(len(r.Offloaded) > 0 || r.Summarized > 0 || r.TokensAfter != r.TokensBefore || r.MsgsAfter != r.MsgsBefore)
}

// OffloadedBytes is the total size of the results this compaction offloaded.
func (r *CompactionRecord) OffloadedBytes() int {
	n := 0
	for _, o := range r.Offloaded {
		n += o.Bytes
	}
	return n
}

// newRecordID returns a time-sortable unique ID: zero-padded nanoseconds then random hex, so
// record segments named after it list in time order.
func newRecordID(t time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return fmt.Sprintf("%020d-%s", t.UnixNano(), hex.EncodeToString(b[:]))
}

// Notification renders the spec's two-line notification for a record, for example
//
//	⚡ Context compressed [Full] 45.2K->8.1K tokens (82% compression ratio)
//	   5 anchors | 3 offload(42KB) | 28 summarized | tail: 6 preserved
func (r *CompactionRecord) Notification() string {
	var b strings.Builder
	fmt.Fprintf(&b, "⚡ Context compressed [%s] %s->%s tokens (%.0f%% compression ratio)\n",
		r.Tier, humanTokens(r.TokensBefore), humanTokens(r.TokensAfter), r.CompressionRatio*100)
	fmt.Fprintf(&b, "   %d anchors | %d offload(%s) | %d summarized | tail: %d preserved",
		CountAvailable(r.Anchors), len(r.Offloaded), humanBytes(r.OffloadedBytes()), r.Summarized, r.PreservedTail)
	if r.Error != "" {
		fmt.Fprintf(&b, " | error: %s", r.Error)
	}
	return b.String()
}

func humanTokens(n int) string {
	if n < 1000 {
		return fmt.Sprintf("%d", n)
	}
	if n < 1_000_000 {
		return fmt.Sprintf("%.1fK", float64(n)/1000)
	}
	return fmt.Sprintf("%.1fM", float64(n)/1_000_000)
}

func humanBytes(n int) string {
	if n < 1024*1024 {
		return fmt.Sprintf("%dKB", (n+512)/1024)
	}
	return fmt.Sprintf("%.1fMB", float64(n)/(1024*1024))
}

// castagnoli is the CRC-32C table (hardware-accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// contentCRC is the CRC32C of a tool result's content.
func contentCRC(content string) uint32 {
	return crc32.Checksum(unsafe.Slice(unsafe.StringData(content), len(content)), castagnoli)
}

// matches reports whether e is the entry of content: the same size and, when e has one, the
// same CRC.
func (e *OffloadEntry) matches(content string) bool {
	return e.Bytes == len(content) && (e.CRC32C == 0 || e.CRC32C == contentCRC(content))
}
