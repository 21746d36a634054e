package compaction_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// TestWindowTooSmallForTheFixedPart is issue 27 item 7: a system prompt alone over the
// Emergency threshold would make every turn Emergency. The session is compacted once, then
// each turn is left as it is, with the record saying why, instead of rewriting the view
// (and the provider's prompt cache) on every turn.
func TestWindowTooSmallForTheFixedPart(t *testing.T) {
	ctx := context.Background()
	const window = 1000
	system := sys(strings.Repeat("You are a coding agent with many tools. ", 100)) // about 1,000 tokens
	c, err := compaction.NewProgressiveCompactor(compaction.Config{ContextWindow: window, MinTailMessages: 4}, compaction.WithStore(newStore()), compaction.WithSessionID("small"))
	if err != nil {
		t.Fatal(err)
	}
	const turns = 12
	history := make([]compaction.Message, 0, 2+2*turns)
	history = append(history, system, user("fix the tests"))
	emergencies, skipped := 0, 0
	var last []compaction.Message
	for i := range turns {
		id := fmt.Sprintf("c%d", i)
		history = append(history, call("", id), result(id, fmt.Sprintf("output %d: %s", i, strings.Repeat("x", 200))))
		view, rec, err := c.CompactWithRecord(ctx, history)
		if err != nil {
			t.Fatal(err)
		}
		if !rec.WindowTooSmall || rec.FixedTokens < window*95/100 {
			t.Fatalf("turn %d: record WindowTooSmall %v, FixedTokens %d; want true and the system prompt's size", i, rec.WindowTooSmall, rec.FixedTokens)
		}
		switch rec.Tier {
		case compaction.TierEmergency:
			if rec.Summarized > 0 {
				emergencies++
			}
			if skipped > 0 {
				t.Fatalf("turn %d: Emergency again after turns were left alone", i)
			}
		case compaction.TierNone:
			if emergencies == 0 {
				t.Fatalf("turn %d: left alone before the first compaction", i)
			}
			skipped++
			if len(rec.Notes) == 0 || !strings.Contains(rec.Notes[len(rec.Notes)-1], "window too small") {
				t.Fatalf("turn %d: notes %q, want the reason", i, rec.Notes)
			}
			// The view is the last one plus what the turn added: nothing was rewritten.
			if len(view) != len(last)+2 || !view[len(view)-3].Equal(&last[len(last)-1]) {
				t.Fatalf("turn %d: the view was rewritten (%d messages after %d)", i, len(view), len(last))
			}
		default:
			t.Fatalf("turn %d: tier %s", i, rec.Tier)
		}
		last = view
	}
	// The first turn is Emergency too, with nothing old enough to summarize.
	if emergencies != 1 || skipped != 10 {
		t.Errorf("%d Emergency compactions that summarized and %d turns left alone, want 1 and 10", emergencies, skipped)
	}
}
