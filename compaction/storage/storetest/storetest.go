// Package storetest is the conformance suite every compaction.Store implementation runs, so
// the filesystem and object-store backends stay interchangeable for the engine.
package storetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
)

// opTimeout bounds every store call so a hung backend fails the test instead of stalling it.
const opTimeout = 60 * time.Second

// prefixVictim is a session ID that is a prefix of others, as a string and as a key: deleting
// it must leave them.
const prefixVictim = "abc"

// callID is the tool call ID of the cases where the ID itself is not under test.
const callID = "call_1"

// slashCallID is a tool call ID that is not safe as a key as it is.
const slashCallID = "call/2"

// InvalidSessionIDs are session IDs every method must reject: they would climb out of the
// session's directory or key prefix, or are otherwise malformed.
func InvalidSessionIDs() []string {
	return []string{
		"", ".", "..", "../x", "a/b", "/abs", `a\b`, ".hidden", "a b", "a\x00b", "ü",
		"abc/../abcd", strings.Repeat("a", compaction.MaxSessionIDLength+1),
		// Conversation IDs (compaction.ConversationSessionID) whose session or conversation
		// part is unsafe, or that nest.
		"abc/conversations/", "abc/conversations/..", "abc/conversations/../x", "abc/conversations/.x",
		"abc/conversations/a/b", "abc/conversations/a/conversations/b", "/conversations/a", "../conversations/a",
		"abc/conversations/ü", "abc/conversation/a", "abc/conversations/a..b",
		"abc/conversations/" + strings.Repeat("a", compaction.MaxConversationIDLength+1),
	}
}

// Run runs the conformance suite. newStore must return an empty store; it is called once
// per subtest so the subtests are independent.
func Run(t *testing.T, newStore func(t *testing.T) compaction.Store) {
	RunStore(t, newStore)
	runArchives(t, newStore)
}

// RunStore runs the cases of compaction.Store alone, for a store that is not a
// compaction.ArchiveStore (a wrapper that hides the optional interfaces).
func RunStore(t *testing.T, newStore func(t *testing.T) compaction.Store) {
	t.Run("ToolResultRoundTrip", func(t *testing.T) { testToolResultRoundTrip(t, newStore(t)) })
	t.Run("ToolResultLarge", func(t *testing.T) { testToolResultLarge(t, newStore(t)) })
	t.Run("ToolResultNeverReplaced", func(t *testing.T) { testToolResultNeverReplaced(t, newStore(t)) })
	t.Run("ToolResultNotFound", func(t *testing.T) { testToolResultNotFound(t, newStore(t)) })
	t.Run("RecordsInAppendOrder", func(t *testing.T) { testRecordsInAppendOrder(t, newStore(t)) })
	t.Run("RecordsEmpty", func(t *testing.T) { testRecordsEmpty(t, newStore(t)) })
	t.Run("RecordRejectsBadInput", func(t *testing.T) { testRecordRejectsBadInput(t, newStore(t)) })
	t.Run("RecordsConcurrentAppend", func(t *testing.T) { testRecordsConcurrentAppend(t, newStore(t)) })
	t.Run("StateNotFound", func(t *testing.T) { testStateNotFound(t, newStore(t)) })
	t.Run("StateRoundTrip", func(t *testing.T) { testStateRoundTrip(t, newStore(t)) })
	t.Run("DeleteSession", func(t *testing.T) { testDeleteSession(t, newStore(t)) })
	t.Run("DeleteSessionEmpty", func(t *testing.T) { testDeleteSessionEmpty(t, newStore(t)) })
	t.Run("Conversations", func(t *testing.T) { testConversations(t, newStore(t)) })
	t.Run("SessionBudget", func(t *testing.T) { testSessionBudget(t, newStore(t)) })
	t.Run("InvalidSessionIDs", func(t *testing.T) { testInvalidSessionIDs(t, newStore(t)) })
	t.Run("CanceledContext", func(t *testing.T) { testCanceledContext(t, newStore(t)) })
	t.Run("ObjectCaps", func(t *testing.T) { testObjectCaps(t, newStore(t)) })
}

