// Package fs is a compaction.Store on the local filesystem, in the seed's layout, for the CLI
// and local runs. Like the object store it reads a state or tool result only up to the cap
// of its kind (16 MiB, 32 MiB; compaction.ErrObjectTooLarge over it), and never writes one
// it could not read back.
//
//	{root}/.harness9/tool_results/{sessionID}/{SafeKey(toolCallID)}.txt
//	{root}/.harness9/compaction_records/{sessionID}.jsonl   (appended, one record a line)
//	{root}/.harness9/state/{sessionID}.json                 (replaced atomically)
//	{root}/.harness9/archive/{sessionID}/{from}-{to}.jsonl  (one file per compaction, compaction.ArchiveName)
//
// A conversation of a session (compaction.ConversationSessionID "{sessionID}/conversations/{id}")
// keeps its records and state in a directory of its own under the session's, and its tool
// results one level under the session's:
//
//	{root}/.harness9/conversations/{sessionID}/{id}/compaction_records.jsonl
//	{root}/.harness9/conversations/{sessionID}/{id}/state.json
//	{root}/.harness9/tool_results/{sessionID}/conversations/{id}/{SafeKey(toolCallID)}.txt
//	{root}/.harness9/archive/{sessionID}/conversations/{id}/{from}-{to}.jsonl
//
// Not compaction_records/{sessionID}/...: that directory would take the name of the records
// file of the session "{sessionID}" minus ".jsonl" (session "a.jsonl"'s directory is session
// "a"'s file), and deleting one session would delete the other's trail.
package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
	"github.com/harness9/compaction-operator/compaction/storage/internal/storeargs"
)

// DirName is the directory under the root that holds everything the store writes.
const DirName = ".harness9"

const (
	// Tool output and summaries can hold secrets from the agent's workspace, so nothing the
	// store writes is readable by other users.
	dirPerm  = 0o700
	filePerm = 0o600

	// tempPrefix starts every temporary file. Session IDs cannot start with '.' and SafeKey
	// never emits one, so a temporary file can never be mistaken for a stored object.
	tempPrefix = ".tmp-"
)

// Store is a filesystem compaction.Store. It is safe for concurrent use.
type Store struct {
	base string // absolute {root}/.harness9

	// appendMu serialises record appends and the reads of a trail's length, so a reader
	// only ever sees whole lines written by this store.
	appendMu sync.Mutex

	// noTmpfile is set once the filesystem has refused an O_TMPFILE write (linkNew): the
	// store writes the portable way from then on. fastWrites counts the writes linkNew made.
	noTmpfile  atomic.Bool
	fastWrites atomic.Int64
}

var (
	_ compaction.Store        = (*Store)(nil)
	_ compaction.ArchiveStore = (*Store)(nil)
)

// New returns a store rooted at root (usually the agent's working directory), creating
// {root}/.harness9 if needed. References it hands out are absolute paths.
func New(root string) (*Store, error) {
	if root == "" {
		return nil, errors.New("fs store: empty root directory")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("fs store: make root %q absolute: %w", root, err)
	}
	base := filepath.Join(abs, DirName)
	if err := os.MkdirAll(base, dirPerm); err != nil {
		return nil, fmt.Errorf("fs store: create %s: %w", base, err)
	}
	return &Store{base: base}, nil
}

// Dir returns the absolute {root}/.harness9 directory.
func (s *Store) Dir() string { return s.base }

func (s *Store) toolResultDir(sid string) string {
	return filepath.Join(s.base, "tool_results", sid)
}

// ToolResultPath is where a tool result lives; PutToolResult returns it as the ref.
func (s *Store) ToolResultPath(sid, toolCallID string) string {
	return filepath.Join(s.toolResultDir(sid), compaction.SafeKey(toolCallID)+".txt")
}

// archiveDir holds the session's archives; a conversation's is one level under its
// session's (its ID extends the session's with "/conversations/{id}").
func (s *Store) archiveDir(sid string) string {
	return filepath.Join(s.base, "archive", sid)
}

// ArchivePath is where an archive lives; PutArchive returns it as the ref.
func (s *Store) ArchivePath(sid string, from, to int) string {
	return filepath.Join(s.archiveDir(sid), compaction.ArchiveName(from, to))
}

// RecordsPath is the session's (or conversation's) JSONL trail.
func (s *Store) RecordsPath(sid string) string {
	if session, conv := compaction.SplitSessionID(sid); conv != "" {
		return filepath.Join(s.conversationsDir(session), conv, "compaction_records.jsonl")
	}
	return filepath.Join(s.base, "compaction_records", sid+".jsonl")
}

