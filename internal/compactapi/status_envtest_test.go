package compactapi

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8sevents "k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
)

// TestStatusWriteSummarizerUsage writes the coalesced status of an AgentSession to a real
// API server with the generated CRD: the summarizer counters of several compactions arrive
// in one write, add to what the status holds, and survive the CRD's schema (a field missing
// from it would be pruned), the counts of summaries made off the turn included;
// contextUsage is the calibrated usage that chose the tier.
func TestStatusWriteSummarizerUsage(t *testing.T) {
	root := testenv.RepoRoot(t)
	_, cfg := kubeenv.Start(t, kubeenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := compactionv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	obj := builder.Session("default", "agent", "p").Build()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	s, reg := newTestMetrics(t)
	s.cfg.UsageInterval = time.Hour
	s.cache, s.apiReader, s.writer, s.log = c, c, c, logr.Discard()
	s.status = newStatus(s)
	sess := &session{obj: obj, id: string(obj.UID), cfg: compaction.DefaultConfig(100000)}

	read := func() compactionv1alpha1.AgentSessionStatus {
		t.Helper()
		var got compactionv1alpha1.AgentSession
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
			t.Fatal(err)
		}
		return got.Status
	}

	now := time.Now()
	s.status.RecordTurn(sess.statusSession(), sess.statusTurn(&compaction.CompactionRecord{ID: "1", Timestamp: now, Tier: compaction.TierSoft, TokensBefore: 70000, TokensAfter: 52000,
		Calibration: 1.05, UsageBefore: 0.735, UsageAfter: 0.546, SummarizerCalls: 1, SummarizerInputTokens: 900, SummarizerOutputTokens: 120,
		OffTurnWork: compaction.OffTurnWork{PreparedUsed: 1, PreparedCovered: 12}}))
	s.status.RecordTurn(sess.statusSession(), sess.statusTurn(&compaction.CompactionRecord{ID: "2", Timestamp: now, Tier: compaction.TierFull, TokensBefore: 78000, TokensAfter: 40000,
		Calibration: 1.05, UsageBefore: 0.819, UsageAfter: 0.42, SummarizerCalls: 2, SummarizerInputTokens: 2100, SummarizerOutputTokens: 260,
		OffTurnWork: compaction.OffTurnWork{PreparedWasted: 1, PreparedWastedTokens: 800, SummarizerDeferred: true, PreparedStarted: "late"}}))
	if failed := s.status.Flush(ctx); failed != 0 {
		t.Fatalf("%d status writes failed", failed)
	}
	st := read()
	// The counts of summaries made off the turn (issue 29) too.
	if want := (compactionv1alpha1.SummarizerUsage{Calls: ptr.To[int64](3), InputTokens: ptr.To[int64](3000), OutputTokens: ptr.To[int64](380),
		PreparedCalls: ptr.To[int64](1), PreparedUsed: ptr.To[int64](1), PreparedWasted: ptr.To[int64](1), PreparedWastedTokens: ptr.To[int64](800),
		Deferred: ptr.To[int64](1)}); !reflect.DeepEqual(st.Summarizer, want) {
		t.Errorf("status.summarizer %+v, want %+v", st.Summarizer, want)
	}
	if st.Tier != compactionv1alpha1.TierFull || st.ContextUsage != "0.82" {
		t.Errorf("status tier %s contextUsage %s, want Full 0.82 (the calibrated usage of the last record)", st.Tier, st.ContextUsage)
	}
	if !reflect.DeepEqual(st.Compactions, compactionv1alpha1.TierCounts{Soft: ptr.To[int64](1), Full: ptr.To[int64](1)}) ||
		ptr.Deref(st.TokensBefore, 0) != 78000 || ptr.Deref(st.TokensAfter, 0) != 40000 {
		t.Errorf("status compactions %+v tokens %d->%d", st.Compactions, ptr.Deref(st.TokensBefore, 0), ptr.Deref(st.TokensAfter, 0))
	}
	if n := metricValue(t, reg, "compaction_api_status_writes_total", map[string]string{"result": "written"}); n != 1 {
		t.Errorf("%v status writes, want 1 for both compactions", n)
	}

	// Later work adds to the status, also from a turn whose tier stays None and that is not
	// due for a usage write (the session's first None turn was never written: make it due
	// later).
	s.status.UsageWritten(obj.UID) // counts it as written now
	s.status.RecordTurn(sess.statusSession(), sess.statusTurn(&compaction.CompactionRecord{ID: "3", Timestamp: now, Tier: compaction.TierNone, TokensBefore: 41000, TokensAfter: 41000,
		Calibration: 1.05, UsageBefore: 0.43, UsageAfter: 0.43, SummarizerCalls: 1, SummarizerInputTokens: 500, SummarizerOutputTokens: 40,
		OffTurnWork: compaction.OffTurnWork{PreparedStarted: "ahead"}}))
	if failed := s.status.Flush(ctx); failed != 0 {
		t.Fatalf("%d status writes failed", failed)
	}
	st = read()
	if want := (compactionv1alpha1.SummarizerUsage{Calls: ptr.To[int64](4), InputTokens: ptr.To[int64](3500), OutputTokens: ptr.To[int64](420),
		PreparedCalls: ptr.To[int64](2), PreparedUsed: ptr.To[int64](1), PreparedWasted: ptr.To[int64](1), PreparedWastedTokens: ptr.To[int64](800),
		Deferred: ptr.To[int64](1)}); !reflect.DeepEqual(st.Summarizer, want) {
		t.Errorf("status.summarizer %+v after a None turn with summarizer work, want %+v", st.Summarizer, want)
	}
	if st.Tier != compactionv1alpha1.TierFull || st.ContextUsage != "0.82" {
		t.Errorf("a None turn that is not due changed tier %s contextUsage %s", st.Tier, st.ContextUsage)
	}

	// A Warn turn that waited (nothing offloaded, the view unchanged) is not a compaction: its
	// tier and usage are paced like a None turn's (this one is not due), it neither counts
	// nor replaces the last compaction's numbers, and it puts no Event on the session.
	waited := &compaction.CompactionRecord{ID: "4", Timestamp: now.Add(time.Second), Tier: compaction.TierWarn, TokensBefore: 62000, TokensAfter: 62000,
		MsgsBefore: 90, MsgsAfter: 90, Calibration: 1.05, UsageBefore: 0.651, UsageAfter: 0.651}
	events := k8sevents.NewFakeRecorder(10)
	s.recorder = events
	s.emitEvent(sess, waited)
	s.status.RecordTurn(sess.statusSession(), sess.statusTurn(waited))
	if failed := s.status.Flush(ctx); failed != 0 {
		t.Fatalf("%d status writes failed", failed)
	}
	st = read()
	if st.Tier != compactionv1alpha1.TierFull || st.ContextUsage != "0.82" {
		t.Errorf("a waiting Warn turn that is not due changed tier %s contextUsage %s", st.Tier, st.ContextUsage)
	}
	if !reflect.DeepEqual(st.Compactions, compactionv1alpha1.TierCounts{Soft: ptr.To[int64](1), Full: ptr.To[int64](1)}) ||
		ptr.Deref(st.TokensBefore, 0) != 78000 || ptr.Deref(st.MessagesBefore, 0) == 90 {
		t.Errorf("a waiting Warn turn counted as a compaction: compactions %+v tokensBefore %d messagesBefore %d",
			st.Compactions, ptr.Deref(st.TokensBefore, 0), ptr.Deref(st.MessagesBefore, 0))
	}
	if len(events.Events) != 0 {
		t.Errorf("a waiting Warn turn emitted %q", <-events.Events)
	}
}

