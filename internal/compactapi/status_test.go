package compactapi

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

func TestRequeueKeepsEveryCounter(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	older := &compaction.CompactionRecord{ID: "older"}
	newer := &compaction.CompactionRecord{ID: "newer"}
	failed := &pendingStatus{uid: "u1", turn: true, tier: compaction.TierWarn, usage: "0.61", last: older,
		counts: compactionv1alpha1.TierCounts{Warn: 2, Full: 1}, offloadedCount: 3, offloadedBytes: 300}

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
			counts: compactionv1alpha1.TierCounts{Soft: 1}, offloadedCount: 1, offloadedBytes: 10}
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
		if p := b.pending[key]; p != fresh || p.counts != (compactionv1alpha1.TierCounts{}) {
			t.Errorf("the old session's numbers leaked into the new one: %+v", p)
		}
	})
}