// StatePath is the session's (or conversation's) state file.
func (s *Store) StatePath(sid string) string {
	if session, conv := compaction.SplitSessionID(sid); conv != "" {
		return filepath.Join(s.conversationsDir(session), conv, "state.json")
	}
	return filepath.Join(s.base, "state", sid+".json")
}

// conversationsDir holds the records and states of the session's conversations. Its name is
// the session ID exactly, so no other session's directory or file can be it.
func (s *Store) conversationsDir(session string) string {
	return filepath.Join(s.base, "conversations", session)
}

// PutToolResult writes content atomically, so a reader (the agent reading the ref back)
// never sees half a result, and returns the file's absolute path. It does not fsync: the
// agent's own history still holds the original text, so a crash can lose at most this copy,
// while syncing every result made a compaction that offloads dozens of them many times
// slower on real disks.
func (s *Store) PutToolResult(ctx context.Context, sessionID, toolCallID, content string) (string, error) {
	if err := check(ctx, "put tool result", sessionID); err != nil {
		return "", err
	}
	path := s.ToolResultPath(sessionID, toolCallID)
	if len(content) > bounded.ToolResultBytes {
		return "", fmt.Errorf("fs store: put tool result %q of session %s: %w", toolCallID, sessionID,
			bounded.TooLarge("tool result", path, int64(len(content)), bounded.ToolResultBytes))
	}
	// The file is written from the string's own bytes: write(2) only reads them, and a
	// first compaction offloads megabytes of results that a []byte would copy.
	data := unsafe.Slice(unsafe.StringData(content), len(content))
	err := s.writeFile(path, data, createOnly)
	if errors.Is(err, iofs.ErrExist) {
		// Never replace an original: the same bytes again are a success. No more than
		// content's length is read back: a longer one is different anyway.
		stored, rerr := readFile(path, int64(len(content)), "stored tool result")
		switch {
		case errors.Is(rerr, compaction.ErrObjectTooLarge):
			err = compaction.ErrToolResultExists
		case rerr != nil:
			err = fmt.Errorf("exists, and reading it back failed: %w", rerr)
		case string(stored) == content:
			err = nil
		default:
			err = compaction.ErrToolResultExists
		}
	}
	if err != nil {
		return "", fmt.Errorf("fs store: put tool result %q of session %s: %w", toolCallID, sessionID, err)
	}
	return path, nil
}

// GetToolResult reads a tool result back; a missing one is ErrNotFound.
func (s *Store) GetToolResult(ctx context.Context, sessionID, toolCallID string) ([]byte, error) {
	if err := check(ctx, "get tool result", sessionID); err != nil {
		return nil, err
	}
	data, err := readFile(s.ToolResultPath(sessionID, toolCallID), bounded.ToolResultBytes, "tool result")
	if err != nil {
		return nil, fmt.Errorf("fs store: get tool result %q of session %s: %w", toolCallID, sessionID, notFound(err))
	}
	return data, nil
}

// AppendRecord appends the record as one JSON line. The whole line goes out in a single
// write on an O_APPEND descriptor under appendMu, so lines from concurrent callers in this
// process never interleave, and a crash leaves at worst one truncated last line.
func (s *Store) AppendRecord(ctx context.Context, rec *compaction.CompactionRecord) error {
	if err := storeargs.Record(ctx, backend, rec); err != nil {
		return err
	}
	line, err := rec.JSONLine()
	if err != nil {
		return fmt.Errorf("fs store: append record %s: %w", rec.ID, err)
	}
	path := s.RecordsPath(rec.SessionID)

	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), dirPerm); err != nil {
		return fmt.Errorf("fs store: append record %s: %w", rec.ID, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, filePerm)
	if err != nil {
		return fmt.Errorf("fs store: append record %s: %w", rec.ID, err)
	}
	if _, err := f.Write(line); err != nil {
		_ = f.Close() // the write error is the one to report; the append failed either way
		return fmt.Errorf("fs store: append record %s to %s: %w", rec.ID, path, err)
	}
	// Compactions are rare (minutes apart), so syncing each audit line costs nothing that
	// matters and keeps the trail intact across a power loss.
	if err := f.Sync(); err != nil {
		_ = f.Close() // the sync error is the one to report; the append failed either way
		return fmt.Errorf("fs store: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("fs store: close %s: %w", path, err)
	}
	return nil
}

// ReadRecords copies the session's trail to w. A session without records has an empty
// trail: nothing is written and the error is nil.
func (s *Store) ReadRecords(ctx context.Context, sessionID string, w io.Writer) error {
	if err := check(ctx, "read records", sessionID); err != nil {
		return err
	}
	path := s.RecordsPath(sessionID)
	f, size, err := s.openTrail(path)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("fs store: read records of session %s: %w", sessionID, err)
	}
	// Read-only: a failed Close loses nothing, so it cannot change the result of the copy.
	defer func() { _ = f.Close() }()
	// Copy only the length seen under the lock: a line being appended meanwhile is left
	// out whole instead of showing up half written. The lock is not held while copying, so
	// a slow w never blocks appends.
	if _, err := io.Copy(w, &ctxReader{ctx: ctx, r: io.LimitReader(f, size)}); err != nil {
		return fmt.Errorf("fs store: read records of session %s: %w", sessionID, err)
	}
	return nil
}

