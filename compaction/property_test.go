package compaction

import (
	"math/rand/v2"
	"testing"
)

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
