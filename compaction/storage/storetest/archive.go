package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
)

// runArchives runs the archive cases: every backend is a compaction.ArchiveStore.
func runArchives(t *testing.T, newStore func(t *testing.T) compaction.Store) {
	archives := func(t *testing.T) (compaction.Store, compaction.ArchiveStore) {
		t.Helper()
		s := newStore(t)
		a, ok := s.(compaction.ArchiveStore)
		if !ok {
			t.Fatalf("%T is not a compaction.ArchiveStore", s)
		}
		return s, a
	}
	t.Run("ArchiveRoundTrip", func(t *testing.T) { _, a := archives(t); testArchiveRoundTrip(t, a) })
	t.Run("ArchiveRejectsBadInput", func(t *testing.T) { _, a := archives(t); testArchiveRejectsBadInput(t, a) })
	t.Run("ArchiveScan", func(t *testing.T) { _, a := archives(t); testArchiveScan(t, a) })
	t.Run("ArchiveDeleteSession", func(t *testing.T) { s, a := archives(t); testArchiveDeleteSession(t, s, a) })
}

// ArchiveJSONL encodes msgs as an archive's content.
func ArchiveJSONL(t testing.TB, msgs []compaction.Message) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := compaction.EncodeJSONL(&buf, msgs); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// archiveMessages are n messages whose content names their index and mark.
func archiveMessages(mark string, from, n int) []compaction.Message {
	out := make([]compaction.Message, n)
	for i := range out {
		role := compaction.RoleUser
		if i%2 == 1 {
			role = compaction.RoleAssistant
		}
		out[i] = compaction.Message{Role: role, Content: fmt.Sprintf("%s message %d: \"quoted\", <html> & ⚡\nsecond line", mark, from+i)}
	}
	return out
}

// ListArchives returns the session's archive ranges in listing order.
func ListArchives(t testing.TB, a compaction.ArchiveStore, sid string) []compaction.ArchiveSpan {
	t.Helper()
	var out []compaction.ArchiveSpan
	if err := a.ListArchives(opCtx(t), sid, func(s compaction.ArchiveSpan) error {
		out = append(out, s)
		return nil
	}); err != nil {
		t.Fatalf("ListArchives(%s): %v", sid, err)
	}
	return out
}

// ReadArchive reads one archive whole.
func ReadArchive(t testing.TB, a compaction.ArchiveStore, sid string, from, to int) ([]byte, error) {
	t.Helper()
	rc, err := a.OpenArchive(opCtx(t), sid, from, to)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	return io.ReadAll(rc)
}

func spansString(spans []compaction.ArchiveSpan) string {
	parts := make([]string, len(spans))
	for i, s := range spans {
		parts[i] = s.String()
	}
	return strings.Join(parts, " ")
}

// testArchiveRoundTrip: archives read back byte for byte, list by From then To (10 after 9,
// not after 1), a range written again is replaced, a missing one is ErrNotFound, and the
// listing stops when its callback says so.
func testArchiveRoundTrip(t *testing.T, a compaction.ArchiveStore) {
	ctx := opCtx(t)
	sid := SessionID(t)
	spans := []compaction.ArchiveSpan{{From: 40, To: 55}, {From: 1, To: 60}, {From: 9, To: 10}, {From: 1, To: 40}, {From: 10, To: 12}}
	data := map[compaction.ArchiveSpan][]byte{}
	for _, s := range spans {
		data[s] = ArchiveJSONL(t, archiveMessages("first", s.From, s.To-s.From))
		ref, err := a.PutArchive(ctx, sid, s.From, s.To, data[s])
		if err != nil || ref == "" {
			t.Fatalf("PutArchive(%s) = %q, %v", s, ref, err)
		}
		if !strings.Contains(ref, compaction.ArchiveName(s.From, s.To)) {
			t.Errorf("PutArchive(%s) ref %q does not name %s", s, ref, compaction.ArchiveName(s.From, s.To))
		}
	}
	if got, want := spansString(ListArchives(t, a, sid)), "1-40 1-60 9-10 10-12 40-55"; got != want {
		t.Errorf("ListArchives = %s, want %s", got, want)
	}
	// Replaced: the same range holds what was written last.
	again := ArchiveJSONL(t, archiveMessages("second", 9, 1))
	if _, err := a.PutArchive(ctx, sid, 9, 10, again); err != nil {
		t.Fatal(err)
	}
	data[compaction.ArchiveSpan{From: 9, To: 10}] = again
	for s, want := range data {
		got, err := ReadArchive(t, a, sid, s.From, s.To)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("archive %s read back %s, %v; want %s", s, truncate(got), err, truncate(want))
		}
	}
	if n := len(ListArchives(t, a, sid)); n != len(spans) {
		t.Errorf("%d archives after a replace, want %d", n, len(spans))
	}
	if _, err := a.OpenArchive(ctx, sid, 2, 3); !errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("OpenArchive of a missing range: %v, want ErrNotFound", err)
	}
	if got := ListArchives(t, a, SessionID(t)); len(got) != 0 {
		t.Errorf("an unknown session lists %s", spansString(got))
	}
	// ErrStopListing ends the listing without an error; another error is returned.
	n := 0
	if err := a.ListArchives(ctx, sid, func(compaction.ArchiveSpan) error { n++; return compaction.ErrStopListing }); err != nil || n != 1 {
		t.Errorf("ListArchives stopped by its callback: %d calls, %v; want 1, nil", n, err)
	}
	boom := errors.New("boom")
	if err := a.ListArchives(ctx, sid, func(compaction.ArchiveSpan) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("ListArchives with a failing callback: %v, want its error", err)
	}
}

