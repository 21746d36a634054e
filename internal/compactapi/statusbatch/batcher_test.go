package statusbatch

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

// turn is the Turn the compaction API records for rec on a session whose policy has a
// 100000-token window: with the record's calibrated usage, else its estimate's.
func turn(rec *compaction.CompactionRecord) Turn {
	cfg := compaction.DefaultConfig(100000)
	usage := rec.UsageBefore
	if rec.Calibration == 0 && usage == 0 {
		usage = cfg.Usage(rec.TokensBefore)
	}
	return Turn{Record: rec, Usage: usage, Window: cfg.ContextWindow}
}

func TestRequeueKeepsEveryCounter(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	older := &compaction.CompactionRecord{ID: "older"}
	newer := &compaction.CompactionRecord{ID: "newer"}
	failed := &pendingStatus{uid: "u1", turn: true, tier: compaction.TierWarn, usage: "0.61", last: older,
		counts: tierCounts{warn: 2, full: 1}, offloadedCount: 3, offloadedBytes: 300,
		summarizer: summarizerWork{calls: 1, inputTokens: 1000, outputTokens: 100, preparedCalls: 1, preparedWasted: 1, preparedWastedTokens: 400, deferred: 1}}

	t.Run("nothing newer", func(t *testing.T) {
		b := New(Config{})
		b.requeue(key, failed)
		if b.pending[key] != failed {
			t.Fatal("the failed change is not pending again")
		}
	})
	t.Run("a newer turn", func(t *testing.T) {
		b := New(Config{})
		b.pending[key] = &pendingStatus{uid: "u1", turn: true, tier: compaction.TierSoft, usage: "0.72", last: newer,
			counts: tierCounts{soft: 1}, offloadedCount: 1, offloadedBytes: 10,
			summarizer: summarizerWork{calls: 2, inputTokens: 500, outputTokens: 50, preparedCalls: 1, preparedUsed: 1}}
		b.requeue(key, failed)
		p := b.pending[key]
		if p.tier != compaction.TierSoft || p.usage != "0.72" || p.last != newer {
			t.Errorf("newer turn lost: tier %s usage %s last %s", p.tier, p.usage, p.last.ID)
		}
		if want := (tierCounts{warn: 2, soft: 1, full: 1}); p.counts != want {
			t.Errorf("counts %+v, want %+v", p.counts, want)
		}
		if p.offloadedCount != 4 || p.offloadedBytes != 310 {
			t.Errorf("offloaded %d/%d, want 4/310", p.offloadedCount, p.offloadedBytes)
		}
		if want := (summarizerWork{calls: 3, inputTokens: 1500, outputTokens: 150, preparedCalls: 2, preparedUsed: 1, preparedWasted: 1,
			preparedWastedTokens: 400, deferred: 1}); p.summarizer != want {
			t.Errorf("summarizer %+v, want %+v", p.summarizer, want)
		}
	})
	t.Run("only offloads since", func(t *testing.T) {
		b := New(Config{})
		b.pending[key] = &pendingStatus{uid: "u1", offloadedCount: 1, offloadedBytes: 10}
		b.requeue(key, failed)
		p := b.pending[key]
		if !p.turn || p.tier != compaction.TierWarn || p.usage != "0.61" || p.last != older {
			t.Errorf("the failed turn was dropped: %+v", p)
		}
	})
	t.Run("session re-created", func(t *testing.T) {
		b := New(Config{})
		fresh := &pendingStatus{uid: "u2", turn: true, tier: compaction.TierNone, usage: "0.10"}
		b.pending[key] = fresh
		b.requeue(key, failed)
		if p := b.pending[key]; p != fresh || p.counts != (tierCounts{}) || p.summarizer != (summarizerWork{}) {
			t.Errorf("the old session's numbers leaked into the new one: %+v", p)
		}
	})
}

