package compaction

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// ErrNotFound is returned by stores when a tool result or state does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned by a StateStore's SaveState when the stored state is no longer the
// version the caller loaded: another compaction of the session (another replica) saved
// first. Stores that cannot detect it never return it.
var ErrConflict = errors.New("state changed since it was loaded")

// ErrToolResultExists is returned by PutToolResult when the tool call ID already holds
// different content: an offloaded original may exist nowhere else (the agent keeps only
// the placeholder), so it is never replaced.
var ErrToolResultExists = errors.New("a different result is already stored under this tool call ID")

// ErrObjectTooLarge is returned by stores for an object larger than they read or write for
// its kind (a state, a tool result, a record): the storage endpoint is whatever a policy
// names, so a stored object, or an answer that claims to be one, is read only up to a cap,
// never whole whatever its size.
var ErrObjectTooLarge = errors.New("stored object is larger than the store allows")

// ErrTooManyPages is returned by stores whose listing (of a session's objects, to delete or
// read them) did not end within the pages one call lists: what was listed was handled and
// more may remain, so the caller calls again later instead of listing for ever.
var ErrTooManyPages = errors.New("listing did not end within the pages one call may list: more may remain")

// ToolResultStore keeps offloaded tool results, one object per session and tool call.
type ToolResultStore interface {
	// PutToolResult stores content and returns a reference that says where it lives. It
	// never replaces a stored result: the same content again succeeds with the same
	// reference, different content fails with an error wrapping ErrToolResultExists.
	// content is a string, as the engine holds it: a first compaction offloads megabytes of
	// results, and a []byte would copy every one of them.
	PutToolResult(ctx context.Context, sessionID, toolCallID, content string) (ref string, err error)
	// GetToolResult returns the stored bytes, or an error wrapping ErrNotFound.
	GetToolResult(ctx context.Context, sessionID, toolCallID string) ([]byte, error)
}

// RecordStore keeps the append-only audit trail of compactions.
type RecordStore interface {
	// AppendRecord adds one record to the session's trail.
	AppendRecord(ctx context.Context, rec *CompactionRecord) error
	// ReadRecords writes the session's trail to w as JSONL, oldest first.
	ReadRecords(ctx context.Context, sessionID string, w io.Writer) error
}

// StateStore keeps the incremental compaction state of a session, so the anchor merge
// survives restarts and works from any replica.
type StateStore interface {
	// LoadState returns the stored state, or an error wrapping ErrNotFound.
	LoadState(ctx context.Context, sessionID string) (*State, error)
	SaveState(ctx context.Context, sessionID string, st *State) error
}

// StateRevalidator is a StateStore that can tell in one conditional request whether the
// stored state is still the version a caller holds (an HTTP GET with If-None-Match), so a
// compactor that keeps the state between calls need not read it again while it is current.
type StateRevalidator interface {
	// LoadStateIfChanged returns the stored state when its version is not version, and nil
	// without an error while it still is. A missing state is an error wrapping ErrNotFound.
	LoadStateIfChanged(ctx context.Context, sessionID, version string) (*State, error)
}

// ArchiveStore keeps what summaries replaced: for every compaction that moves a session's
// watermark, the raw messages it passed, one object per compaction (ArchiveKey), so an agent
// can read or search them back (ScanArchive). It is optional beside Store: a store that has
// it archives, one that does not compacts as before.
type ArchiveStore interface {
	// PutArchive stores data, the JSONL encoding of the session's raw messages [from, to)
	// (one message a line, from first), and returns a reference that says where it lives. A
	// span stored before under the same range is replaced: the key is the range, and the
	// latest compaction of it is what the session's summary stands for.
	PutArchive(ctx context.Context, sessionID string, from, to int, data []byte) (ref string, err error)
	// ListArchives calls fn for each archive of the session (not of its conversations), in
	// the order of From, then To. An error of fn ends the listing and is returned (fn
	// returns ErrStopListing to end it early without one).
	ListArchives(ctx context.Context, sessionID string, fn func(ArchiveSpan) error) error
	// OpenArchive opens one archive for reading; a missing one is an error wrapping
	// ErrNotFound. The reader fails once the object goes past the store's cap for an
	// archive. The caller closes it.
	OpenArchive(ctx context.Context, sessionID string, from, to int) (io.ReadCloser, error)
}

// ArchiveSpan is the range of raw-history indices one archive holds: [From, To).
type ArchiveSpan struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// String is the range as archives are named: "{from}-{to}".
func (s ArchiveSpan) String() string { return fmt.Sprintf("%d-%d", s.From, s.To) }

