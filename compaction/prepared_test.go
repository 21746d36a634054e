package compaction

import (
	"testing"
)

func TestAppliesTo(t *testing.T) {
	st := &State{PrefixHash: "c", Lineage: []string{"a", "b"}}
	for applies, want := range map[string]bool{"c": true, "b": true, "a": true, "z": false, "": false} {
		if got := appliesTo(st, applies); got != want {
			t.Errorf("appliesTo(%q) = %v, want %v", applies, got, want)
		}
	}
	if !appliesTo(&State{}, "") {
		t.Error("a summary made at watermark 0 no longer applies to the state at watermark 0")
	}
}

func TestPreparedIDs(t *testing.T) {
	for _, id := range []string{"sess", ConversationSessionID("sess", "conv-1")} {
		p := PreparedID(id)
		if err := ValidateSessionID(p); err != nil {
			t.Errorf("PreparedID(%q) = %q: %v", id, p, err)
		}
		if base, _ := SplitSessionID(p); base != "sess" {
			t.Errorf("PreparedID(%q) = %q is not under the session", id, p)
		}
	}
	if PreparedID("sess") == PreparedID(ConversationSessionID("sess", "c")) {
		t.Error("two conversations share a PreparedID")
	}
	if ValidateConversationID(".prepared") == nil {
		t.Error("a caller may name the reserved conversation")
	}
}
