package compaction_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// TestPropertiesOverGeneratedHistories checks the engine's invariants on many random
// histories, at random usage ratios covering every tier and random MinTail values:
// system message kept, tail verbatim (all tiers but Emergency, which may shorten it),
// no orphaned tool call or result, input unchanged, output estimate <= input estimate,
// offload idempotent.
func TestPropertiesOverGeneratedHistories(t *testing.T) {
	seen := map[compaction.Tier]int{}
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7919))
		msgs := genHistory(r, 5+r.IntN(80))
		usage := 0.3 + r.Float64()*0.9
		cfg := compaction.DefaultConfig(windowFor(msgs, usage))
		cfg.MinTailMessages = 1 + r.IntN(10)
		cfg.OffloadThreshold = 1000 + r.IntN(8000)
		st := newStore()
		c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(st), compaction.WithSessionID("p"))
		if err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, msgs)
		out, rec, err := c.CompactWithRecord(context.Background(), msgs)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		seen[rec.Tier]++
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d tier %s minTail %d: "+format, append([]any{seed, rec.Tier, cfg.MinTailMessages}, args...)...)
		}
		if !bytes.Equal(before, snapshot(t, msgs)) {
			fail("input modified")
		}
		if out[0].Role != compaction.RoleSystem || out[0].Content != msgs[0].Content {
			fail("system message lost")
		}
		if compaction.HasOrphans(out) {
			fail("orphaned tool pair in %v", ids(out))
		}
		if compaction.EstimateTokens(out) > compaction.EstimateTokens(msgs) {
			fail("output %d tokens > input %d", compaction.EstimateTokens(out), compaction.EstimateTokens(msgs))
		}
		if err := compaction.Validate(out); err != nil {
			fail("output invalid: %v", err)
		}
		if rec.Tier != compaction.TierEmergency {
			n := cfg.MinTailMessages
			if n > len(msgs)-1 {
				n = len(msgs) - 1
			}
			for i := 1; i <= n; i++ {
				a, b := out[len(out)-i], msgs[len(msgs)-i]
				if a.Content != b.Content || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) {
					fail("tail message -%d changed", i)
				}
			}
		} else if last := out[len(out)-1]; last.Role != msgs[len(msgs)-1].Role {
			fail("emergency lost the newest message")
		}
		if rec.Tier == compaction.TierNone && len(out) != len(msgs) {
			fail("TierNone changed the history")
		}
		out2, rec2, err := c.CompactWithRecord(context.Background(), msgs)
		if err != nil {
			fail("second compaction: %v", err)
		}
		for id, n := range st.PutsByID() {
			if n > 1 {
				fail("tool result %s offloaded %d times", id, n)
			}
		}
		if rec.Tier == compaction.TierWarn && rec2.Tier == compaction.TierWarn && !bytes.Equal(snapshot(t, out), snapshot(t, out2)) {
			fail("Warn is not idempotent")
		}
	}
	for tier := compaction.TierNone; tier <= compaction.TierEmergency; tier++ {
		if seen[tier] == 0 {
			t.Errorf("no generated case reached tier %s: %v", tier, seen)
		}
	}
}