// openTrail opens a trail and returns its length at a line boundary.
func (s *Store) openTrail(path string) (*os.File, int64, error) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close() // read-only, nothing to lose; the Stat error is the one to report
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// PutArchive writes one archive atomically, replacing one of the same range, and returns
// the file's absolute path. Not synced, like a tool result: the agent's own history holds
// the messages too.
func (s *Store) PutArchive(ctx context.Context, sessionID string, from, to int, data []byte) (string, error) {
	path := func() string { return s.ArchivePath(sessionID, from, to) }
	if err := storeargs.ArchiveData(ctx, backend, sessionID, from, to, data, path); err != nil {
		return "", err
	}
	if err := s.writeFile(path(), data, replace); err != nil {
		return "", fmt.Errorf("fs store: put archive of session %s: %w", sessionID, err)
	}
	return path(), nil
}

// ListArchives lists the files of the session's archive directory (not its conversations'
// directories) in name order: by From, then To. Other names are skipped.
func (s *Store) ListArchives(ctx context.Context, sessionID string, fn func(compaction.ArchiveSpan) error) error {
	if err := check(ctx, "list archives", sessionID); err != nil {
		return err
	}
	entries, err := os.ReadDir(s.archiveDir(sessionID))
	if errors.Is(err, iofs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fs store: list archives of session %s: %w", sessionID, err)
	}
	spans := make([]compaction.ArchiveSpan, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if span, ok := compaction.ParseArchiveName(e.Name()); ok {
			spans = append(spans, span)
		}
	}
	return storeargs.ListSpans(spans, func(span compaction.ArchiveSpan) error {
		// fn may be slow (it reads each archive): a cancelled listing stops between them.
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fs store: list archives of session %s: %w", sessionID, err)
		}
		return fn(span)
	})
}

// OpenArchive opens one archive for reading, failing past the archive cap; a missing one is
// ErrNotFound.
func (s *Store) OpenArchive(ctx context.Context, sessionID string, from, to int) (io.ReadCloser, error) {
	if err := storeargs.Archive(ctx, backend, "open archive", sessionID, from, to); err != nil {
		return nil, err
	}
	path := s.ArchivePath(sessionID, from, to)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fs store: open archive of session %s: %w", sessionID, notFound(err))
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > bounded.ArchiveBytes {
		_ = f.Close() // read-only: nothing to lose
		return nil, fmt.Errorf("fs store: open archive of session %s: %w", sessionID,
			bounded.TooLarge("archive", path, fi.Size(), bounded.ArchiveBytes))
	}
	return struct {
		io.Reader
		io.Closer
	}{&ctxReader{ctx: ctx, r: bounded.Reader(f, bounded.ArchiveBytes, "archive", path)}, f}, nil
}

// LoadState reads the session's state; a missing one is ErrNotFound.
func (s *Store) LoadState(ctx context.Context, sessionID string) (*compaction.State, error) {
	if err := check(ctx, "load state", sessionID); err != nil {
		return nil, err
	}
	path := s.StatePath(sessionID)
	data, err := readFile(path, bounded.StateBytes, "state")
	if err != nil {
		return nil, fmt.Errorf("fs store: load state of session %s: %w", sessionID, notFound(err))
	}
	var st compaction.State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("fs store: decode state %s: %w", path, err)
	}
	return &st, nil
}

// SaveState replaces the session's state atomically: a crash leaves the old or the new
// state, never a torn file that would break every later incremental merge.
func (s *Store) SaveState(ctx context.Context, sessionID string, st *compaction.State) error {
	data, err := storeargs.State(ctx, backend, sessionID, st, func() string { return s.StatePath(sessionID) })
	if err != nil {
		return err
	}
	if err := s.writeFile(s.StatePath(sessionID), data, replaceDurably); err != nil {
		return fmt.Errorf("fs store: save state of session %s: %w", sessionID, err)
	}
	return nil
}

