package compaction

import (
	"testing"
)

func ids(msgs []Message) []string {
	var out []string
	for _, m := range msgs {
		switch {
		case m.Role == RoleTool:
			out = append(out, "r:"+m.ToolCallID)
		case len(m.ToolCalls) > 0:
			s := "c:"
			for _, tc := range m.ToolCalls {
				s += tc.ID
			}
			out = append(out, s)
		default:
			out = append(out, string(m.Role)+":"+m.Content)
		}
	}
	return out
}

func TestRepairToolPairs(t *testing.T) {
	in := []Message{
		result("gone", "orphan result first"),
		call("", "a", "b"), result("a", "1"), // b's result missing: b is dropped from the call
		call("", "c"),          // no result at all, no content: message dropped
		call("keep text", "d"), // no result, has content: kept without tool calls
		user("u"),
		call("", "e"), result("e", "5"), result("e", "dup"),
	}
	got := ids(repairToolPairs(in))
	want := []string{"c:a", "r:a", "assistant:keep text", "user:u", "c:e", "r:e"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if len(in[1].ToolCalls) != 2 {
		t.Fatal("repair modified its input")
	}
	if hasOrphans(repairToolPairs(in)) {
		t.Fatal("repaired history still has orphans")
	}
}

func TestSplitKeepsParallelGroupsTogether(t *testing.T) {
	msgs := []Message{sys("s"), user("u"), call("", "a", "b", "c"), result("a", "1"), result("b", "2"), result("c", "3"), asst("x")}
	// MinTail 3 would cut between b and c: the cut must move back to the call.
	prefix, head, tail := splitHeadTail(msgs, 3)
	if len(prefix) != 1 || len(head) != 1 || len(tail) != 5 {
		t.Fatalf("prefix %d head %d tail %d", len(prefix), len(head), len(tail))
	}
	if len(tail[0].ToolCalls) != 3 {
		t.Fatalf("tail starts with %v", ids(tail[:1]))
	}
	// Half split inside a group moves back to the call, or forward when the call is first.
	head2 := []Message{call("", "a", "b"), result("a", "1"), result("b", "2"), user("u")}
	oldest, recent := splitHalf(head2)
	if len(oldest) != 3 || len(recent) != 1 {
		t.Fatalf("oldest %v recent %v", ids(oldest), ids(recent))
	}
	// Not enough messages for a head.
	_, head, tail = splitHeadTail(msgs[:3], 6)
	if len(head) != 0 || len(tail) != 2 {
		t.Fatalf("short history: head %d tail %d", len(head), len(tail))
	}
}

func TestTokenBudgetCompactor(t *testing.T) {
	big := string(make([]byte, 8000))
	msgs := []Message{sys("s"), user("task"), call("", "a"), result("a", big), call("", "b", "c"), result("b", big), result("c", "small"), asst("done"), user("next")}
	fb := TokenBudgetCompactor{Budget: 3000, MinTailMessages: 2}
	out := fb.Compact(msgs)
	if EstimateTokens(out) > 3000 || hasOrphans(out) || out[0].Role != RoleSystem {
		t.Fatalf("Compact: %d tokens, orphans %v: %v", EstimateTokens(out), hasOrphans(out), ids(out))
	}
	if last := out[len(out)-1]; last.Content != "next" {
		t.Fatalf("Compact lost the newest message: %v", ids(out))
	}
	if fits := fb.Compact(msgs[:2]); len(fits) != 2 {
		t.Fatal("Compact changed a history that fits")
	}
	force := TokenBudgetCompactor{Budget: 100000, MinTailMessages: 3}.CompactForce(msgs)
	// MinTail 3 cuts after result b... moves back to the parallel call b,c.
	if got := ids(force); len(got) != 7 || got[2] != "c:bc" {
		t.Fatalf("CompactForce: %v", got)
	}
	tiny := TokenBudgetCompactor{Budget: 700, MinTailMessages: 4}.CompactForce(msgs)
	if EstimateTokens(tiny) > 700 || hasOrphans(tiny) {
		t.Fatalf("CompactForce did not shrink oversized tail messages: %d tokens", EstimateTokens(tiny))
	}
}