// TestRecordStatusSummarizerUsage: RecordTurn adds up the summarizer work of every record,
// including turns whose tier is None that are not due for a usage write (the counters are
// kept, the turn is not), and reports the calibrated usage that chose the tier.
func TestRecordStatusSummarizerUsage(t *testing.T) {
	b := New(Config{UsageInterval: time.Hour})
	obj := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u1"}}
	sess := Session{Obj: obj}
	key := types.NamespacedName{Namespace: "ns", Name: "s"}

	full := &compaction.CompactionRecord{ID: "full", Tier: compaction.TierFull, TokensBefore: 80000, TokensAfter: 40000,
		Calibration: 1.1, UsageBefore: 0.88, UsageAfter: 0.44, SummarizerCalls: 1, SummarizerInputTokens: 1200, SummarizerOutputTokens: 150}
	b.RecordTurn(sess, turn(full))
	p := b.pending[key]
	if p == nil || p.tier != compaction.TierFull || p.usage != "0.88" || p.last != full {
		t.Fatalf("after a Full compaction: %+v, want tier Full, usage 0.88 (calibrated), the record", p)
	}
	// A None turn, due (the first of the session): the turn is noted, its usage computed from
	// the estimate when the record has no calibration.
	b.RecordTurn(sess, turn(&compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 41000, TokensAfter: 41000}))
	if p.tier != compaction.TierNone || p.usage != "0.41" || p.last != full {
		t.Errorf("after a None turn: tier %s usage %s, want None 0.41 and the Full record kept", p.tier, p.usage)
	}
	// A None turn not due, with summarizer work: counted, the turn is not noted.
	b.RecordTurn(sess, turn(&compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 42000, TokensAfter: 42000,
		Calibration: 1, UsageBefore: 0.42, SummarizerCalls: 1, SummarizerInputTokens: 300, SummarizerOutputTokens: 30}))
	// A None turn not due, without: nothing.
	b.RecordTurn(sess, turn(&compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 43000, TokensAfter: 43000}))
	b.RecordTurn(sess, turn(&compaction.CompactionRecord{Tier: compaction.TierSoft, TokensBefore: 72000, TokensAfter: 45000,
		SummarizerCalls: 2, SummarizerInputTokens: 800, SummarizerOutputTokens: 90}))
	if want := (summarizerWork{calls: 4, inputTokens: 2300, outputTokens: 270}); p.summarizer != want {
		t.Errorf("summarizer %+v, want %+v", p.summarizer, want)
	}
	if p.tier != compaction.TierSoft || p.usage != "0.72" {
		t.Errorf("tier %s usage %s, want Soft 0.72", p.tier, p.usage)
	}
	if want := (tierCounts{soft: 1, full: 1}); p.counts != want {
		t.Errorf("counts %+v, want %+v", p.counts, want)
	}
}