// DeleteSession removes the session's tool results, archives, trail and state, and its
// conversations', and returns how many files it removed. Each path is built from the exact
// session ID (a directory or a file name), so a session whose ID extends this one is never
// touched.
func (s *Store) DeleteSession(ctx context.Context, sessionID string) (int, error) {
	if err := check(ctx, "delete session", sessionID); err != nil {
		return 0, err
	}
	removed := 0
	var errs []error

	// The conversations' records and states (their tool results are under the session's
	// tool result directory). Under appendMu, like the trail below.
	if session, conv := compaction.SplitSessionID(sessionID); conv == "" {
		s.appendMu.Lock()
		n, err := removeTree(s.conversationsDir(session))
		s.appendMu.Unlock()
		removed += n
		if err != nil {
			errs = append(errs, err)
		}
	}

	// Each a directory named after the session exactly, holding its conversations' too.
	for _, dir := range []string{s.toolResultDir(sessionID), s.archiveDir(sessionID)} {
		n, err := removeTree(dir)
		removed += n
		if err != nil {
			errs = append(errs, err)
		}
	}

	// Under appendMu so the trail is not removed in the middle of an append.
	s.appendMu.Lock()
	ok, err := removeFile(s.RecordsPath(sessionID))
	s.appendMu.Unlock()
	if ok {
		removed++
	}
	if err != nil {
		errs = append(errs, err)
	}

	ok, err = removeFile(s.StatePath(sessionID))
	if ok {
		removed++
	}
	if err != nil {
		errs = append(errs, err)
	}

	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("fs store: delete session %s (%d files removed): %w", sessionID, removed, err)
	}
	return removed, nil
}

// removeTree removes dir and everything under it and returns how many files it held.
func removeTree(dir string) (int, error) {
	count := 0
	err := filepath.WalkDir(dir, func(_ string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasPrefix(d.Name(), tempPrefix) {
			count++
		}
		return nil
	})
	if errors.Is(err, iofs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("remove %s: %w", dir, err)
	}
	return count, nil
}

// removeFile removes path and reports whether it existed.
func removeFile(path string) (bool, error) {
	err := os.Remove(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, iofs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("remove %s: %w", path, err)
	}
}

// writeMode says how writeFile puts its temporary file in place.
type writeMode int

const (
	// replaceDurably renames the file over path and syncs the file and the directory (the
	// state object, rewritten on every compaction).
	replaceDurably writeMode = iota
	// createOnly links the file to path only if path does not exist yet (an error wrapping
	// io/fs.ErrExist otherwise): an offloaded original is never replaced.
	createOnly
	// replace renames the file over path without syncing (an archive: a copy of what the
	// agent's history holds).
	replace
)

// writeFile writes data to a temporary file in path's directory, creating the directory if
// needed, and puts it in place as mode says, so a reader never sees half an object.
func (s *Store) writeFile(path string, data []byte, mode writeMode) error {
	dir := filepath.Dir(path)
	if mode == createOnly {
		if handled, err := s.linkNew(dir, path, data); handled {
			return err
		}
	}
	// CreateTemp creates the file with mode 0o600, which is filePerm: no chmod needed. The
	// directory is made only when it is missing: a session's writes after its first would
	// otherwise each pay for a stat of every parent.
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if errors.Is(err, iofs.ErrNotExist) {
		if err := os.MkdirAll(dir, dirPerm); err != nil {
			return err
		}
		f, err = os.CreateTemp(dir, tempPrefix+"*")
	}
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		// Renamed, linked or failed, the temporary name goes; a leftover is never mistaken
		// for an object (tempPrefix), so these errors are not reported.
		_ = f.Close()
		_ = os.Remove(tmp)
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if mode == replaceDurably {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", tmp, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if mode == createOnly {
		if err := os.Link(tmp, path); err != nil {
			return fmt.Errorf("link %s: %w", path, err)
		}
		return nil
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if mode == replace {
		return nil
	}
	// Make the rename itself durable. Best effort: some filesystems cannot sync directories.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close() // read-only directory handle: nothing to lose
	}
	return nil
}

// readFile reads the file at path whole if it is at most limit bytes, else fails with an
// error wrapping compaction.ErrObjectTooLarge, having read at most limit+1 bytes.
func readFile(path string, limit int64, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	size := int64(-1)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return bounded.ReadAll(f, size, limit, what, path)
}

// backend starts this store's errors.
const backend = "fs store"

// check validates the session ID and refuses to start work under a finished context.
func check(ctx context.Context, op, sessionID string) error {
	return storeargs.Session(ctx, backend, op, sessionID)
}

// notFound adds compaction.ErrNotFound to a missing-file error, keeping the path in it.
func notFound(err error) error {
	if errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("%w: %w", compaction.ErrNotFound, err)
	}
	return err
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