// SessionID returns a fresh valid session ID shaped like a Kubernetes UID.
func SessionID(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random session id: %v", err)
	}
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// RecordID returns an ID the way the engine makes one: zero-padded nanoseconds then random
// hex, so IDs sort in time order.
func RecordID(t testing.TB, ts time.Time) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random record id: %v", err)
	}
	return fmt.Sprintf("%020d-%s", ts.UnixNano(), hex.EncodeToString(b[:]))
}

// NewRecord returns a realistic record of session sid at time ts, with an engine-style ID.
func NewRecord(t testing.TB, sid string, ts time.Time, seq int) *compaction.CompactionRecord {
	t.Helper()
	return &compaction.CompactionRecord{
		ID:           RecordID(t, ts),
		SessionID:    sid,
		Timestamp:    ts,
		Tier:         compaction.Tier(seq%4 + 1),
		TokensBefore: 100_000 + seq,
		TokensAfter:  20_000 + seq,
		MsgsBefore:   80,
		MsgsAfter:    12,
		Anchors: []compaction.Anchor{
			{Type: compaction.AnchorExecutionProgress, Content: fmt.Sprintf("pkg/seq_%d.go", seq)},
		},
		Offloaded: []compaction.OffloadEntry{
			{ToolCallID: fmt.Sprintf("call_%d", seq), Bytes: 4096 + seq, Ref: "ref-" + fmt.Sprint(seq)},
		},
		Summarized:       seq,
		PreservedTail:    6,
		SummaryText:      fmt.Sprintf("summary %d: line one\nline two with \"quotes\", <html> & unicode ⚡", seq),
		CompressionRatio: 0.8,
		DurationMs:       12.5,
	}
}

// ReadRecords reads a session's trail and checks it is well-formed JSONL: every line ends
// in '\n', none is blank, each decodes into a CompactionRecord.
func ReadRecords(t testing.TB, s compaction.Store, sid string) []compaction.CompactionRecord {
	t.Helper()
	var buf bytes.Buffer
	if err := s.ReadRecords(opCtx(t), sid, &buf); err != nil {
		t.Fatalf("ReadRecords(%s): %v", sid, err)
	}
	data := buf.Bytes()
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("ReadRecords(%s): output does not end in a newline", sid)
	}
	var out []compaction.CompactionRecord
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			t.Fatalf("ReadRecords(%s): line %d is blank", sid, line)
		}
		var rec compaction.CompactionRecord
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			t.Fatalf("ReadRecords(%s): line %d is not a record: %v\n%s", sid, line, err, truncate(sc.Bytes()))
		}
		if dec.More() {
			t.Fatalf("ReadRecords(%s): line %d holds more than one JSON value", sid, line)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("ReadRecords(%s): scan: %v", sid, err)
	}
	return out
}