// TestRecordStatusSkipsWhatStatusShows: a turn that changed nothing and whose tier and usage
// the session's status already shows queues no write, unless a change of the session is
// still waiting (the turn is newer and must win), this replica wrote the status just before
// and the cached copy is not that write yet, or the turn's summarizer work must be counted;
// a compaction is always queued.
func TestRecordStatusSkipsWhatStatusShows(t *testing.T) {
	b := New(Config{}) // UsageInterval 0: every turn is due
	obj := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u1"},
		Status: compactionv1alpha1.AgentSessionStatus{Tier: compactionv1alpha1.TierNone, ContextUsage: "0.41"}}
	sess := Session{Obj: obj}
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	none := func(tokens int) *compaction.CompactionRecord {
		return &compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: tokens, TokensAfter: tokens}
	}

	b.RecordTurn(sess, turn(none(41000)))
	if p := b.pending[key]; p != nil {
		t.Fatalf("a turn the status already shows was queued: %+v", p)
	}
	b.RecordTurn(sess, turn(&compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 41000, TokensAfter: 41000,
		SummarizerCalls: 1, SummarizerInputTokens: 300, SummarizerOutputTokens: 30}))
	if p := b.pending[key]; p == nil || p.summarizer.calls != 1 {
		t.Fatalf("a turn with summarizer work was not counted: %+v", p)
	}
	delete(b.pending, key)

	b.RecordTurn(sess, turn(none(42000)))
	p := b.pending[key]
	if p == nil || p.usage != "0.42" {
		t.Fatalf("a turn with a new usage: %+v, want 0.42 queued", p)
	}
	// The status still says 0.41 and 0.42 waits: a turn back at 0.41 is newer and is queued.
	b.RecordTurn(sess, turn(none(41000)))
	if p := b.pending[key]; p == nil || p.usage != "0.41" {
		t.Fatalf("a turn behind a pending change: %+v, want 0.41 queued", p)
	}
	delete(b.pending, key)
	// Just after this replica wrote the status, the cached copy may not show that write yet
	// (it is another resourceVersion): the turn is queued.
	b.wrote(key, time.Now(), "7")
	b.RecordTurn(sess, turn(none(41000)))
	if p := b.pending[key]; p == nil || p.usage != "0.41" {
		t.Fatalf("a turn right after a write: %+v, want 0.41 queued", p)
	}
	delete(b.pending, key)
	// Once the cached copy is that write, the turn is skipped again.
	obj.ResourceVersion = "7"
	b.RecordTurn(sess, turn(none(41000)))
	if p := b.pending[key]; p != nil {
		t.Fatalf("a turn the cached copy of the last write shows was queued: %+v", p)
	}
	// While a write of the session is in flight, the cached copy may be older than it.
	b.written[key] = statusWrite{at: time.Now()}
	b.RecordTurn(sess, turn(none(41000)))
	if p := b.pending[key]; p == nil {
		t.Fatal("a turn during a write in flight was skipped")
	}
	delete(b.pending, key)
	delete(b.written, key)

	warn := &compaction.CompactionRecord{Tier: compaction.TierWarn, TokensBefore: 41000, TokensAfter: 30000,
		Offloaded: []compaction.OffloadEntry{{ToolCallID: "c1", Bytes: 44000}}}
	obj.Status.Tier = compactionv1alpha1.TierWarn
	b.RecordTurn(sess, turn(warn))
	if p := b.pending[key]; p == nil || p.last != warn || p.counts.warn != 1 {
		t.Fatalf("a compaction was not queued: %+v", p)
	}
}

// TestSummarizerUsageCountsThrottled: a compaction summarized extractively because the
// session's summarizer budget was used up is counted in status.summarizer.throttled.
func TestSummarizerUsageCountsThrottled(t *testing.T) {
	var total summarizerWork
	for _, rec := range []*compaction.CompactionRecord{
		{Tier: compaction.TierFull, SummarizerCalls: 1, SummarizerInputTokens: 900, SummarizerOutputTokens: 100},
		{Tier: compaction.TierFull, SummarizerThrottled: true},
		{Tier: compaction.TierSoft, SummarizerThrottled: true},
	} {
		total.add(summarizerUsage(rec))
	}
	if want := (summarizerWork{calls: 1, inputTokens: 900, outputTokens: 100, throttled: 2}); total != want {
		t.Errorf("status.summarizer %+v, want %+v", total, want)
	}
}

