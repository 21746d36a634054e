package compaction

import (
	"fmt"
)

// Tier is the intensity of a compaction, chosen from the usage ratio.
type Tier int

// The tiers of the spec, from lightest to heaviest.
const (
	TierNone      Tier = iota // below Warn: nothing to do
	TierWarn                  // offload large tool results in the head
	TierSoft                  // offload + summarize the oldest half of the head
	TierFull                  // offload + summarize the whole head into anchors + prose
	TierEmergency             // forced truncation, no summarizer call
)

var tierNames = [...]string{"None", "Warn", "Soft", "Full", "Emergency"}

// String returns the tier's name as used in records, status and events.
func (t Tier) String() string {
	if t < 0 || int(t) >= len(tierNames) {
		return fmt.Sprintf("Tier(%d)", int(t))
	}
	return tierNames[t]
}

// parseTier is the inverse of String.
func parseTier(s string) (Tier, error) {
	for i, n := range tierNames {
		if n == s {
			return Tier(i), nil
		}
	}
	return TierNone, fmt.Errorf("unknown tier %q (want None, Warn, Soft, Full or Emergency)", s)
}

// MarshalText writes the tier as its name, so JSON carries "Full", not 3.
func (t Tier) MarshalText() ([]byte, error) {
	if t < 0 || int(t) >= len(tierNames) {
		return nil, fmt.Errorf("invalid tier %d", int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText reads a tier name.
func (t *Tier) UnmarshalText(b []byte) error {
	v, err := parseTier(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}
