// Package mem is an in-memory compaction.Store, for compactctl's dry runs (no --store) and
// for tools and tests that need a real store without disk or network: offloads, records and
// state behave as with the fs and s3 backends (it passes the same storetest conformance
// suite), but nothing outlives the process and nothing is written to disk.
package mem

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
	"github.com/harness9/compaction-operator/compaction/storage/internal/storeargs"
)

// RefScheme starts every reference the store hands out.
const RefScheme = "mem://"

// Store is an in-memory compaction.Store. The zero value is not usable; call New. It is safe
// for concurrent use.
type Store struct {
	mu       sync.Mutex
	sessions map[string]*session
}

type session struct {
	results  map[string]string                 // tool call ID -> content
	records  [][]byte                          // JSON lines, each ending in '\n'
	state    []byte                            // JSON, nil when never saved
	archives map[compaction.ArchiveSpan][]byte // range -> JSONL
}

var (
	_ compaction.Store        = (*Store)(nil)
	_ compaction.ArchiveStore = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	return &Store{sessions: map[string]*session{}}
}

// sessionLocked returns the session, creating it when create is set. s.mu must be held.
func (s *Store) sessionLocked(id string, create bool) *session {
	sess, ok := s.sessions[id]
	if !ok && create {
		sess = &session{results: map[string]string{}, archives: map[compaction.ArchiveSpan][]byte{}}
		s.sessions[id] = sess
	}
	return sess
}