// TestRecordStatusCountsPrepared: the summaries made off the turn (issue 29) are counted
// from the records: a summarization started ahead on a None turn (counted even when that
// turn is not due for a usage write, and without replacing the usage written last), a
// crossing that used it, one that could not wait (deferred) and started one late, and one
// that merged the late one and discarded a stale one.
func TestRecordStatusCountsPrepared(t *testing.T) {
	b := New(Config{UsageInterval: time.Hour})
	obj := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u1"}}
	sess := Session{Obj: obj}
	key := types.NamespacedName{Namespace: "ns", Name: "s"}

	b.RecordTurn(sess, turn(&compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 55000, TokensAfter: 55000})) // due: the first
	b.RecordTurn(sess, turn(&compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 61000, TokensAfter: 61000, OffTurnWork: compaction.OffTurnWork{PreparedStarted: "ahead"}}))
	p := b.pending[key]
	if p == nil || p.summarizer != (summarizerWork{preparedCalls: 1}) || p.usage != "0.55" {
		t.Fatalf("after a None turn that started a summary ahead: %+v, want 1 prepared call and the usage of the due turn (0.55)", p)
	}
	for _, rec := range []*compaction.CompactionRecord{
		{Tier: compaction.TierSoft, TokensBefore: 71000, TokensAfter: 48000, SummarizerCalls: 1, SummarizerInputTokens: 1000,
			SummarizerOutputTokens: 100, OffTurnWork: compaction.OffTurnWork{PreparedUsed: 1, PreparedCovered: 20}},
		{Tier: compaction.TierFull, TokensBefore: 81000, TokensAfter: 45000, OffTurnWork: compaction.OffTurnWork{SummarizerDeferred: true, PreparedStarted: "late"}},
		{Tier: compaction.TierSoft, TokensBefore: 72000, TokensAfter: 47000, SummarizerCalls: 2, SummarizerInputTokens: 1600,
			SummarizerOutputTokens: 200,
			OffTurnWork:            compaction.OffTurnWork{PreparedUsed: 1, PreparedWasted: 1, PreparedWastedTokens: 700, PreparedLateMerged: true}},
	} {
		b.RecordTurn(sess, turn(rec))
	}
	want := summarizerWork{calls: 3, inputTokens: 2600, outputTokens: 300, preparedCalls: 2, preparedUsed: 2, preparedWasted: 1,
		preparedWastedTokens: 700, deferred: 1}
	if p.summarizer != want {
		t.Errorf("summarizer %+v, want %+v", p.summarizer, want)
	}
	if want := (tierCounts{soft: 2, full: 1}); p.counts != want {
		t.Errorf("counts %+v, want %+v", p.counts, want)
	}

	// Into the status: added to what it holds, an absent counter left absent while 0.
	st := compactionv1alpha1.SummarizerUsage{Calls: ptr.To[int64](5), PreparedUsed: ptr.To[int64](4)}
	addSummarizerUsage(&st, p.summarizer)
	if want := (compactionv1alpha1.SummarizerUsage{Calls: ptr.To[int64](8), InputTokens: ptr.To[int64](2600), OutputTokens: ptr.To[int64](300),
		PreparedCalls: ptr.To[int64](2), PreparedUsed: ptr.To[int64](6), PreparedWasted: ptr.To[int64](1),
		PreparedWastedTokens: ptr.To[int64](700), Deferred: ptr.To[int64](1)}); !reflect.DeepEqual(st, want) {
		t.Errorf("status.summarizer %+v, want %+v", st, want)
	}
	// A negative count (never written by the engine) would fail every status write: 0.
	if w := summarizerUsage(&compaction.CompactionRecord{OffTurnWork: compaction.OffTurnWork{PreparedUsed: -1, PreparedWasted: -2, PreparedWastedTokens: -3}}); w != (summarizerWork{}) {
		t.Errorf("negative counts made %+v", w)
	}
}

// A session's usage is due once per interval; other sessions are paced apart, and an
// interval of 0 never holds a write back.
func TestUsageMarksPaceEachSession(t *testing.T) {
	t.Parallel()
	var u usageMarks
	const interval = 50 * time.Millisecond
	if !u.due("a", interval) || u.due("a", interval) {
		t.Fatal("want the first turn of a due and the second held back")
	}
	if !u.due("b", interval) {
		t.Error("session b held back by a's write")
	}
	time.Sleep(interval + 10*time.Millisecond)
	if !u.due("a", interval) {
		t.Error("a still held back after its interval")
	}
	var none usageMarks
	for range 2 {
		if !none.due("a", 0) {
			t.Error("interval 0 held a write back")
		}
	}
}