// staleReader answers every Get with a copy of one earlier snapshot of the session, once it
// has one: an informer that has not seen the latest writes yet.
type staleReader struct {
	client.Reader
	snapshot *compactionv1alpha1.AgentSession
}

func (r *staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if r.snapshot == nil {
		return r.Reader.Get(ctx, key, obj, opts...)
	}
	r.snapshot.DeepCopyInto(obj.(*compactionv1alpha1.AgentSession))
	return nil
}

// TestStatusWriteFromStaleCache: status writes start from the informer's copy of the
// session; a copy that missed the latest write neither loses a change (its update
// conflicts and is made again on a fresh read) nor skips one (a change it would call a
// no-op is checked on a fresh read).
func TestStatusWriteFromStaleCache(t *testing.T) {
	root := testenv.RepoRoot(t)
	_, cfg := kubeenv.Start(t, kubeenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	scheme := runtime.NewScheme()
	testenv.Must(t, clientgoscheme.AddToScheme(scheme))
	testenv.Must(t, compactionv1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	testenv.Must(t, err)
	ctx := context.Background()
	obj := builder.Session("default", "agent", "p").Build()
	testenv.Must(t, c.Create(ctx, obj))
	s, _ := newTestMetrics(t)
	s.cfg.UsageInterval = 0 // every None turn is written
	// The informer's copy: current until the test gives it a snapshot.
	cache := &staleReader{Reader: c}
	s.cache, s.apiReader, s.writer, s.log = cache, c, c, logr.Discard()
	s.status = newStatus(s)
	sess := &session{obj: obj, id: string(obj.UID), cfg: compaction.DefaultConfig(100000)}
	key := client.ObjectKeyFromObject(obj)
	read := func() compactionv1alpha1.AgentSession {
		t.Helper()
		var got compactionv1alpha1.AgentSession
		testenv.Must(t, c.Get(ctx, key, &got))
		return got
	}
	turn := func(tier compaction.Tier, usage float64) {
		t.Helper()
		s.status.RecordTurn(sess.statusSession(), sess.statusTurn(&compaction.CompactionRecord{Timestamp: time.Now(), Tier: tier, TokensBefore: 1000, TokensAfter: 900,
			Calibration: 1, UsageBefore: usage, UsageAfter: usage}))
		if failed := s.status.Flush(ctx); failed != 0 {
			t.Fatalf("%d status writes failed", failed)
		}
	}

	turn(compaction.TierNone, 0.30)
	snapshot := read() // None 0.30
	turn(compaction.TierSoft, 0.72)
	if st := read().Status; st.Tier != compactionv1alpha1.TierSoft {
		t.Fatalf("tier %s, want Soft", st.Tier)
	}

	cache.snapshot = &snapshot
	// On the stale copy this turn changes nothing (it says None 0.30 already).
	turn(compaction.TierNone, 0.30)
	if st := read().Status; st.Tier != compactionv1alpha1.TierNone || st.ContextUsage != "0.30" {
		t.Fatalf("after a None turn written from a stale copy: tier %s usage %s, want None 0.30", st.Tier, st.ContextUsage)
	}
	// On the stale copy the update conflicts.
	turn(compaction.TierFull, 0.85)
	st := read().Status
	if st.Tier != compactionv1alpha1.TierFull || !reflect.DeepEqual(st.Compactions, compactionv1alpha1.TierCounts{Soft: ptr.To[int64](1), Full: ptr.To[int64](1)}) {
		t.Fatalf("after a Full turn written from a stale copy: tier %s compactions %+v, want Full with Soft 1, Full 1", st.Tier, st.Compactions)
	}
}
