package compaction_test

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

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
)

// archiveStore is an in-memory store with an archive and failure injection.
type archiveStore struct {
	*faultstore.Store
	amu      sync.Mutex
	archives map[string][]byte // ArchiveKey -> JSONL
	aputs    int
	failPut  error
}

func newArchiveStore() *archiveStore {
	return &archiveStore{Store: newStore(), archives: map[string][]byte{}}
}

func (s *archiveStore) PutArchive(_ context.Context, sid string, from, to int, data []byte) (string, error) {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.aputs++
	if s.failPut != nil {
		return "", s.failPut
	}
	if err := compaction.ValidateArchiveSpan(from, to); err != nil {
		return "", err
	}
	key := compaction.ArchiveKey(sid, from, to)
	s.archives[key] = bytes.Clone(data)
	return "mem://" + key, nil
}

func (s *archiveStore) ListArchives(_ context.Context, sid string, fn func(compaction.ArchiveSpan) error) error {
	s.amu.Lock()
	spans := make([]compaction.ArchiveSpan, 0, len(s.archives))
	prefix := "archive/" + sid + "/"
	for k := range s.archives {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			if span, ok := compaction.ParseArchiveName(rest); ok {
				spans = append(spans, span)
			}
		}
	}
	s.amu.Unlock()
	slices.SortFunc(spans, func(a, b compaction.ArchiveSpan) int {
		if a.From != b.From {
			return a.From - b.From
		}
		return a.To - b.To
	})
	for _, sp := range spans {
		if err := fn(sp); err != nil {
			if errors.Is(err, compaction.ErrStopListing) {
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
	data, ok := s.archives[compaction.ArchiveKey(sid, from, to)]
	if !ok {
		return nil, fmt.Errorf("archive %d-%d: %w", from, to, compaction.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// only returns the one archive stored, failing the test unless there is exactly one.
func (s *archiveStore) only(t *testing.T) (string, []compaction.Message) {
	t.Helper()
	s.amu.Lock()
	defer s.amu.Unlock()
	if len(s.archives) != 1 {
		t.Fatalf("%d archives stored, want 1: %v", len(s.archives), slices.Collect(mapKeys(s.archives)))
	}
	for k, data := range s.archives {
		msgs, err := compaction.DecodeTranscript(bytes.NewReader(data), compaction.DecodeOptions{})
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

func newArchiveCompactor(t *testing.T, window int, opts ...compaction.Option) (*compaction.ProgressiveCompactor, *archiveStore) {
	t.Helper()
	st := newArchiveStore()
	c, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(window), append([]compaction.Option{compaction.WithStore(st), compaction.WithSessionID("s1")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

// checkArchivedSpan: the archive holds the raw messages [from, to) of msgs, each as the
// agent sent it or, for a result offloaded in the compaction, as its placeholder (the
// stored result being the original), and nothing else.
func checkArchivedSpan(t *testing.T, st *archiveStore, msgs []compaction.Message, from, to int, archived []compaction.Message) {
	t.Helper()
	if len(archived) != to-from {
		t.Fatalf("archive holds %d messages, want %d (%d-%d)", len(archived), to-from, from, to)
	}
	for i, got := range archived {
		want := msgs[from+i]
		if strings.HasPrefix(got.Content, compaction.PlaceholderPrefix) && want.Role == compaction.RoleTool {
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
		tier  compaction.Tier
	}{{"Soft", 0.75, compaction.TierSoft}, {"Full", 0.85, compaction.TierFull}, {"Emergency", 0.97, compaction.TierEmergency}} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := fixture()
			sum := &recordingSummarizer{output: goodSummary}
			c, st := newArchiveCompactor(t, windowFor(msgs, tc.usage), compaction.WithSummarizer(sum))
			_, rec, err := c.CompactWithRecord(context.Background(), msgs)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Tier != tc.tier || rec.Summarized == 0 || rec.WatermarkAfter != 1+rec.Summarized {
				t.Fatalf("tier %s, summarized %d, watermark %d: not the flow under test", rec.Tier, rec.Summarized, rec.WatermarkAfter)
			}
			key, archived := st.only(t)
			from, to := 1, rec.WatermarkAfter // after the system message
			if key != compaction.ArchiveKey("s1", from, to) || rec.Archive != "mem://"+key || rec.ArchiveFrom != from {
				t.Errorf("archive %s, record names %q from %d; want %s", key, rec.Archive, rec.ArchiveFrom, compaction.ArchiveKey("s1", from, to))
			}
			checkArchivedSpan(t, st, msgs, from, to, archived)
			if tc.tier != compaction.TierEmergency {
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
			if tc.tier != compaction.TierEmergency && rec.Error != "" || tc.tier == compaction.TierEmergency && rec.Error != compaction.EmergencyError {
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
	if rec2.ArchiveFrom != rec1.WatermarkAfter || !strings.HasSuffix(rec2.Archive, compaction.ArchiveName(rec1.WatermarkAfter, rec2.WatermarkAfter)) {
		t.Errorf("second archive %q from %d; want %s", rec2.Archive, rec2.ArchiveFrom, compaction.ArchiveName(rec1.WatermarkAfter, rec2.WatermarkAfter))
	}
	var got []int
	res, err := compaction.ScanArchive(context.Background(), st, "s1", compaction.HistoryQuery{}, func(m *compaction.ArchivedMessage) error {
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
		if cut, ok := strings.CutSuffix(got.Content, "\n"+compaction.HistoryReadBack+"\n"); ok {
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
		if strings.Contains(want[i].Content, compaction.HistoryReadBack) {
			t.Errorf("without an archive, view message %d names one", i)
		}
	}
	if stateJSON(t, st) == nil || st.Appends() != 1 {
		t.Errorf("state saved %v, %d records: the compaction must be kept", stateJSON(t, st) != nil, st.Appends())
	}
}

// TestArchiveNotOnNoneOrWarn: turns that do not move the watermark write no archive.
func TestArchiveNotOnNoneOrWarn(t *testing.T) {
	msgs := fixture()
	for _, tc := range []struct {
		usage float64
		tier  compaction.Tier
	}{{0.3, compaction.TierNone}, {0.65, compaction.TierWarn}} {
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
	c, st := newArchiveCompactor(t, compaction.EstimateTokens(msgs)*10, compaction.WithStateRevalidation())
	if _, rec, err := compactForce(ctx, c, msgs); err != nil || rec.WatermarkAfter == 0 {
		t.Fatalf("forced compaction: %v", err)
	}
	out, rec, err := c.CompactWithRecord(ctx, msgs)
	if err != nil || rec.WatermarkBefore == 0 || len(out) == len(msgs) {
		t.Fatalf("before the reset the view must start from the watermark: %v, watermark %d, %d messages", err, rec.WatermarkBefore, len(out))
	}
	stored := string(stateJSON(t, st))
	if !strings.Contains(stored, `"watermark"`) {
		t.Fatal("no state stored")
	}
	reset, err := c.Reset(ctx)
	if err != nil || !reset.Reset || reset.WatermarkBefore != rec.WatermarkAfter || reset.Tier != compaction.TierNone {
		t.Fatalf("Reset = %+v, %v", reset, err)
	}
	out, rec, err = c.CompactWithRecord(ctx, msgs)
	if err != nil || rec.Tier != compaction.TierNone || rec.WatermarkBefore != 0 || len(out) != len(msgs) {
		t.Fatalf("after the reset: %v, %s, watermark %d, %d of %d messages", err, rec.Tier, rec.WatermarkBefore, len(out), len(msgs))
	}
	for i := range out {
		if !out[i].Equal(&msgs[i]) {
			t.Errorf("after the reset view message %d is not the history's", i)
		}
	}
	recs := records(t, st, "s1")
	if len(recs) != st.Appends() {
		t.Fatalf("%d records of s1 in a trail of %d", len(recs), st.Appends())
	}
	last := recs[len(recs)-1]
	if !last.Reset || last.SessionID != "s1" {
		t.Errorf("the trail ends with %+v, want the Reset record", last)
	}
	if _, archived := st.only(t); len(archived) == 0 {
		t.Error("the archive went with the reset")
	}
	// A compactor built from the store (another replica) starts from the full history too.
	c2, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(compaction.EstimateTokens(msgs)*10), compaction.WithStore(st), compaction.WithSessionID("s1"))
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
	if err := st.SaveState(ctx, "s1", &compaction.State{Watermark: 9, LastSummary: "x", Calibration: 1.3, SummarizerCalls: []time.Time{now}, TaskKnown: true, TaskIndex: 1,
		Offloaded: map[string]compaction.OffloadEntry{"c1": {ToolCallID: "c1", Bytes: 9}}}); err != nil {
		t.Fatal(err)
	}
	rec, recErr, err := compaction.ResetState(ctx, st, st, "s1", now)
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
	rec, _, err = compaction.ResetState(ctx, st, st, "never", now)
	if err != nil || !rec.Reset || len(rec.Notes) == 0 {
		t.Errorf("reset of a session without state: %+v, %v", rec, err)
	}
	if _, err := st.LoadState(ctx, "never"); !errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("a reset created a state: %v", err)
	}
	if _, _, err := compaction.ResetState(ctx, st, st, "../x", now); err == nil {
		t.Error("ResetState accepted an unsafe session ID")
	}
	st.FailLoad(errors.New("down"))
	if _, _, err := compaction.ResetState(ctx, st, st, "s1", now); err == nil {
		t.Error("ResetState with the state unreadable succeeded")
	}
	if n := st.Appends(); n != 2 {
		t.Errorf("%d records, want the two resets that happened", n)
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
	history, err := compaction.DecodeTranscript(f, compaction.DecodeOptions{})
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, st := newArchiveCompactor(t, windowFor(history, 4))
	ctx := context.Background()
	moved, escalated := 0, 0
	for _, end := range compaction.AssistantTurns(history) {
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