// TestStatusAnchorsAreCamelCase: the engine names anchors in snake_case (the summaries and
// records keep that); status.anchors uses the API's CamelCase values, and ParseAnchorType
// reads both.
func TestStatusAnchorsAreCamelCase(t *testing.T) {
	in := make([]compaction.Anchor, 0, len(compaction.AnchorTypes))
	for _, typ := range compaction.AnchorTypes {
		in = append(in, compaction.Anchor{Type: typ, Content: "some " + string(typ)})
	}
	got := statusAnchors(in)
	want := []compactionv1alpha1.AnchorType{compactionv1alpha1.AnchorUserIntent, compactionv1alpha1.AnchorExecutionProgress,
		compactionv1alpha1.AnchorKeyDecision, compactionv1alpha1.AnchorTriedSolution, compactionv1alpha1.AnchorNextStep}
	if len(got) != len(want) {
		t.Fatalf("%d anchors, want %d: %+v", len(got), len(want), got)
	}
	for i, a := range got {
		if a.Type != want[i] || a.Content != "some "+string(compaction.AnchorTypes[i]) {
			t.Errorf("anchor %d = %+v, want type %s", i, a, want[i])
		}
		if back, ok := compactionv1alpha1.ParseAnchorType(string(compaction.AnchorTypes[i])); !ok || back != want[i] {
			t.Errorf("ParseAnchorType(%q) = %q, %v", compaction.AnchorTypes[i], back, ok)
		}
		if same, ok := compactionv1alpha1.ParseAnchorType(string(want[i])); !ok || same != want[i] {
			t.Errorf("ParseAnchorType(%q) = %q, %v", want[i], same, ok)
		}
	}
	if _, ok := compactionv1alpha1.ParseAnchorType("wish_list"); ok {
		t.Error("ParseAnchorType accepted an unknown type")
	}
}

// TestStatusTakePacesEachSession: a session's pending change is taken for a write unless its
// status was written less than the interval ago; then it waits, under any newer change, while
// other sessions' changes are taken. All of them are taken at shutdown, and an interval of
// 0 never holds one back.
func TestStatusTakePacesEachSession(t *testing.T) {
	b := New(Config{})
	a, c := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "c"}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const interval = 5 * time.Second
	queue := func(key types.NamespacedName, warn int64) {
		b.mu.Lock()
		defer b.mu.Unlock()
		p := b.pending[key]
		if p == nil {
			p = &pendingStatus{uid: "u-" + types.UID(key.Name)}
			b.pending[key] = p
		}
		p.counts.warn += warn
	}
	take := func(at time.Time, all bool, wantTaken []types.NamespacedName, wantWaiting int) map[types.NamespacedName]*pendingStatus {
		t.Helper()
		due, waiting := b.take(at, interval, all)
		if len(due) != len(wantTaken) || waiting != wantWaiting {
			t.Fatalf("at %s: took %v, %d waiting; want %v and %d", at.Sub(now), due, waiting, wantTaken, wantWaiting)
		}
		for _, key := range wantTaken {
			if due[key] == nil {
				t.Fatalf("at %s: %s not taken", at.Sub(now), key)
			}
		}
		return due
	}

	queue(a, 1)
	take(now, false, []types.NamespacedName{a}, 0) // never written: at once
	b.wrote(a, now, "1")
	queue(a, 1)
	queue(c, 1)
	take(now.Add(time.Second), false, []types.NamespacedName{c}, 1) // a was written 1 s ago
	if w := b.written[c]; w.rv != "" || !w.at.Equal(now.Add(time.Second)) {
		t.Fatalf("c taken: %+v, want it marked in flight", w)
	}
	b.forget(c) // its write found nothing to change
	if _, ok := b.written[c]; ok {
		t.Fatal("c's in-flight mark outlived a write that wrote nothing")
	}
	queue(a, 2)
	take(now.Add(4*time.Second), false, nil, 1)
	due := take(now.Add(interval), false, []types.NamespacedName{a}, 0)
	if got := due[a].counts.warn; got != 3 {
		t.Fatalf("a's waiting changes add up to %d Warn compactions, want 3", got)
	}
	if w, ok := b.written[a]; len(b.written) != 1 || !ok || w.rv != "" {
		t.Fatalf("written %+v past the interval, want only a's in-flight mark", b.written)
	}
	// A failed write is retried at the next flush, not after an interval.
	b.requeue(a, due[a])
	take(now.Add(interval), false, []types.NamespacedName{a}, 0)

	b.wrote(a, now.Add(interval), "2")
	queue(a, 1)
	take(now.Add(interval+time.Second), true, []types.NamespacedName{a}, 0) // shutdown: all
	b.wrote(a, now.Add(interval+time.Second), "3")
	queue(a, 1)
	if due, waiting := b.take(now.Add(interval+time.Second), 0, false); len(due) != 1 || waiting != 0 {
		t.Fatalf("interval 0: took %d, %d waiting; want 1 and 0", len(due), waiting)
	}
}