// ErrStopListing, returned by a ListArchives callback, ends the listing without an error.
var ErrStopListing = errors.New("stop listing")

// MaxArchiveIndex bounds the indices of an archive's range: ten digits in a key, and an int
// on every platform.
const MaxArchiveIndex = 1<<31 - 1

// ValidateArchiveSpan accepts 0 <= from < to <= MaxArchiveIndex.
func ValidateArchiveSpan(from, to int) error {
	if from < 0 || to <= from || to > MaxArchiveIndex {
		return fmt.Errorf("archive range [%d, %d) is not 0 <= from < to <= %d", from, to, MaxArchiveIndex)
	}
	return nil
}

// Store is a complete backend: tool results, records, state, and session deletion.
type Store interface {
	ToolResultStore
	RecordStore
	StateStore
	// DeleteSession removes every object of the session and returns how many it removed.
	// Another session's objects are never touched, even when one ID is a prefix of another.
	DeleteSession(ctx context.Context, sessionID string) (int, error)
}

// State is what a session carries from one compaction to the next.
type State struct {
	LastSummary string   `json:"lastSummary"`
	LastAnchors []Anchor `json:"lastAnchors"`
	// Watermark is the number of leading raw-history messages the compaction message stands
	// for (summarized, or dropped by an emergency truncation); 0 means none.
	Watermark int `json:"watermark"`
	// PrefixHash fingerprints the history up to the watermark (see PrefixHash).
	PrefixHash string `json:"prefixHash,omitempty"`
	// Lineage holds the PrefixHashes of the states this one was compacted from, newest last
	// (at most keptLineage): a summary made off the turn for one of them still applies, as
	// the history was not rewritten since.
	Lineage []string `json:"lineage,omitempty"`
	// CompactionMessage is the content of the message that stands for the first Watermark
	// messages; it opens every later view, unchanged until the next summary.
	CompactionMessage string `json:"compactionMessage,omitempty"`
	// Dropped counts messages an emergency truncation dropped without summarizing them
	// (states written before Emergency summarized what it drops; never increased now).
	Dropped int `json:"dropped,omitempty"`
	// Pins are the messages the watermark covers that every view keeps verbatim.
	Pins []Pin `json:"pins,omitempty"`
	// TaskIndex is the raw index of the task message, once TaskKnown.
	TaskIndex int  `json:"taskIndex,omitempty"`
	TaskKnown bool `json:"taskKnown,omitempty"`
	// OpenCalls are tool calls the watermark covers whose results had not come yet: their
	// late results are accepted and shown as user messages.
	OpenCalls []string                `json:"openCalls,omitempty"`
	Offloaded map[string]OffloadEntry `json:"offloaded,omitempty"`
	// Calibration is the session's factor real/estimated prompt tokens, learnt from the
	// prompt sizes its caller reports (0: none reported yet, which counts as 1).
	Calibration float64 `json:"calibration,omitempty"`
	// SummarizerCalls are the times of the summarizer calls of the last hour, when
	// SummarizerCallsPerHour limits them (oldest first).
	SummarizerCalls []time.Time `json:"summarizerCalls,omitempty"`
	// Prepared are the summaries made off the turn, in a PreparedID's state only.
	Prepared  []PreparedSummary `json:"prepared,omitempty"`
	UpdatedAt time.Time         `json:"updatedAt"`
	// Version identifies the stored copy this state was loaded from (an ETag), so SaveState
	// can refuse to overwrite a newer one; empty for a state that was never stored. Stores
	// set it on LoadState and SaveState.
	Version string `json:"-"`
}

func (s *State) clone() *State {
	out := &State{LastSummary: s.LastSummary, UpdatedAt: s.UpdatedAt, Watermark: s.Watermark,
		PrefixHash: s.PrefixHash, CompactionMessage: s.CompactionMessage, Dropped: s.Dropped, Version: s.Version}
	out.LastAnchors = append([]Anchor(nil), s.LastAnchors...)
	out.Pins = append([]Pin(nil), s.Pins...)
	out.TaskIndex, out.TaskKnown = s.TaskIndex, s.TaskKnown
	out.Calibration = s.Calibration
	out.SummarizerCalls = append([]time.Time(nil), s.SummarizerCalls...)
	out.OpenCalls = append([]string(nil), s.OpenCalls...)
	out.Lineage = append([]string(nil), s.Lineage...)
	if s.Offloaded != nil {
		out.Offloaded = make(map[string]OffloadEntry, len(s.Offloaded))
		for k, v := range s.Offloaded {
			out.Offloaded[k] = v
		}
	}
	return out
}

