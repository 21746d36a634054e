package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestPruneDropsProbesOfVanishedPolicies(t *testing.T) {
	now := time.Now()
	c := &PolicyChecker{ProbeInterval: time.Minute, RetryInterval: 10 * time.Second}
	c.probes = map[types.UID]probeResult{
		"live":     {at: now.Add(-time.Minute)},     // due for its next probe
		"retrying": {at: now.Add(-2 * time.Minute)}, // still within 3 intervals
		"gone":     {at: now.Add(-4 * time.Minute)}, // not probed for 4 intervals
	}
	c.pruneLocked(now)
	for uid, want := range map[types.UID]bool{"live": true, "retrying": true, "gone": false} {
		if _, ok := c.probes[uid]; ok != want {
			t.Errorf("probe %s kept = %v, want %v", uid, ok, want)
		}
	}
}