// WriteInvalid calls every method with every invalid session ID and fails the test unless
// each call returns an error that is not ErrNotFound. Backend tests call it on an empty
// store and then check their storage is still empty.
func WriteInvalid(t *testing.T, s compaction.Store) {
	t.Helper()
	ctx := opCtx(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, sid := range InvalidSessionIDs() {
		check := func(method string, err error) {
			t.Helper()
			if err == nil {
				t.Errorf("%s(%q) accepted an invalid session id", method, sid)
			} else if errors.Is(err, compaction.ErrNotFound) {
				t.Errorf("%s(%q) = %v; an invalid id must not look like a missing object", method, sid, err)
			}
		}
		_, err := s.PutToolResult(ctx, sid, callID, "x")
		check("PutToolResult", err)
		_, err = s.GetToolResult(ctx, sid, callID)
		check("GetToolResult", err)
		rec := NewRecord(t, sid, now, 1)
		check("AppendRecord", s.AppendRecord(ctx, rec))
		var buf bytes.Buffer
		check("ReadRecords", s.ReadRecords(ctx, sid, &buf))
		if buf.Len() != 0 {
			t.Errorf("ReadRecords(%q) wrote %d bytes for an invalid id", sid, buf.Len())
		}
		_, err = s.LoadState(ctx, sid)
		check("LoadState", err)
		check("SaveState", s.SaveState(ctx, sid, &compaction.State{LastSummary: "x", UpdatedAt: now}))
		n, err := s.DeleteSession(ctx, sid)
		check("DeleteSession", err)
		if n != 0 {
			t.Errorf("DeleteSession(%q) reported %d removals for an invalid id", sid, n)
		}
		if a, ok := s.(compaction.ArchiveStore); ok {
			writeInvalidArchives(t, a, sid, check)
		}
	}
}

func testToolResultRoundTrip(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	sid := SessionID(t)
	binary := make([]byte, 512)
	for i := range binary {
		binary[i] = byte(i) // every byte value, twice: NUL, CR, LF, invalid UTF-8
	}
	cases := []struct {
		id      string
		content []byte
	}{
		{callID, []byte("plain text\n")},
		{"toolu_01A2b3C4d5E6f7G8h9", []byte("line1\r\nline2\n\n")},
		{"a/b/c", []byte("slashes in the id")},
		{"..", []byte("dot-dot id")},
		{"../../etc/passwd", []byte("traversal id")},
		{".", []byte("dot id")},
		{"ünïcödé-工具-⚡", []byte("unicode id")},
		{"100%", []byte("percent id")},
		{"%41", []byte("looks like an escape")},
		{"A", []byte("the byte %41 decodes to, must not collide")},
		{"call 2?x=y&z#frag", []byte("url-ish id")},
		{"binary", binary},
		{"empty-content", []byte{}},
		{"\x00\xff", []byte("non-UTF-8 id")},
	}
	for _, c := range cases {
		ref, err := s.PutToolResult(ctx, sid, c.id, string(c.content))
		if err != nil {
			t.Fatalf("PutToolResult(%q): %v", c.id, err)
		}
		if ref == "" {
			t.Errorf("PutToolResult(%q) returned an empty ref", c.id)
		}
	}
	// Read back after all writes, so an ID that collides with another shows up.
	for _, c := range cases {
		got, err := s.GetToolResult(ctx, sid, c.id)
		if err != nil {
			t.Fatalf("GetToolResult(%q): %v", c.id, err)
		}
		if !bytes.Equal(got, c.content) {
			t.Errorf("GetToolResult(%q) = %s, want %s", c.id, truncate(got), truncate(c.content))
		}
	}
}

func testToolResultLarge(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	sid := SessionID(t)
	content := make([]byte, 1<<20)
	rng := mrand.New(mrand.NewPCG(1, 2))
	for i := range content {
		content[i] = byte(rng.Uint32())
	}
	if _, err := s.PutToolResult(ctx, sid, "big", string(content)); err != nil {
		t.Fatalf("PutToolResult(1 MiB): %v", err)
	}
	got, err := s.GetToolResult(ctx, sid, "big")
	if err != nil {
		t.Fatalf("GetToolResult(1 MiB): %v", err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("1 MiB result came back different (%d bytes, want %d)", len(got), len(content))
	}
}

// testToolResultNeverReplaced: a reused tool call ID (local models number their calls
// call_0, call_1... in every turn) must not replace an original only the store holds; the
// same bytes again (a retry, another replica) succeed with the same reference.
func testToolResultNeverReplaced(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	sid := SessionID(t)
	ref, err := s.PutToolResult(ctx, sid, callID, "the original, only here")
	if err != nil {
		t.Fatalf("PutToolResult: %v", err)
	}
	again, err := s.PutToolResult(ctx, sid, callID, "the original, only here")
	if err != nil || again != ref {
		t.Fatalf("the same content again: ref %q, %v; want %q and no error", again, err, ref)
	}
	if _, err := s.PutToolResult(ctx, sid, callID, "another result under the same ID"); !errors.Is(err, compaction.ErrToolResultExists) {
		t.Fatalf("different content under the same ID: %v, want ErrToolResultExists", err)
	}
	got, err := s.GetToolResult(ctx, sid, callID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "the original, only here" {
		t.Fatalf("after a refused put GetToolResult = %q, want the original", got)
	}
}

func testToolResultNotFound(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	sid := SessionID(t)
	if _, err := s.GetToolResult(ctx, sid, callID); !errors.Is(err, compaction.ErrNotFound) {
		t.Fatalf("GetToolResult in an unknown session: err = %v, want ErrNotFound", err)
	}
	if _, err := s.PutToolResult(ctx, sid, callID, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetToolResult(ctx, sid, "call_2"); !errors.Is(err, compaction.ErrNotFound) {
		t.Fatalf("GetToolResult of a missing id: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetToolResult(ctx, SessionID(t), callID); !errors.Is(err, compaction.ErrNotFound) {
		t.Fatalf("GetToolResult of another session's id: err = %v, want ErrNotFound", err)
	}
}

func testRecordsInAppendOrder(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	sid, other := SessionID(t), SessionID(t)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const n = 25
	want := make([]*compaction.CompactionRecord, 0, n)
	for i := range n {
		ts := base.Add(time.Duration(i) * time.Second)
		rec := NewRecord(t, sid, ts, i)
		if err := s.AppendRecord(ctx, rec); err != nil {
			t.Fatalf("AppendRecord #%d: %v", i, err)
		}
		want = append(want, rec)
		// Interleave another session's records: they must stay out of this trail.
		if err := s.AppendRecord(ctx, NewRecord(t, other, ts, 1000+i)); err != nil {
			t.Fatalf("AppendRecord(other) #%d: %v", i, err)
		}
	}
	got := ReadRecords(t, s, sid)
	if len(got) != n {
		t.Fatalf("ReadRecords returned %d records, want %d", len(got), n)
	}
	for i := range got {
		assertRecordEqual(t, i, &got[i], want[i])
	}
	if got := ReadRecords(t, s, other); len(got) != n {
		t.Fatalf("other session has %d records, want %d", len(got), n)
	}
}

func testRecordsEmpty(t *testing.T, s compaction.Store) {
	var buf bytes.Buffer
	if err := s.ReadRecords(opCtx(t), SessionID(t), &buf); err != nil {
		t.Fatalf("ReadRecords of a session without records: %v (want an empty trail, no error)", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("ReadRecords of a session without records wrote %q", truncate(buf.Bytes()))
	}
}

func testRecordRejectsBadInput(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	if err := s.AppendRecord(ctx, nil); err == nil {
		t.Error("AppendRecord(nil) succeeded")
	}
	sid := SessionID(t)
	rec := NewRecord(t, sid, time.Now().UTC(), 1)
	rec.ID = ""
	if err := s.AppendRecord(ctx, rec); err == nil {
		t.Error("AppendRecord of a record without an ID succeeded")
	}
	if got := ReadRecords(t, s, sid); len(got) != 0 {
		t.Errorf("rejected records were stored: %d records", len(got))
	}
	if err := s.SaveState(ctx, sid, nil); err == nil {
		t.Error("SaveState(nil) succeeded")
	}
}

func testRecordsConcurrentAppend(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	sids := []string{SessionID(t), SessionID(t)}
	const writers, perWriter = 8, 12
	// Large summaries make each line far bigger than a pipe buffer or a page, so writes that
	// are not atomic per record would interleave visibly.
	big := strings.Repeat("0123456789abcdef", 8<<10)
	base := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	// Records are built up front: t.Fatalf must not run on the writer goroutines.
	recs := make([][]*compaction.CompactionRecord, writers)
	for w := range writers {
		for i := range perWriter {
			seq := w*perWriter + i
			rec := NewRecord(t, sids[w%len(sids)], base.Add(time.Duration(seq)*time.Millisecond), seq)
			if i%3 == 0 {
				rec.SummaryText = big
			}
			recs[w] = append(recs[w], rec)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			for i, rec := range recs[w] {
				if err := s.AppendRecord(ctx, rec); err != nil {
					errs <- fmt.Errorf("writer %d record %d: %w", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	for _, sid := range sids {
		got := ReadRecords(t, s, sid)
		seen := map[string]bool{}
		for _, r := range got {
			if r.SessionID != sid {
				t.Errorf("trail of %s holds a record of %s", sid, r.SessionID)
			}
			if seen[r.ID] {
				t.Errorf("record %s appears twice", r.ID)
			}
			seen[r.ID] = true
		}
		total += len(got)
	}
	if total != writers*perWriter {
		t.Fatalf("%d records landed, want %d", total, writers*perWriter)
	}
}

func testStateNotFound(t *testing.T, s compaction.Store) {
	if _, err := s.LoadState(opCtx(t), SessionID(t)); !errors.Is(err, compaction.ErrNotFound) {
		t.Fatalf("LoadState of a new session: err = %v, want ErrNotFound", err)
	}
}

func testStateRoundTrip(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	sid := SessionID(t)
	st := &compaction.State{
		LastSummary: "we fixed the parser; next: tests\n\"quoted\" <tag> ⚡",
		LastAnchors: []compaction.Anchor{
			{Type: compaction.AnchorExecutionProgress, Content: "cmd/main.go"},
			{Type: compaction.AnchorKeyDecision, Content: "use segments"},
		},
		Offloaded: map[string]compaction.OffloadEntry{
			callID: {ToolCallID: callID, Bytes: 868_000, Ref: "s3://b/k"},
		},
		UpdatedAt: time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC),
	}
	if err := s.SaveState(ctx, sid, st); err != nil {
		t.Fatalf("SaveState: %v", err)
	}
	got, err := s.LoadState(ctx, sid)
	if err != nil {
		t.Fatalf("LoadState: %v", err)
	}
	assertStateEqual(t, got, st)

	// An overwrite names the version it replaces (stores that check versions refuse others).
	st2 := &compaction.State{LastSummary: "second", UpdatedAt: st.UpdatedAt.Add(time.Minute), Version: got.Version}
	if err := s.SaveState(ctx, sid, st2); err != nil {
		t.Fatalf("SaveState (overwrite): %v", err)
	}
	got, err = s.LoadState(ctx, sid)
	if err != nil {
		t.Fatalf("LoadState after overwrite: %v", err)
	}
	assertStateEqual(t, got, st2)
}

func testInvalidSessionIDs(t *testing.T, s compaction.Store) {
	WriteInvalid(t, s)
	// "a/b" and "../x" must not have landed in a session called "a" or "x" either.
	ctx := opCtx(t)
	for _, sid := range []string{"a", "x", "abc"} {
		if _, err := s.GetToolResult(ctx, sid, callID); !errors.Is(err, compaction.ErrNotFound) {
			t.Errorf("GetToolResult(%s) after invalid writes: err = %v, want ErrNotFound", sid, err)
		}
		if _, err := s.GetToolResult(ctx, sid, "b"); !errors.Is(err, compaction.ErrNotFound) {
			t.Errorf("GetToolResult(%s, b) after invalid writes: err = %v, want ErrNotFound", sid, err)
		}
		if got := ReadRecords(t, s, sid); len(got) != 0 {
			t.Errorf("session %s has %d records after invalid writes", sid, len(got))
		}
		if _, err := s.LoadState(ctx, sid); !errors.Is(err, compaction.ErrNotFound) {
			t.Errorf("LoadState(%s) after invalid writes: err = %v, want ErrNotFound", sid, err)
		}
	}
}

func testCanceledContext(t *testing.T, s compaction.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sid := SessionID(t)
	if _, err := s.PutToolResult(ctx, sid, callID, "x"); err == nil {
		t.Error("PutToolResult with a canceled context succeeded")
	}
	if _, err := s.GetToolResult(ctx, sid, callID); err == nil || errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("GetToolResult with a canceled context: err = %v, want a context error", err)
	}
	if err := s.AppendRecord(ctx, NewRecord(t, sid, time.Now().UTC(), 1)); err == nil {
		t.Error("AppendRecord with a canceled context succeeded")
	}
	if err := s.ReadRecords(ctx, sid, &bytes.Buffer{}); err == nil {
		t.Error("ReadRecords with a canceled context succeeded")
	}
	if _, err := s.LoadState(ctx, sid); err == nil || errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("LoadState with a canceled context: err = %v, want a context error", err)
	}
	if err := s.SaveState(ctx, sid, &compaction.State{}); err == nil {
		t.Error("SaveState with a canceled context succeeded")
	}
	if _, err := s.DeleteSession(ctx, sid); err == nil {
		t.Error("DeleteSession with a canceled context succeeded")
	}
	// Nothing may have been written by the calls above.
	if _, err := s.GetToolResult(opCtx(t), sid, callID); !errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("a canceled PutToolResult left a result behind: err = %v", err)
	}
}

func assertRecordEqual(t *testing.T, i int, got, want *compaction.CompactionRecord) {
	t.Helper()
	// Compare through JSON: that is the stored form, and it normalises time zones and the
	// monotonic clock reading.
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("record %d:\n got %s\nwant %s", i, truncate(g), truncate(w))
	}
}

func assertStateEqual(t *testing.T, got, want *compaction.State) {
	t.Helper()
	if !got.UpdatedAt.Equal(want.UpdatedAt) {
		t.Errorf("UpdatedAt = %v, want %v", got.UpdatedAt, want.UpdatedAt)
	}
	g, w := *got, *want
	g.UpdatedAt, w.UpdatedAt = time.Time{}, time.Time{}
	// A nil and an empty slice are the same state.
	if len(g.LastAnchors) == 0 && len(w.LastAnchors) == 0 {
		g.LastAnchors, w.LastAnchors = nil, nil
	}
	if len(g.Offloaded) == 0 && len(w.Offloaded) == 0 {
		g.Offloaded, w.Offloaded = nil, nil
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("state:\n got %+v\nwant %+v", g, w)
	}
}

// testObjectCaps: a store never writes an object it would refuse to read back (a state or a
// tool result over the cap of its kind): the write fails with ErrObjectTooLarge and what was
// stored stays as it was.
func testObjectCaps(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	sid := SessionID(t)
	if err := s.SaveState(ctx, sid, &compaction.State{LastSummary: "small"}); err != nil {
		t.Fatalf("SaveState: %v", err)
	}
	old, err := s.LoadState(ctx, sid)
	if err != nil {
		t.Fatalf("LoadState: %v", err)
	}
	big := &compaction.State{LastSummary: strings.Repeat("s", bounded.StateBytes), Version: old.Version}
	if err := s.SaveState(ctx, sid, big); !errors.Is(err, compaction.ErrObjectTooLarge) {
		t.Errorf("SaveState of a state over %d bytes: %v; want ErrObjectTooLarge", bounded.StateBytes, err)
	}
	if got, err := s.LoadState(ctx, sid); err != nil || got.LastSummary != "small" {
		summary := ""
		if got != nil {
			summary = got.LastSummary
		}
		t.Errorf("after a refused save, LoadState = summary %q, %v; want the state saved before", truncate([]byte(summary)), err)
	}

	content := make([]byte, bounded.ToolResultBytes+1)
	if _, err := s.PutToolResult(ctx, sid, callID, string(content)); !errors.Is(err, compaction.ErrObjectTooLarge) {
		t.Errorf("PutToolResult of %d bytes: %v; want ErrObjectTooLarge", len(content), err)
	}
	if _, err := s.GetToolResult(ctx, sid, callID); !errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("GetToolResult after a refused put: %v; want ErrNotFound", err)
	}
	// A longer result already stored under the ID is different, and found so without
	// reading more of it than the new content's length.
	if _, err := s.PutToolResult(ctx, sid, callID, "a longer result"); err != nil {
		t.Fatalf("PutToolResult: %v", err)
	}
	if _, err := s.PutToolResult(ctx, sid, callID, "a long"); !errors.Is(err, compaction.ErrToolResultExists) {
		t.Errorf("PutToolResult of a prefix of the stored result: %v; want ErrToolResultExists", err)
	}
}

func opCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func truncate(b []byte) string {
	const max = 200
	if len(b) <= max {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q... (%d bytes)", b[:max], len(b))
}