// MaxSessionIDLength bounds session IDs (a Kubernetes UID is 36 bytes).
const MaxSessionIDLength = 128

// MaxConversationIDLength bounds conversation IDs.
const MaxConversationIDLength = 64

// conversationSep joins a session's ID and a conversation's in the ID the engine and the
// stores know the conversation by (ConversationSessionID). A session ID never holds '/',
// so the joined ID can be neither a session's own ID nor another session's conversation.
const conversationSep = "/conversations/"

// ValidateSessionID accepts IDs made of letters, digits, '-', '_' and '.', not starting with
// '.', so an ID can never climb out of its directory or key prefix; and the ID of a
// conversation of such a session, "{sessionID}/conversations/{conversationID}"
// (ConversationSessionID), whose conversation ID passes ValidateConversationID, or the
// session's SessionBudgetID (a reserved conversation ID ValidateConversationID refuses).
// Nothing else may hold a '/'.
func ValidateSessionID(id string) error {
	if base, conv, ok := strings.Cut(id, conversationSep); ok {
		if err := validateBaseSessionID(base); err != nil {
			return err
		}
		if isBudgetConversation(conv) || isPreparedConversation(conv) {
			return nil // the session's summarizer budget (SessionBudgetID), a PreparedID
		}
		return ValidateConversationID(conv)
	}
	return validateBaseSessionID(id)
}

