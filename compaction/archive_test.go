package compaction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// archiveStore is memStore with an archive and failure injection.
type archiveStore struct {
	*memStore
	amu      sync.Mutex
	archives map[string][]byte // ArchiveKey -> JSONL
	aputs    int
	failPut  error
}

func newArchiveStore() *archiveStore {
	return &archiveStore{memStore: newMemStore(), archives: map[string][]byte{}}
}

func (s *archiveStore) PutArchive(_ context.Context, sid string, from, to int, data []byte) (string, error) {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.aputs++
	if s.failPut != nil {
		return "", s.failPut
	}
	if err := ValidateArchiveSpan(from, to); err != nil {
		return "", err
	}
	key := ArchiveKey(sid, from, to)
	s.archives[key] = bytes.Clone(data)
	return "mem://" + key, nil
}

func (s *archiveStore) ListArchives(_ context.Context, sid string, fn func(ArchiveSpan) error) error {
	s.amu.Lock()
	spans := make([]ArchiveSpan, 0, len(s.archives))
	prefix := "archive/" + sid + "/"
	for k := range s.archives {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			if span, ok := ParseArchiveName(rest); ok {
				spans = append(spans, span)
			}
		}
	}
	s.amu.Unlock()
	slices.SortFunc(spans, func(a, b ArchiveSpan) int {
		if a.From != b.From {
			return a.From - b.From
		}
		return a.To - b.To
	})
	for _, sp := range spans {
		if err := fn(sp); err != nil {
			if errors.Is(err, ErrStopListing) {
				return nil
			}
			return err
		}
	}
	return nil
}

