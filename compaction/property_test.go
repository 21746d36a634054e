package compaction

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
)

// TestPropertiesOverGeneratedHistories checks the engine's invariants on many random
// histories, at random usage ratios covering every tier and random MinTail values:
// system message kept, tail verbatim (all tiers but Emergency, which may shorten it),
// no orphaned tool call or result, input unchanged, output estimate <= input estimate,
// offload idempotent.
func TestPropertiesOverGeneratedHistories(t *testing.T) {
	seen := map[Tier]int{}
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7919))
		msgs := genHistory(r, 5+r.IntN(80))
		usage := 0.3 + r.Float64()*0.9
		cfg := DefaultConfig(windowFor(msgs, usage))
		cfg.MinTailMessages = 1 + r.IntN(10)
		cfg.OffloadThreshold = 1000 + r.IntN(8000)
		st := newMemStore()
		c, err := NewProgressiveCompactor(cfg, WithStore(st), WithSessionID("p"))
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
		if out[0].Role != RoleSystem || out[0].Content != msgs[0].Content {
			fail("system message lost")
		}
		if hasOrphans(out) {
			fail("orphaned tool pair in %v", ids(out))
		}
		if EstimateTokens(out) > EstimateTokens(msgs) {
			fail("output %d tokens > input %d", EstimateTokens(out), EstimateTokens(msgs))
		}
		if err := Validate(out); err != nil {
			fail("output invalid: %v", err)
		}
		if rec.Tier != TierEmergency {
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
		if rec.Tier == TierNone && len(out) != len(msgs) {
			fail("TierNone changed the history")
		}
		out2, rec2, err := c.CompactWithRecord(context.Background(), msgs)
		if err != nil {
			fail("second compaction: %v", err)
		}
		for id, n := range st.putsByID {
			if n > 1 {
				fail("tool result %s offloaded %d times", id, n)
			}
		}
		if rec.Tier == TierWarn && rec2.Tier == TierWarn && !bytes.Equal(snapshot(t, out), snapshot(t, out2)) {
			fail("Warn is not idempotent")
		}
	}
	for tier := TierNone; tier <= TierEmergency; tier++ {
		if seen[tier] == 0 {
			t.Errorf("no generated case reached tier %s: %v", tier, seen)
		}
	}
}

// FuzzRepairToolPairs cuts a valid history at arbitrary points and checks that repair leaves
// no orphan, never adds a message and keeps every message that was not part of a broken pair.
func FuzzRepairToolPairs(f *testing.F) {
	f.Add(uint64(1), uint16(3), uint16(9))
	f.Add(uint64(42), uint16(0), uint16(40))
	f.Fuzz(func(t *testing.T, seed uint64, from, to uint16) {
		r := rand.New(rand.NewPCG(seed, 1))
		msgs := genHistory(r, 30)
		lo, hi := int(from)%len(msgs), int(to)%(len(msgs)+1)
		if lo > hi {
			lo, hi = hi, lo
		}
		cut := msgs[lo:hi]
		out := repairToolPairs(cut)
		if hasOrphans(out) {
			t.Fatalf("orphans after repair of [%d:%d]: %v", lo, hi, ids(out))
		}
		if len(out) > len(cut) {
			t.Fatal("repair added messages")
		}
		plain := 0
		for _, m := range cut {
			if m.Role != RoleTool && len(m.ToolCalls) == 0 {
				plain++
			}
		}
		kept := 0
		for _, m := range out {
			if m.Role != RoleTool && len(m.ToolCalls) == 0 {
				kept++
			}
		}
		if kept < plain {
			t.Fatal("repair dropped a message that had no tool pair")
		}
	})
}
