package compaction

import (
	"testing"
)

// TestSessionBudgetIDReserved: the budget's ID is a valid store ID under its session, and
// no caller can name its conversation.
func TestSessionBudgetIDReserved(t *testing.T) {
	id := SessionBudgetID("sess")
	if err := ValidateSessionID(id); err != nil {
		t.Fatalf("ValidateSessionID(%q): %v", id, err)
	}
	base, conv := SplitSessionID(id)
	if base != "sess" || conv == "" {
		t.Fatalf("SplitSessionID(%q) = %q, %q", id, base, conv)
	}
	if err := ValidateConversationID(conv); err == nil {
		t.Fatalf("ValidateConversationID(%q) accepted the reserved budget conversation", conv)
	}
	if err := ValidateSessionID("sess/conversations/.other"); err == nil {
		t.Fatal("another '.' conversation was accepted")
	}
}
