package sources

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

func TestMatch(t *testing.T) {
	ix := New[string]()
	user := compaction.Message{Role: compaction.RoleUser, Content: "hi"}
	parts := compaction.Message{Role: compaction.RoleUser, ContentParts: json.RawMessage(`[ {"type": "text", "text": "a<b"} ]`)}
	call := compaction.Message{Role: compaction.RoleAssistant, ToolCalls: []compaction.ToolCall{{ID: "c1", Function: compaction.FunctionCall{Name: "f", Arguments: "{}"}}}}
	ix.Add(&user, "user-1")
	ix.Add(&parts, "parts")
	ix.Add(&call, "call")
	ix.Add(&user, "user-2") // the same text again, later
	// A view: the compaction's own message, the parts re-encoded (compact, escaped), the
	// call, and the repeated message once.
	reencoded := compaction.Message{Role: compaction.RoleUser, ContentParts: json.RawMessage(`[{"type":"text","text":"a\u003cb"}]`)}
	view := []compaction.Message{{Role: compaction.RoleUser, Content: "[compaction summary]"}, reencoded, call, user}
	got := ix.Match(view)
	if want := []string{"", "parts", "call", "user-2"}; !slices.Equal(got, want) {
		t.Fatalf("Match = %q, want %q", got, want)
	}
	// Twice in the view: both sources, the later one last.
	if got, want := ix.Match([]compaction.Message{user, user}), []string{"user-1", "user-2"}; !slices.Equal(got, want) {
		t.Fatalf("Match of a repeated message = %q, want %q", got, want)
	}
	if p := ix.Latest(&user); p == nil || *p != "user-2" {
		t.Fatalf("Latest = %v, want user-2", p)
	}
	*ix.Latest(&user) = "user-2b"
	if got := ix.Match([]compaction.Message{user}); got[0] != "user-2b" {
		t.Fatalf("a source completed through Latest is not what Match finds: %q", got)
	}
	if ix.Latest(&compaction.Message{Role: compaction.RoleUser, Content: "never added"}) != nil {
		t.Fatal("Latest of a message never added must be nil")
	}
}

func TestFingerprintTellsFieldsApart(t *testing.T) {
	// Length prefixes keep "ab"+"c" and "a"+"bc" apart.
	a := compaction.Message{Role: compaction.RoleTool, Content: "ab", ToolCallID: "c"}
	b := compaction.Message{Role: compaction.RoleTool, Content: "a", ToolCallID: "bc"}
	if fingerprint(&a) == fingerprint(&b) {
		t.Fatal("two different messages share a fingerprint")
	}
	if canonical(json.RawMessage(`not json`)) != "not json" {
		t.Fatal("invalid JSON parts must be fingerprinted as they are")
	}
}