func validateBaseSessionID(id string) error {
	if id == "" {
		return fmt.Errorf("empty session id")
	}
	if len(id) > MaxSessionIDLength {
		return fmt.Errorf("session id is %d bytes, longer than %d", len(id), MaxSessionIDLength)
	}
	if id[0] == '.' {
		return fmt.Errorf("session id %q must not start with '.'", truncateForError(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !keyByteOK(c) && c != '.' {
			return fmt.Errorf("session id %q may hold only letters, digits, '-', '_' and '.'", truncateForError(id))
		}
	}
	return nil
}

// ValidateConversationID accepts 1 to 64 letters, digits, '-', '_' and '.', not starting
// with '.' and without "..": a conversation ID is one key segment or directory name, and
// never a path of its own.
func ValidateConversationID(id string) error {
	if id == "" {
		return fmt.Errorf("empty conversation id")
	}
	if len(id) > MaxConversationIDLength {
		return fmt.Errorf("conversation id is %d bytes, longer than %d", len(id), MaxConversationIDLength)
	}
	if id[0] == '.' || strings.Contains(id, "..") {
		return fmt.Errorf("conversation id %q must not start with '.' or hold \"..\"", truncateForError(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !keyByteOK(c) && c != '.' {
			return fmt.Errorf("conversation id %q may hold only letters, digits, '-', '_' and '.'", truncateForError(id))
		}
	}
	return nil
}

// ConversationSessionID is the ID the engine and the stores know conversation of session
// sessionID by: sessionID itself for the session's default conversation (""), else
// "{sessionID}/conversations/{conversation}". A conversation's objects are under its
// session's in every store (its keys extend the session's prefixes), so DeleteSession of
// the session removes every conversation's objects too. The caller validates both IDs
// (ValidateSessionID does, on the result).
func ConversationSessionID(sessionID, conversation string) string {
	if conversation == "" {
		return sessionID
	}
	return sessionID + conversationSep + conversation
}

// SplitSessionID is the inverse of ConversationSessionID: the session's ID and the
// conversation's ("" for the default conversation).
func SplitSessionID(id string) (sessionID, conversation string) {
	base, conv, _ := strings.Cut(id, conversationSep)
	return base, conv
}

// maxKeyBytes keeps a key segment well inside the 255-byte file-name limit of filesystems.
const maxKeyBytes = 200

// SafeKey turns a tool-call ID into a string that is safe as one path segment or object-key
// segment: letters, digits, '-' and '_' stay, every other byte becomes %XX. The mapping is
// injective (two IDs never share a key) and its output never holds '/', '.' or "..". An
// encoding longer than 200 bytes is shortened to its first 120 bytes, '~' and a SHA-256 of
// the ID, so it still fits a file name ('~' appears in no other key, so no collision with
// an unshortened one).
func SafeKey(id string) string {
	k := safeKey(id)
	if len(k) <= maxKeyBytes {
		return k
	}
	sum := sha256.Sum256([]byte(id))
	head := k[:120]
	if i := strings.LastIndexByte(head[len(head)-2:], '%'); i >= 0 { // do not cut an escape
		head = head[:len(head)-2+i]
	}
	return head + "~" + hex.EncodeToString(sum[:16])
}

func safeKey(id string) string {
	safe := true
	for i := 0; i < len(id); i++ {
		if !keyByteOK(id[i]) {
			safe = false
			break
		}
	}
	if safe && id != "" {
		return id
	}
	var b strings.Builder
	b.Grow(len(id) + 8)
	if id == "" {
		return "%"
	}
	const hexdigits = "0123456789ABCDEF"
	for i := 0; i < len(id); i++ {
		c := id[i]
		if keyByteOK(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	return b.String()
}

func keyByteOK(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Object-key layout shared by object stores (DESIGN.md "Storage"). Each function returns
// the key relative to the store's prefix.

// ToolResultKey is tool_results/{sessionID}/{SafeKey(toolCallID)}.txt.
func ToolResultKey(sessionID, toolCallID string) string {
	return "tool_results/" + sessionID + "/" + SafeKey(toolCallID) + ".txt"
}

// RecordSegmentKey is compaction_records/{sessionID}/{recordID}.jsonl; record IDs sort by time.
func RecordSegmentKey(sessionID, recordID string) string {
	return "compaction_records/" + sessionID + "/" + SafeKey(recordID) + ".jsonl"
}

// ArchiveKey is archive/{sessionID}/{from}-{to}.jsonl (ArchiveName): the raw messages
// [from, to) that one compaction summarized. A conversation's (ConversationSessionID) is
// under its session's: archive/{sessionID}/conversations/{id}/{from}-{to}.jsonl. Deterministic,
// so a session's archive can be named from its session, conversation and range alone.
func ArchiveKey(sessionID string, from, to int) string {
	return "archive/" + sessionID + "/" + ArchiveName(from, to)
}

// ArchiveName is the last segment of ArchiveKey: both indices zero-padded to ten digits, so
// listing a session's archives in key order lists them by From, then To.
func ArchiveName(from, to int) string {
	return fmt.Sprintf("%010d-%010d.jsonl", from, to)
}

// ParseArchiveName is the inverse of ArchiveName; ok is false for any other name (a
// conversation's directory, a temporary file, an object some other tool wrote there).
func ParseArchiveName(name string) (span ArchiveSpan, ok bool) {
	rest, ok := strings.CutSuffix(name, ".jsonl")
	if !ok || len(rest) != 21 || rest[10] != '-' {
		return ArchiveSpan{}, false
	}
	from, ok1 := digits(rest[:10])
	to, ok2 := digits(rest[11:])
	if !ok1 || !ok2 || ValidateArchiveSpan(from, to) != nil {
		return ArchiveSpan{}, false
	}
	return ArchiveSpan{From: from, To: to}, true
}

// digits parses a string of ASCII digits only (no sign, no space), at most MaxArchiveIndex.
func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		d := int(s[i]) - '0'
		if d < 0 || d > 9 || n > (MaxArchiveIndex-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// StateKey is state/{sessionID}.json; a conversation's (ConversationSessionID) is
// state/conversations/{sessionID}/{conversationID}.json. Not state/{sessionID}/...: the
// session "{sessionID}.json" has the key state/{sessionID}.json, and stores that keep
// objects as files (MinIO) cannot hold keys under a key that is an object.
func StateKey(sessionID string) string {
	if session, conv := SplitSessionID(sessionID); conv != "" {
		return "state/conversations/" + session + "/" + conv + ".json"
	}
	return "state/" + sessionID + ".json"
}

// SessionPrefixes are the key prefixes (with their trailing '/', so "abc" never matches
// "abcd") that hold a session's objects, besides StateKey. The second is the session's
// record segments, the third its archives. The keys of a session's conversations
// (ConversationSessionID) are under the session's prefixes too:
// tool_results/{sessionID}/conversations/{id}/, compaction_records/{sessionID}/conversations/{id}/
// and archive/{sessionID}/conversations/{id}/, and the fourth prefix of a session,
// state/conversations/{sessionID}/, holds their states.
func SessionPrefixes(sessionID string) []string {
	p := []string{"tool_results/" + sessionID + "/", "compaction_records/" + sessionID + "/", "archive/" + sessionID + "/"}
	if _, conv := SplitSessionID(sessionID); conv == "" {
		p = append(p, "state/conversations/"+sessionID+"/")
	}
	return p
}
