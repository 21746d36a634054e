package compaction

import (
	"testing"
)

// Tests of the economics of a compaction (issue 13): the target a Soft or Full compaction
// converges to, the least saving worth a compaction, the calibration of the estimate from
// the caller's reported prompt sizes, and the summarizer's accounting.

// Config.NextTier: the tier above and the tokens left before it.
func TestNextTier(t *testing.T) {
	cfg := DefaultConfig(1000)
	for _, c := range []struct {
		tokens int
		tier   Tier
		left   int
	}{
		{0, TierWarn, 600}, {599, TierWarn, 1}, {600, TierSoft, 100}, {699, TierSoft, 1}, {700, TierFull, 100},
		{800, TierEmergency, 150}, {949, TierEmergency, 1}, {950, TierNone, 0}, {5000, TierNone, 0},
	} {
		if tier, left := cfg.NextTier(c.tokens); tier != c.tier || left != c.left {
			t.Errorf("NextTier(%d) = %s, %d; want %s, %d", c.tokens, tier, left, c.tier, c.left)
		}
	}
	// Thresholds that fall between tokens: the first token count at or above them.
	if tier, left := DefaultConfig(1001).NextTier(600); tier != TierWarn || left != 1 {
		t.Errorf("window 1001: %s, %d", tier, left)
	}
	if tier, left := (Config{}).NextTier(10); tier != TierNone || left != 0 {
		t.Errorf("no window: %s, %d", tier, left)
	}
}