// PutToolResult keeps a copy of content and returns mem://{sessionID}/{SafeKey(toolCallID)}.
// A copy, not the string: the caller's may be part of a larger buffer (a request body) that
// keeping it would hold in memory.
func (s *Store) PutToolResult(ctx context.Context, sessionID, toolCallID, content string) (string, error) {
	if err := check(ctx, "put tool result", sessionID); err != nil {
		return "", err
	}
	if len(content) > bounded.ToolResultBytes {
		// Refused like the other stores' (which could not read it back), so the engine
		// behaves the same on every store.
		return "", fmt.Errorf("memory store: put tool result %q of session %s: %w", toolCallID, sessionID,
			bounded.TooLarge("tool result", compaction.SafeKey(toolCallID), int64(len(content)), bounded.ToolResultBytes))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	results := s.sessionLocked(sessionID, true).results
	// A stored result is never replaced (compaction.ToolResultStore): the same bytes again
	// are a success, different ones an error.
	if stored, ok := results[toolCallID]; ok && stored != content {
		return "", fmt.Errorf("memory store: put tool result %q of session %s: %w", toolCallID, sessionID, compaction.ErrToolResultExists)
	} else if !ok {
		results[toolCallID] = strings.Clone(content)
	}
	return RefScheme + sessionID + "/" + compaction.SafeKey(toolCallID), nil
}

// GetToolResult returns a copy of a stored result; a missing one is ErrNotFound.
func (s *Store) GetToolResult(ctx context.Context, sessionID, toolCallID string) ([]byte, error) {
	if err := check(ctx, "get tool result", sessionID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess := s.sessionLocked(sessionID, false); sess != nil {
		if data, ok := sess.results[toolCallID]; ok {
			return append([]byte{}, data...), nil // a copy, never nil
		}
	}
	return nil, fmt.Errorf("memory store: get tool result %q of session %s: %w", toolCallID, sessionID, compaction.ErrNotFound)
}

// AppendRecord appends the record to its session's trail as one JSON line.
func (s *Store) AppendRecord(ctx context.Context, rec *compaction.CompactionRecord) error {
	if err := storeargs.Record(ctx, backend, rec); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return fmt.Errorf("memory store: encode record %s: %w", rec.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessionLocked(rec.SessionID, true)
	sess.records = append(sess.records, buf.Bytes())
	return nil
}

// ReadRecords writes the session's trail to w, oldest first; an unknown session has an
// empty trail.
func (s *Store) ReadRecords(ctx context.Context, sessionID string, w io.Writer) error {
	if err := check(ctx, "read records", sessionID); err != nil {
		return err
	}
	s.mu.Lock()
	var lines [][]byte
	if sess := s.sessionLocked(sessionID, false); sess != nil {
		lines = append(lines, sess.records...) // the lines themselves are never modified
	}
	s.mu.Unlock()
	for _, line := range lines {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("memory store: read records of session %s: %w", sessionID, err)
		}
		if _, err := w.Write(line); err != nil {
			return fmt.Errorf("memory store: read records of session %s: %w", sessionID, err)
		}
	}
	return nil
}

// PutArchive keeps a copy of data, replacing an archive of the same range, and returns
// mem://{ArchiveKey}.
func (s *Store) PutArchive(ctx context.Context, sessionID string, from, to int, data []byte) (string, error) {
	key := compaction.ArchiveKey(sessionID, from, to)
	if err := storeargs.ArchiveData(ctx, backend, sessionID, from, to, data, func() string { return key }); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessionLocked(sessionID, true).archives[compaction.ArchiveSpan{From: from, To: to}] = bytes.Clone(data)
	return RefScheme + key, nil
}

// ListArchives calls fn for the session's archives by From, then To.
func (s *Store) ListArchives(ctx context.Context, sessionID string, fn func(compaction.ArchiveSpan) error) error {
	if err := check(ctx, "list archives", sessionID); err != nil {
		return err
	}
	s.mu.Lock()
	var spans []compaction.ArchiveSpan
	if sess := s.sessionLocked(sessionID, false); sess != nil {
		spans = slices.Collect(maps.Keys(sess.archives))
	}
	s.mu.Unlock()
	slices.SortFunc(spans, func(a, b compaction.ArchiveSpan) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	return storeargs.ListSpans(spans, fn)
}

// OpenArchive returns a reader of a copy of one archive; a missing one is ErrNotFound.
func (s *Store) OpenArchive(ctx context.Context, sessionID string, from, to int) (io.ReadCloser, error) {
	if err := storeargs.Archive(ctx, backend, "open archive", sessionID, from, to); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess := s.sessionLocked(sessionID, false); sess != nil {
		if data, ok := sess.archives[compaction.ArchiveSpan{From: from, To: to}]; ok {
			// The stored slice is never written again (PutArchive replaces it whole).
			return io.NopCloser(bytes.NewReader(data)), nil
		}
	}
	return nil, fmt.Errorf("memory store: open archive %d-%d of session %s: %w", from, to, sessionID, compaction.ErrNotFound)
}

// LoadState returns a copy of the session's state; a missing one is ErrNotFound.
func (s *Store) LoadState(ctx context.Context, sessionID string) (*compaction.State, error) {
	if err := check(ctx, "load state", sessionID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var data []byte
	if sess := s.sessionLocked(sessionID, false); sess != nil {
		data = sess.state
	}
	s.mu.Unlock()
	if data == nil {
		return nil, fmt.Errorf("memory store: load state of session %s: %w", sessionID, compaction.ErrNotFound)
	}
	var st compaction.State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("memory store: decode state of session %s: %w", sessionID, err)
	}
	return &st, nil
}

// SaveState replaces the session's state with a copy of st.
func (s *Store) SaveState(ctx context.Context, sessionID string, st *compaction.State) error {
	// The encoding is a deep copy the caller cannot change.
	data, err := storeargs.State(ctx, backend, sessionID, st, func() string { return "of session " + sessionID })
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessionLocked(sessionID, true).state = data
	return nil
}

// DeleteSession forgets every object of the session, its conversations' included, and
// returns how many there were (each tool result, each record and the state count as one).
func (s *Store) DeleteSession(ctx context.Context, sessionID string) (int, error) {
	if err := check(ctx, "delete session", sessionID); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, sess := range s.sessions {
		// A conversation's ID is its session's followed by '/' (compaction.ConversationSessionID);
		// no session's own ID holds one, so no other session matches.
		if id != sessionID && !strings.HasPrefix(id, sessionID+"/") {
			continue
		}
		n += len(sess.results) + len(sess.records) + len(sess.archives)
		if sess.state != nil {
			n++
		}
		delete(s.sessions, id)
	}
	return n, nil
}

// backend starts this store's errors.
const backend = "memory store"

// check validates the session ID and refuses to start work under a finished context.
func check(ctx context.Context, op, sessionID string) error {
	return storeargs.Session(ctx, backend, op, sessionID)
}
