package compaction_test

import (
	"context"
	"errors"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// TestStateRevalidationStartsFromTheStoredState: a compactor kept between requests with
// WithStateRevalidation starts each call from the stored state, as one built per request
// does: a compaction whose save failed is not carried into the next call, and what another
// compactor saved is.
func TestStateRevalidationStartsFromTheStoredState(t *testing.T) {
	ctx := context.Background()
	// About 9,000 estimated tokens in a window of 10,000: Full.
	history := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000, 4000}, 500)
	cfg := compaction.DefaultConfig(10000)
	for _, tc := range []struct {
		name        string
		revalidate  bool
		wantCarried bool
	}{
		{"kept between calls", false, true},
		{"revalidated", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore()
			opts := []compaction.Option{compaction.WithStore(store), compaction.WithSessionID("s")}
			if tc.revalidate {
				opts = append(opts, compaction.WithStateRevalidation())
			}
			c, err := compaction.NewProgressiveCompactor(cfg, opts...)
			if err != nil {
				t.Fatal(err)
			}
			store.FailSave(errors.New("storage down"))
			_, first, err := c.CompactWithRecord(ctx, history)
			if err != nil || first.WatermarkAfter == 0 {
				t.Fatalf("first call: watermark %d, %v; want a compaction", first.WatermarkAfter, err)
			}
			store.FailSave(nil)
			_, second, err := c.CompactWithRecord(ctx, history)
			if err != nil {
				t.Fatal(err)
			}
			if carried := second.WatermarkBefore == first.WatermarkAfter; carried != tc.wantCarried {
				t.Errorf("second call started from watermark %d after an unsaved compaction to %d: carried %v, want %v",
					second.WatermarkBefore, first.WatermarkAfter, carried, tc.wantCarried)
			}
		})
	}

	// Another compactor's save is seen by the next call of a revalidating one.
	store := newStore()
	a, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(store), compaction.WithSessionID("s"), compaction.WithStateRevalidation())
	if err != nil {
		t.Fatal(err)
	}
	b, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(store), compaction.WithSessionID("s"), compaction.WithStateRevalidation())
	if err != nil {
		t.Fatal(err)
	}
	if _, rec, err := a.CompactWithRecord(ctx, history[:4]); err != nil || rec.Tier != compaction.TierNone {
		t.Fatalf("a, short history: %v %v", rec, err)
	}
	_, byB, err := b.CompactWithRecord(ctx, history)
	if err != nil || byB.WatermarkAfter == 0 {
		t.Fatalf("b: watermark %d, %v", byB.WatermarkAfter, err)
	}
	_, byA, err := compactDelta(ctx, a, compaction.Delta{Watermark: byB.WatermarkAfter, PrefixHash: byB.PrefixHash},
		append(history[:1:1], history[byB.WatermarkAfter:]...), false)
	if err != nil || byA.WatermarkBefore != byB.WatermarkAfter {
		t.Fatalf("a after b's save: %v, %v; want it to start from b's watermark %d", byA, err, byB.WatermarkAfter)
	}
}