// testArchiveRejectsBadInput: bad ranges, an archive over the cap, and invalid session IDs
// are refused, and nothing is stored.
func testArchiveRejectsBadInput(t *testing.T, a compaction.ArchiveStore) {
	ctx := opCtx(t)
	sid := SessionID(t)
	data := ArchiveJSONL(t, archiveMessages("x", 0, 1))
	tooFar := compaction.MaxArchiveIndex
	tooFar++ // past the cap (on 32-bit platforms it wraps, and is refused all the same)
	for _, r := range [][2]int{{-1, 1}, {5, 5}, {6, 5}, {0, tooFar}} {
		if _, err := a.PutArchive(ctx, sid, r[0], r[1], data); err == nil {
			t.Errorf("PutArchive(%d, %d) accepted a bad range", r[0], r[1])
		}
		if _, err := a.OpenArchive(ctx, sid, r[0], r[1]); err == nil || errors.Is(err, compaction.ErrNotFound) {
			t.Errorf("OpenArchive(%d, %d) = %v; want an error that is not ErrNotFound", r[0], r[1], err)
		}
	}
	big := make([]byte, bounded.ArchiveBytes+1)
	if _, err := a.PutArchive(ctx, sid, 0, 1, big); !errors.Is(err, compaction.ErrObjectTooLarge) {
		t.Errorf("PutArchive of %d bytes: %v, want ErrObjectTooLarge", len(big), err)
	}
	if got := ListArchives(t, a, sid); len(got) != 0 {
		t.Errorf("refused writes stored %s", spansString(got))
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.PutArchive(canceled, sid, 0, 1, data); err == nil {
		t.Error("PutArchive with a canceled context succeeded")
	}
	if err := a.ListArchives(canceled, sid, func(compaction.ArchiveSpan) error { return nil }); err == nil {
		t.Error("ListArchives with a canceled context succeeded")
	}
	if got := ListArchives(t, a, sid); len(got) != 0 {
		t.Errorf("a canceled write stored %s", spansString(got))
	}
}

// testArchiveScan: compaction.ScanArchive on the store reads a range and searches by text,
// in index order, each index once where archives overlap, and goes on where it stopped.
func testArchiveScan(t *testing.T, a compaction.ArchiveStore) {
	ctx := opCtx(t)
	sid := SessionID(t)
	// Contiguous archives 1-4, 4-7 and, after a reset, 4-9 whose 7 and 8 are new.
	for _, s := range []struct {
		from, n int
		mark    string
	}{{1, 3, "A"}, {4, 3, "B"}, {4, 5, "C"}} {
		if _, err := a.PutArchive(ctx, sid, s.from, s.from+s.n, ArchiveJSONL(t, archiveMessages(s.mark, s.from, s.n))); err != nil {
			t.Fatal(err)
		}
	}
	scan := func(q compaction.HistoryQuery, limit int) ([]string, compaction.ScanResult) {
		t.Helper()
		var got []string
		res, err := compaction.ScanArchive(ctx, a, sid, q, func(m *compaction.ArchivedMessage) error {
			if len(got) == limit {
				return compaction.ErrStopListing
			}
			want := fmt.Sprintf(" message %d:", m.Index)
			if !strings.Contains(m.Message.Content, want) {
				t.Errorf("index %d holds %q", m.Index, m.Message.Content)
			}
			got = append(got, fmt.Sprintf("%d%s", m.Index, m.Message.Content[:1]))
			return nil
		})
		if err != nil {
			t.Fatalf("ScanArchive(%+v): %v", q, err)
		}
		return got, res
	}
	got, res := scan(compaction.HistoryQuery{}, 100)
	if strings.Join(got, " ") != "1A 2A 3A 4B 5B 6B 7C 8C" || res.Next != 9 || res.Stopped {
		t.Errorf("whole archive: %q, next %d stopped %v", got, res.Next, res.Stopped)
	}
	got, res = scan(compaction.HistoryQuery{From: 3, To: 6}, 100)
	if strings.Join(got, " ") != "3A 4B 5B" || res.Next != 6 {
		t.Errorf("range 3-6: %q, next %d", got, res.Next)
	}
	got, res = scan(compaction.HistoryQuery{From: 2}, 3)
	if strings.Join(got, " ") != "2A 3A 4B" || !res.Stopped || res.Next != 5 {
		t.Errorf("three from 2: %q, next %d stopped %v; want to go on at 5", got, res.Next, res.Stopped)
	}
	got, _ = scan(compaction.HistoryQuery{From: res.Next}, 100)
	if strings.Join(got, " ") != "5B 6B 7C 8C" {
		t.Errorf("going on at 5: %q", got)
	}
	m, err := compaction.NewHistoryMatcher("c MESSAGE 8", false)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = scan(compaction.HistoryQuery{Match: m}, 100)
	if strings.Join(got, " ") != "8C" {
		t.Errorf("search: %q, want 8C", got)
	}
	m, err = compaction.NewHistoryMatcher(`^[ab] message [2-5]:`, true)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = scan(compaction.HistoryQuery{Match: m}, 100)
	if strings.Join(got, " ") != "2A 3A 4B 5B" {
		t.Errorf("regex search: %q", got)
	}
	// A scan bounded by bytes stops after the first archive it read past the bound.
	got, res = scan(compaction.HistoryQuery{MaxScanBytes: 1}, 100)
	if strings.Join(got, " ") != "1A 2A 3A" || !res.Stopped || res.Next != 4 || res.ScannedBytes == 0 {
		t.Errorf("scan of 1 byte: %q, %+v", got, res)
	}
}

// testArchiveDeleteSession: DeleteSession removes the session's archives and its
// conversations', found by the session's prefix, and no archive of a session whose ID
// extends it; a session lists its own archives only, never its conversations'.
func testArchiveDeleteSession(t *testing.T, s compaction.Store, a compaction.ArchiveStore) {
	ctx := opCtx(t)
	victim := prefixVictim
	survivors := []string{"abcd", "abc.json", "abc.jsonl", "abc_conversations", "abc-archive"}
	convs := []string{"", "x", "conversations"}
	populate := func(session string) {
		t.Helper()
		for i, conv := range convs {
			sid := compaction.ConversationSessionID(session, conv)
			for j := range i + 1 {
				from := 1 + 10*j
				if _, err := a.PutArchive(ctx, sid, from, from+3, ArchiveJSONL(t, archiveMessages(sid, from, 3))); err != nil {
					t.Fatalf("PutArchive(%s): %v", sid, err)
				}
			}
		}
	}
	intact := func(session string) {
		t.Helper()
		for i, conv := range convs {
			sid := compaction.ConversationSessionID(session, conv)
			spans := ListArchives(t, a, sid)
			if len(spans) != i+1 {
				t.Errorf("%s lists %s, want its own %d archives", sid, spansString(spans), i+1)
			}
			for _, sp := range spans {
				data, err := ReadArchive(t, a, sid, sp.From, sp.To)
				if err != nil || !bytes.Contains(data, []byte(sid+" message")) || bytes.Count(data, []byte("\n")) != 3 {
					t.Errorf("archive %s of %s: %s, %v", sp, sid, truncate(data), err)
				}
			}
		}
	}
	populate(victim)
	for _, sid := range survivors {
		populate(sid)
	}
	intact(victim)
	now := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	if err := s.SaveState(ctx, victim, &compaction.State{LastSummary: "v", UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	n, err := s.DeleteSession(ctx, victim)
	if err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	// 1 + 2 + 3 archives and the state.
	if n < 7 {
		t.Errorf("DeleteSession removed %d objects, want at least 7 (six archives, the state)", n)
	}
	for _, conv := range convs {
		sid := compaction.ConversationSessionID(victim, conv)
		if got := ListArchives(t, a, sid); len(got) != 0 {
			t.Errorf("after DeleteSession %s lists %s", sid, spansString(got))
		}
		if _, err := a.OpenArchive(ctx, sid, 1, 4); !errors.Is(err, compaction.ErrNotFound) {
			t.Errorf("after DeleteSession OpenArchive(%s): %v, want ErrNotFound", sid, err)
		}
	}
	for _, sid := range survivors {
		intact(sid)
	}
}

// writeInvalidArchives is WriteInvalid's part for an ArchiveStore.
func writeInvalidArchives(t *testing.T, a compaction.ArchiveStore, sid string, check func(method string, err error)) {
	t.Helper()
	ctx := opCtx(t)
	_, err := a.PutArchive(ctx, sid, 0, 1, []byte("{}\n"))
	check("PutArchive", err)
	_, err = a.OpenArchive(ctx, sid, 0, 1)
	check("OpenArchive", err)
	called := false
	check("ListArchives", a.ListArchives(ctx, sid, func(compaction.ArchiveSpan) error { called = true; return nil }))
	if called {
		t.Errorf("ListArchives(%q) listed something for an invalid id", sid)
	}
}