func (s *archiveStore) OpenArchive(_ context.Context, sid string, from, to int) (io.ReadCloser, error) {
	s.amu.Lock()
	defer s.amu.Unlock()
	data, ok := s.archives[ArchiveKey(sid, from, to)]
	if !ok {
		return nil, fmt.Errorf("archive %d-%d: %w", from, to, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// only returns the one archive stored, failing the test unless there is exactly one.
func (s *archiveStore) only(t *testing.T) (string, []Message) {
	t.Helper()
	s.amu.Lock()
	defer s.amu.Unlock()
	if len(s.archives) != 1 {
		t.Fatalf("%d archives stored, want 1: %v", len(s.archives), slices.Collect(mapKeys(s.archives)))
	}
	for k, data := range s.archives {
		msgs, err := DecodeTranscript(bytes.NewReader(data), DecodeOptions{})
		if err != nil {
			t.Fatalf("archive %s does not decode: %v", k, err)
		}
		return k, msgs
	}
	return "", nil
}

func mapKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func newArchiveCompactor(t *testing.T, window int, opts ...Option) (*ProgressiveCompactor, *archiveStore) {
	t.Helper()
	st := newArchiveStore()
	c, err := NewProgressiveCompactor(DefaultConfig(window), append([]Option{WithStore(st), WithSessionID("s1")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

// checkArchivedSpan: the archive holds the raw messages [from, to) of msgs, each as the
// agent sent it or, for a result offloaded in the compaction, as its placeholder (the
// stored result being the original), and nothing else.
func checkArchivedSpan(t *testing.T, st *archiveStore, msgs []Message, from, to int, archived []Message) {
	t.Helper()
	if len(archived) != to-from {
		t.Fatalf("archive holds %d messages, want %d (%d-%d)", len(archived), to-from, from, to)
	}
	for i, got := range archived {
		want := msgs[from+i]
		if strings.HasPrefix(got.Content, PlaceholderPrefix) && want.Role == RoleTool {
			stored, err := st.GetToolResult(context.Background(), "s1", want.ToolCallID)
			if err != nil || string(stored) != want.Content {
				t.Errorf("archived message %d is a placeholder of %s, whose stored result is not the original: %v", from+i, want.ToolCallID, err)
			}
			want.Content = got.Content
		}
		if !got.Equal(&want) {
			t.Errorf("archived message %d differs from the history's:\n got %+v\nwant %+v", from+i, got, want)
		}
	}
}

// TestArchiveSoftFullEmergency: each tier that moves the watermark writes one archive,
// named by its range, holding exactly the span the summary stands for (what the summarizer
// read), and the record names it.
func TestArchiveSoftFullEmergency(t *testing.T) {
	for _, tc := range []struct {
		name  string
		usage float64
		tier  Tier
	}{{"Soft", 0.75, TierSoft}, {"Full", 0.85, TierFull}, {"Emergency", 0.97, TierEmergency}} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := fixture()
			sum := &recordingSummarizer{output: goodSummary}
			c, st := newArchiveCompactor(t, windowFor(msgs, tc.usage), WithSummarizer(sum))
			_, rec, err := c.CompactWithRecord(context.Background(), msgs)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Tier != tc.tier || rec.Summarized == 0 || rec.WatermarkAfter != 1+rec.Summarized {
				t.Fatalf("tier %s, summarized %d, watermark %d: not the flow under test", rec.Tier, rec.Summarized, rec.WatermarkAfter)
			}
			key, archived := st.only(t)
			from, to := 1, rec.WatermarkAfter // after the system message
			if key != ArchiveKey("s1", from, to) || rec.Archive != "mem://"+key || rec.ArchiveFrom != from {
				t.Errorf("archive %s, record names %q from %d; want %s", key, rec.Archive, rec.ArchiveFrom, ArchiveKey("s1", from, to))
			}
			checkArchivedSpan(t, st, msgs, from, to, archived)
			if tc.tier != TierEmergency {
				// Exactly what the summarizer read.
				if len(sum.last.Messages) != len(archived) {
					t.Fatalf("summarizer read %d messages, archive holds %d", len(sum.last.Messages), len(archived))
				}
				for i := range archived {
					if !archived[i].Equal(&sum.last.Messages[i]) {
						t.Errorf("archived message %d is not what the summarizer read", from+i)
					}
				}
			}
			if tc.tier != TierEmergency && rec.Error != "" || tc.tier == TierEmergency && rec.Error != EmergencyError {
				t.Errorf("record error %q", rec.Error)
			}
		})
	}
}

// TestArchiveNextCompactionStartsAtWatermark: a later compaction archives from the watermark
// the earlier one left: archives tile the history without gaps or overlap, and ScanArchive
// reads it back in order.
func TestArchiveNextCompactionStartsAtWatermark(t *testing.T) {
	msgs := fixture()
	c, st := newArchiveCompactor(t, windowFor(msgs, 0.85))
	_, rec1, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil || rec1.WatermarkAfter == 0 {
		t.Fatalf("first compaction: %v, watermark %d", err, rec1.WatermarkAfter)
	}
	more := slices.Clone(msgs)
	for i := range 6 {
		id := fmt.Sprintf("m%d", i)
		more = append(more, call("", id), result(id, fmt.Sprintf("more output %d\n", i)))
	}
	_, rec2, err := compactForce(context.Background(), c, more)
	if err != nil || rec2.WatermarkBefore != rec1.WatermarkAfter || rec2.WatermarkAfter <= rec1.WatermarkAfter {
		t.Fatalf("second compaction: %v, watermark %d -> %d", err, rec2.WatermarkBefore, rec2.WatermarkAfter)
	}
	if rec2.ArchiveFrom != rec1.WatermarkAfter || !strings.HasSuffix(rec2.Archive, ArchiveName(rec1.WatermarkAfter, rec2.WatermarkAfter)) {
		t.Errorf("second archive %q from %d; want %s", rec2.Archive, rec2.ArchiveFrom, ArchiveName(rec1.WatermarkAfter, rec2.WatermarkAfter))
	}
	var got []int
	res, err := ScanArchive(context.Background(), st, "s1", HistoryQuery{}, func(m *ArchivedMessage) error {
		got = append(got, m.Index)
		if m.Index < len(more) && m.Message.Role != more[m.Index].Role {
			t.Errorf("index %d has role %s, the history's is %s", m.Index, m.Message.Role, more[m.Index].Role)
		}
		return nil
	})
	if err != nil || res.Next != rec2.WatermarkAfter {
		t.Fatalf("scan: %v, next %d", err, res.Next)
	}
	for i, idx := range got {
		if idx != 1+i {
			t.Fatalf("indices %v: want 1 to %d without gaps", got, rec2.WatermarkAfter-1)
		}
	}
}

// TestArchiveFailOpen: a failing archive store is named in the record's error and the
// compaction goes on exactly as without an archive: same tier, view and watermark.
func TestArchiveFailOpen(t *testing.T) {
	msgs := fixture()
	window := windowFor(msgs, 0.85)
	c, st := newArchiveCompactor(t, window)
	st.failPut = errors.New("bucket on fire")
	out, rec, err := c.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := newTestCompactor(t, window)
	want, wantRec, err := ref.CompactWithRecord(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if st.aputs != 1 || rec.Archive != "" || !strings.Contains(rec.Error, "archive of messages 1-11") || !strings.Contains(rec.Error, "bucket on fire") {
		t.Errorf("%d archive writes, archive %q, error %q; want one failed write named in the error", st.aputs, rec.Archive, rec.Error)
	}
	if rec.Tier != wantRec.Tier || rec.WatermarkAfter != wantRec.WatermarkAfter || len(out) != len(want) {
		t.Fatalf("with a failing archive: %s, watermark %d, %d messages; without one: %s, %d, %d",
			rec.Tier, rec.WatermarkAfter, len(out), wantRec.Tier, wantRec.WatermarkAfter, len(want))
	}
	lines := 0
	for i := range out {
		got := out[i].Clone()
		if cut, ok := strings.CutSuffix(got.Content, "\n"+HistoryReadBack+"\n"); ok {
			got.Content, lines = cut, lines+1
		}
		if !got.Equal(&want[i]) {
			t.Errorf("view message %d differs from the view without an archive (the archive's line aside)", i)
		}
	}
	if lines != 1 {
		t.Errorf("%d view messages end with the archive's line; want the compaction message only", lines)
	}
	for i := range want {
		if strings.Contains(want[i].Content, HistoryReadBack) {
			t.Errorf("without an archive, view message %d names one", i)
		}
	}
	if st.states["s1"] == nil || len(st.records) != 1 {
		t.Errorf("state saved %v, %d records: the compaction must be kept", st.states["s1"] != nil, len(st.records))
	}
}

// TestArchiveNotOnNoneOrWarn: turns that do not move the watermark write no archive.
func TestArchiveNotOnNoneOrWarn(t *testing.T) {
	msgs := fixture()
	for _, tc := range []struct {
		usage float64
		tier  Tier
	}{{0.3, TierNone}, {0.65, TierWarn}} {
		c, st := newArchiveCompactor(t, windowFor(msgs, tc.usage))
		for turn := range 3 {
			// Warn's offload brings the next turns under it.
			_, rec, err := c.CompactWithRecord(context.Background(), msgs)
			if err != nil || turn == 0 && rec.Tier != tc.tier || rec.Tier > tc.tier {
				t.Fatalf("turn %d: tier %s, %v; want %s", turn, rec.Tier, err, tc.tier)
			}
			if rec.Archive != "" {
				t.Errorf("%s names an archive %q", tc.tier, rec.Archive)
			}
		}
		if st.aputs != 0 {
			t.Errorf("%s wrote %d archives", tc.tier, st.aputs)
		}
	}
}

// TestResetStartsFromFullHistory: after a reset the next turn's view is the agent's full
// history (no summary, no placeholder), the trail ends with a Reset record, the archive is
// still there, and the state keeps the calibration.
func TestResetStartsFromFullHistory(t *testing.T) {
	msgs := fixture()
	ctx := context.Background()
	c, st := newArchiveCompactor(t, EstimateTokens(msgs)*10, WithStateRevalidation())
	if _, rec, err := compactForce(ctx, c, msgs); err != nil || rec.WatermarkAfter == 0 {
		t.Fatalf("forced compaction: %v", err)
	}
	out, rec, err := c.CompactWithRecord(ctx, msgs)
	if err != nil || rec.WatermarkBefore == 0 || len(out) == len(msgs) {
		t.Fatalf("before the reset the view must start from the watermark: %v, watermark %d, %d messages", err, rec.WatermarkBefore, len(out))
	}
	st.mu.Lock()
	stored := string(st.states["s1"])
	st.mu.Unlock()
	if !strings.Contains(stored, `"watermark"`) {
		t.Fatal("no state stored")
	}
	reset, err := c.Reset(ctx)
	if err != nil || !reset.Reset || reset.WatermarkBefore != rec.WatermarkAfter || reset.Tier != TierNone {
		t.Fatalf("Reset = %+v, %v", reset, err)
	}
	out, rec, err = c.CompactWithRecord(ctx, msgs)
	if err != nil || rec.Tier != TierNone || rec.WatermarkBefore != 0 || len(out) != len(msgs) {
		t.Fatalf("after the reset: %v, %s, watermark %d, %d of %d messages", err, rec.Tier, rec.WatermarkBefore, len(out), len(msgs))
	}
	for i := range out {
		if !out[i].Equal(&msgs[i]) {
			t.Errorf("after the reset view message %d is not the history's", i)
		}
	}
	last := st.records[len(st.records)-1]
	if !last.Reset || last.SessionID != "s1" {
		t.Errorf("the trail ends with %+v, want the Reset record", last)
	}
	if _, archived := st.only(t); len(archived) == 0 {
		t.Error("the archive went with the reset")
	}
	// A compactor built from the store (another replica) starts from the full history too.
	c2, err := NewProgressiveCompactor(DefaultConfig(EstimateTokens(msgs)*10), WithStore(st), WithSessionID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if out, rec, err := c2.CompactWithRecord(ctx, msgs); err != nil || rec.WatermarkBefore != 0 || len(out) != len(msgs) {
		t.Errorf("another compactor after the reset: %v, watermark %d, %d messages", err, rec.WatermarkBefore, len(out))
	}
}

// TestResetStateKeepsSessionOwn: ResetState keeps the calibration and the summarizer calls
// (a reset never refills the budget), writes over the version it read, retries a conflict,
// and records a reset of a session without state too.
func TestResetStateKeepsSessionOwn(t *testing.T) {
	ctx := context.Background()
	st := newArchiveStore()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if err := st.SaveState(ctx, "s1", &State{Watermark: 9, LastSummary: "x", Calibration: 1.3, SummarizerCalls: []time.Time{now}, TaskKnown: true, TaskIndex: 1,
		Offloaded: map[string]OffloadEntry{"c1": {ToolCallID: "c1", Bytes: 9}}}); err != nil {
		t.Fatal(err)
	}
	rec, recErr, err := ResetState(ctx, st, st, "s1", now)
	if err != nil || recErr != nil || rec.WatermarkBefore != 9 || !rec.Reset {
		t.Fatalf("ResetState = %+v, %v, %v", rec, recErr, err)
	}
	got, err := st.LoadState(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Watermark != 0 || got.LastSummary != "" || len(got.Offloaded) != 0 || got.TaskKnown || got.Calibration != 1.3 || len(got.SummarizerCalls) != 1 {
		t.Errorf("state after reset %+v", got)
	}
	rec, _, err = ResetState(ctx, st, st, "never", now)
	if err != nil || !rec.Reset || len(rec.Notes) == 0 {
		t.Errorf("reset of a session without state: %+v, %v", rec, err)
	}
	if _, err := st.LoadState(ctx, "never"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a reset created a state: %v", err)
	}
	if _, _, err := ResetState(ctx, st, st, "../x", now); err == nil {
		t.Error("ResetState accepted an unsafe session ID")
	}
	st.failLoad = errors.New("down")
	if _, _, err := ResetState(ctx, st, st, "s1", now); err == nil {
		t.Error("ResetState with the state unreadable succeeded")
	}
	if n := len(st.records); n != 2 {
		t.Errorf("%d records, want the two resets that happened", n)
	}
}

// TestHistoryMatcher: substring search is case-insensitive and literal; a regex is RE2 and
// case-insensitive; the text searched is the content, parts' text, tool calls and IDs.
func TestHistoryMatcher(t *testing.T) {
	msgs := []Message{
		{Role: RoleUser, Content: "Error: TestParse FAILED (a.b*c)"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_9", Function: FunctionCall{Name: "bash", Arguments: `{"cmd":"go test ./parser"}`}}}},
		{Role: RoleUser, ContentParts: []byte(`[{"type":"text","text":"see the screenshot of the login page"},{"type":"image_url","image_url":{"url":"data:image/png;base64,QUJD"}}]`)},
		{Role: RoleTool, ToolCallID: "call_9", Content: "ok"},
	}
	for _, tc := range []struct {
		q     string
		regex bool
		want  []int
	}{
		{"testparse failed", false, []int{0}},
		{"A.B*C", false, []int{0}},
		{"a.b", true, []int{0}},
		{`go test \./\w+`, true, []int{1}},
		{"LOGIN PAGE", false, []int{2}},
		{"base64", false, nil},
		{"call_9", false, []int{1, 3}},
		{`(?-i)error`, true, nil},
	} {
		m, err := NewHistoryMatcher(tc.q, tc.regex)
		if err != nil {
			t.Fatalf("%q: %v", tc.q, err)
		}
		got := make([]int, 0, len(msgs))
		for i := range msgs {
			if m.Match(&msgs[i]) {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q (regex %v) matches %v, want %v", tc.q, tc.regex, got, tc.want)
		}
	}
	for _, bad := range []struct {
		q     string
		regex bool
	}{{"", false}, {strings.Repeat("a", MaxHistoryQueryBytes+1), false}, {"(unclosed", true}, {"a{2000}", true}} {
		if _, err := NewHistoryMatcher(bad.q, bad.regex); err == nil {
			t.Errorf("NewHistoryMatcher(%.20q, %v) accepted", bad.q, bad.regex)
		}
	}
}

// TestArchiveKeyLayout: archive keys round-trip through their names, list in range order,
// and sit under exactly one of their session's prefixes (so DeleteSession finds them), a
// conversation's under its session's, never under another session's.
func TestArchiveKeyLayout(t *testing.T) {
	if k := ArchiveKey("s", 1, 40); k != "archive/s/0000000001-0000000040.jsonl" {
		t.Errorf("ArchiveKey = %q", k)
	}
	for _, sp := range []ArchiveSpan{{0, 1}, {1, 40}, {9, 10}, {10, 12}, {MaxArchiveIndex - 1, MaxArchiveIndex}} {
		if got, ok := ParseArchiveName(ArchiveName(sp.From, sp.To)); !ok || got != sp {
			t.Errorf("ParseArchiveName(ArchiveName(%v)) = %v, %v", sp, got, ok)
		}
	}
	if ArchiveName(9, 10) >= ArchiveName(10, 12) || ArchiveName(1, 40) >= ArchiveName(1, 60) {
		t.Error("archive names do not sort by From, then To")
	}
	for _, bad := range []string{"", "1-40.jsonl", "0000000001-0000000040.json", "0000000040-0000000001.jsonl", "0000000001-0000000001.jsonl",
		"000000000a-0000000040.jsonl", "0000000001_0000000040.jsonl", "9999999999-9999999999.jsonl", "0000000001-9999999999.jsonl",
		".tmp-0000000001-0000000040.jsonl", "conversations/", "-000000001-0000000040.jsonl"} {
		if sp, ok := ParseArchiveName(bad); ok {
			t.Errorf("ParseArchiveName(%q) = %v, want not an archive", bad, sp)
		}
	}
	for _, id := range []string{"s", ConversationSessionID("s", "x")} {
		k := ArchiveKey(id, 1, 2)
		in := 0
		for _, p := range SessionPrefixes("s") {
			if strings.HasPrefix(k, p) {
				in++
			}
		}
		if in != 1 {
			t.Errorf("archive key %q is under %d of session s's prefixes %q, want 1", k, in, SessionPrefixes("s"))
		}
		for _, other := range []string{"s.json", "s2", "x", "s.jsonl"} {
			for _, p := range SessionPrefixes(other) {
				if strings.HasPrefix(k, p) {
					t.Errorf("archive key %q of session s is under session %s's %q", k, other, p)
				}
			}
		}
	}
}

// TestArchiveOneWritePerCompaction: over a long session replayed turn by turn, a compaction
// that moves the watermark writes exactly one archive (a Soft done as Full in the same turn
// included) and every other turn writes none: the archive's cost is one storage round trip
// per summarizing compaction.
func TestArchiveOneWritePerCompaction(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "testdata", "long-session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	history, err := DecodeTranscript(f, DecodeOptions{})
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, st := newArchiveCompactor(t, windowFor(history, 4))
	ctx := context.Background()
	moved, escalated := 0, 0
	for _, end := range AssistantTurns(history) {
		before := st.aputs
		_, rec, err := c.CompactWithRecord(ctx, history[:end])
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if rec.WatermarkAfter > rec.WatermarkBefore {
			want = 1
			moved++
		}
		if strings.Contains(strings.Join(rec.Notes, " "), "escalated to Full") || strings.Contains(strings.Join(rec.Notes, " "), "summarized too (Full)") {
			escalated++
		}
		if got := st.aputs - before; got != want {
			t.Fatalf("turn ending at %d (%s, watermark %d -> %d): %d archive writes, want %d", end, rec.Tier, rec.WatermarkBefore, rec.WatermarkAfter, got, want)
		}
	}
	if moved < 3 || escalated == 0 {
		t.Fatalf("%d compactions moved the watermark, %d Soft escalated to Full: the replay does not exercise the archive", moved, escalated)
	}
	t.Logf("%d summarizing compactions (%d escalated from Soft), %d archive writes", moved, escalated, st.aputs)
}
