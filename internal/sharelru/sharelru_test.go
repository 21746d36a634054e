package sharelru

import (
	"fmt"
	"testing"
	"time"
)

// TestShareLRU: a group at its cap evicts its own least recently used entry, never
// another group's; past the size the least recently used of all goes; idle entries expire.
func TestShareLRU(t *testing.T) {
	c := New[string, int](10, 0, 3, 5)
	c.Add("other", 0, "s2", "ns")
	for i := range 20 {
		c.Add(fmt.Sprintf("a%d", i), i, "s1", "ns")
	}
	if c.GroupLen(0, "s1") != 3 || !c.Contains("other") || !c.Contains("a19") || c.Contains("a16") {
		t.Errorf("session cap: keys %v", c.Keys())
	}
	// The namespace's cap (5) across its sessions.
	for i := range 4 {
		c.Add(fmt.Sprintf("b%d", i), i, fmt.Sprintf("s%d", 10+i), "ns")
	}
	if c.GroupLen(1, "ns") != 5 {
		t.Errorf("namespace cap: %d entries, keys %v", c.GroupLen(1, "ns"), c.Keys())
	}
	// Past the size: the least recently used of all.
	for i := range 12 {
		c.Add(fmt.Sprintf("x%d", i), i, fmt.Sprintf("g%d", i), fmt.Sprintf("n%d", i))
	}
	if c.Len() != 10 {
		t.Errorf("%d entries, want 10", c.Len())
	}
	now := time.Now()
	e := New[string, int](10, time.Minute, 5)
	e.now = func() time.Time { return now }
	e.Add("a", 1, "g")
	now = now.Add(30 * time.Second)
	e.Add("b", 2, "g")
	if _, ok := e.Get("a"); !ok {
		t.Error("a used 30 s ago expired")
	}
	now = now.Add(61 * time.Second)
	if _, ok := e.Get("b"); ok || e.Len() != 0 {
		t.Errorf("entries idle for over a minute kept: %v", e.Keys())
	}
}
