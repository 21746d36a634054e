package compactapi

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

func TestRequeueKeepsEveryCounter(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	older := &compaction.CompactionRecord{ID: "older"}
	newer := &compaction.CompactionRecord{ID: "newer"}
	failed := &pendingStatus{uid: "u1", turn: true, tier: compaction.TierWarn, usage: "0.61", last: older,
		counts: compactionv1alpha1.TierCounts{Warn: 2, Full: 1}, offloadedCount: 3, offloadedBytes: 300,
		summarizer: compactionv1alpha1.SummarizerUsage{Calls: 1, InputTokens: 1000, OutputTokens: 100}}

	t.Run("nothing newer", func(t *testing.T) {
		b := newStatusBatcher()
		b.requeue(key, failed)
		if b.pending[key] != failed {
			t.Fatal("the failed change is not pending again")
		}
	})
	t.Run("a newer turn", func(t *testing.T) {
		b := newStatusBatcher()
		b.pending[key] = &pendingStatus{uid: "u1", turn: true, tier: compaction.TierSoft, usage: "0.72", last: newer,
			counts: compactionv1alpha1.TierCounts{Soft: 1}, offloadedCount: 1, offloadedBytes: 10,
			summarizer: compactionv1alpha1.SummarizerUsage{Calls: 2, InputTokens: 500, OutputTokens: 50}}
		b.requeue(key, failed)
		p := b.pending[key]
		if p.tier != compaction.TierSoft || p.usage != "0.72" || p.last != newer {
			t.Errorf("newer turn lost: tier %s usage %s last %s", p.tier, p.usage, p.last.ID)
		}
		if want := (compactionv1alpha1.TierCounts{Warn: 2, Soft: 1, Full: 1}); p.counts != want {
			t.Errorf("counts %+v, want %+v", p.counts, want)
		}
		if p.offloadedCount != 4 || p.offloadedBytes != 310 {
			t.Errorf("offloaded %d/%d, want 4/310", p.offloadedCount, p.offloadedBytes)
		}
		if want := (compactionv1alpha1.SummarizerUsage{Calls: 3, InputTokens: 1500, OutputTokens: 150}); p.summarizer != want {
			t.Errorf("summarizer %+v, want %+v", p.summarizer, want)
		}
	})
	t.Run("only offloads since", func(t *testing.T) {
		b := newStatusBatcher()
		b.pending[key] = &pendingStatus{uid: "u1", offloadedCount: 1, offloadedBytes: 10}
		b.requeue(key, failed)
		p := b.pending[key]
		if !p.turn || p.tier != compaction.TierWarn || p.usage != "0.61" || p.last != older {
			t.Errorf("the failed turn was dropped: %+v", p)
		}
	})
	t.Run("session re-created", func(t *testing.T) {
		b := newStatusBatcher()
		fresh := &pendingStatus{uid: "u2", turn: true, tier: compaction.TierNone, usage: "0.10"}
		b.pending[key] = fresh
		b.requeue(key, failed)
		if p := b.pending[key]; p != fresh || p.counts != (compactionv1alpha1.TierCounts{}) || p.summarizer != (compactionv1alpha1.SummarizerUsage{}) {
			t.Errorf("the old session's numbers leaked into the new one: %+v", p)
		}
	})
}

// TestRecordStatusSummarizerUsage: recordStatus adds up the summarizer work of every record,
// including turns whose tier is None that are not due for a usage write (the counters are
// kept, the turn is not), and reports the calibrated usage that chose the tier.
func TestRecordStatusSummarizerUsage(t *testing.T) {
	s := &Server{cfg: Config{UsageInterval: time.Hour}, status: newStatusBatcher()}
	obj := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u1"}}
	sess := &session{obj: obj, cfg: compaction.DefaultConfig(100000)}
	key := types.NamespacedName{Namespace: "ns", Name: "s"}

	full := &compaction.CompactionRecord{ID: "full", Tier: compaction.TierFull, TokensBefore: 80000, TokensAfter: 40000,
		Calibration: 1.1, UsageBefore: 0.88, UsageAfter: 0.44, SummarizerCalls: 1, SummarizerInputTokens: 1200, SummarizerOutputTokens: 150}
	s.recordStatus(sess, full)
	p := s.status.pending[key]
	if p == nil || p.tier != compaction.TierFull || p.usage != "0.88" || p.last != full {
		t.Fatalf("after a Full compaction: %+v, want tier Full, usage 0.88 (calibrated), the record", p)
	}
	// A None turn, due (the first of the session): the turn is noted, its usage computed from
	// the estimate when the record has no calibration.
	s.recordStatus(sess, &compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 41000, TokensAfter: 41000})
	if p.tier != compaction.TierNone || p.usage != "0.41" || p.last != full {
		t.Errorf("after a None turn: tier %s usage %s, want None 0.41 and the Full record kept", p.tier, p.usage)
	}
	// A None turn not due, with summarizer work: counted, the turn is not noted.
	s.recordStatus(sess, &compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 42000, TokensAfter: 42000,
		Calibration: 1, UsageBefore: 0.42, SummarizerCalls: 1, SummarizerInputTokens: 300, SummarizerOutputTokens: 30})
	// A None turn not due, without: nothing.
	s.recordStatus(sess, &compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 43000, TokensAfter: 43000})
	s.recordStatus(sess, &compaction.CompactionRecord{Tier: compaction.TierSoft, TokensBefore: 72000, TokensAfter: 45000,
		SummarizerCalls: 2, SummarizerInputTokens: 800, SummarizerOutputTokens: 90})
	if want := (compactionv1alpha1.SummarizerUsage{Calls: 4, InputTokens: 2300, OutputTokens: 270}); p.summarizer != want {
		t.Errorf("summarizer %+v, want %+v", p.summarizer, want)
	}
	if p.tier != compaction.TierSoft || p.usage != "0.72" {
		t.Errorf("tier %s usage %s, want Soft 0.72", p.tier, p.usage)
	}
	if want := (compactionv1alpha1.TierCounts{Soft: 1, Full: 1}); p.counts != want {
		t.Errorf("counts %+v, want %+v", p.counts, want)
	}
}

// TestSummarizerUsageCountsThrottled: a compaction summarized extractively because the
// session's summarizer budget was used up is counted in status.summarizer.throttled.
func TestSummarizerUsageCountsThrottled(t *testing.T) {
	var total compactionv1alpha1.SummarizerUsage
	for _, rec := range []*compaction.CompactionRecord{
		{Tier: compaction.TierFull, SummarizerCalls: 1, SummarizerInputTokens: 900, SummarizerOutputTokens: 100},
		{Tier: compaction.TierFull, SummarizerThrottled: true},
		{Tier: compaction.TierSoft, SummarizerThrottled: true},
	} {
		addSummarizerUsage(&total, summarizerUsage(rec))
	}
	if want := (compactionv1alpha1.SummarizerUsage{Calls: 1, InputTokens: 900, OutputTokens: 100, Throttled: 2}); total != want {
		t.Errorf("status.summarizer %+v, want %+v", total, want)
	}
}

// A session's None-tier usage is due once per interval; other sessions are paced apart, and
// an interval of 0 never holds a write back.
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
