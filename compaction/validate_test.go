package compaction

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", MaxToolCallIDLength+1)
	cases := []struct {
		name string
		msgs []Message
		want string // substring of the error; "" = valid
	}{
		{"valid", []Message{sys("s"), user("u"), call("", "a", "b"), result("a", "1"), result("b", "2"), asst("done")}, ""},
		{"pending call allowed", []Message{user("u"), call("", "a")}, ""},
		{"unknown role", []Message{{Role: "robot", Content: "x"}}, `unknown role "robot"`},
		{"missing role", []Message{{Content: "x"}}, "missing role"},
		{"orphan result", []Message{user("u"), result("zz", "x")}, "orphaned tool result"},
		{"result before call", []Message{result("a", "x"), call("", "a")}, "orphaned tool result"},
		{"double result", []Message{call("", "a"), result("a", "1"), result("a", "2")}, "second tool result"},
		{"duplicate call id", []Message{call("", "a"), result("a", "1"), call("", "a")}, "duplicate tool call id"},
		{"tool without id", []Message{call("", "a"), {Role: RoleTool, Content: "x"}}, "without tool_call_id"},
		{"invalid utf8", []Message{user("ok\xff")}, "not valid UTF-8"},
		{"id with newline", []Message{call("", "a\nb")}, "control or space"},
		{"id too long", []Message{call("", long)}, "longer than"},
		{"tool_calls on user", []Message{{Role: RoleUser, ToolCalls: []ToolCall{{ID: "a"}}}}, "only assistant"},
		{"tool_call_id on user", []Message{{Role: RoleUser, ToolCallID: "a"}}, "only tool messages"},
		{"bad call type", []Message{{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a", Type: "magic"}}}}, "unsupported type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.msgs)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestSafeKey(t *testing.T) {
	for _, id := range []string{"call_abc-123", "../../etc/passwd", "a/b", "..", ".", "x%2Fy", "é", "", "a b"} {
		k := SafeKey(id)
		if strings.ContainsAny(k, "/.") || k == "" {
			t.Errorf("SafeKey(%q) = %q is not safe", id, k)
		}
	}
	if SafeKey("call_abc") != "call_abc" {
		t.Error("plain IDs must stay readable")
	}
	if SafeKey("a/b") == SafeKey("a%2Fb") {
		t.Error("SafeKey is not injective")
	}
	long1, long2 := strings.Repeat("é", 120)+"1", strings.Repeat("é", 120)+"2"
	if k := SafeKey(long1); len(k) > 200 || !strings.Contains(k, "~") || k == SafeKey(long2) {
		t.Errorf("long IDs: %q (%d bytes) vs %q", k, len(k), SafeKey(long2))
	}
}

func TestValidateSessionID(t *testing.T) {
	for _, ok := range []string{"6f1c2d3e-aaaa-bbbb-cccc-0123456789ab", "local", "a.b_c"} {
		if err := ValidateSessionID(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "..", "../x", "a/b", ".hidden", strings.Repeat("a", 200), "a b"} {
		if err := ValidateSessionID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestConversationIDs(t *testing.T) {
	for _, ok := range []string{"a", "sub-agent_2", "retry.3", "A.b-c_d", strings.Repeat("z", MaxConversationIDLength)} {
		if err := ValidateConversationID(ok); err != nil {
			t.Errorf("conversation %q rejected: %v", ok, err)
		}
		id := ConversationSessionID("6f1c2d3e-aaaa", ok)
		if err := ValidateSessionID(id); err != nil {
			t.Errorf("session id %q of conversation %q rejected: %v", id, ok, err)
		}
		if s, c := SplitSessionID(id); s != "6f1c2d3e-aaaa" || c != ok {
			t.Errorf("SplitSessionID(%q) = %q, %q", id, s, c)
		}
	}
	for _, bad := range []string{"", ".", "..", ".x", "../x", "a/b", "a..b", "%2F", "ü", "a b", "a\x00", strings.Repeat("z", MaxConversationIDLength+1)} {
		if err := ValidateConversationID(bad); err == nil {
			t.Errorf("conversation %q accepted", bad)
		}
		if id := ConversationSessionID("s", bad); bad != "" && ValidateSessionID(id) == nil {
			t.Errorf("session id %q of conversation %q accepted", id, bad)
		}
	}
	// The default conversation is the session itself: same ID, same keys as before
	// conversations existed.
	if id := ConversationSessionID("s", ""); id != "s" || StateKey(id) != "state/s.json" || ToolResultKey(id, "c") != "tool_results/s/c.txt" {
		t.Errorf("default conversation: id %q, keys %q %q", id, StateKey(id), ToolResultKey(id, "c"))
	}
	// A conversation's keys are under its session's prefixes, and no other session's.
	id := ConversationSessionID("s", "x")
	keys := []string{StateKey(id), ToolResultKey(id, "c"), RecordSegmentKey(id, "r")}
	for _, k := range keys {
		in := 0
		for _, p := range SessionPrefixes("s") {
			if strings.HasPrefix(k, p) {
				in++
			}
		}
		if in != 1 {
			t.Errorf("key %q of conversation x is under %d of session s's prefixes %q, want 1", k, in, SessionPrefixes("s"))
		}
		for _, other := range []string{"s.json", "s2", "x"} {
			for _, p := range append(SessionPrefixes(other), StateKey(other)) {
				if strings.HasPrefix(k, p) {
					t.Errorf("key %q of session s's conversation is under session %s's %q", k, other, p)
				}
			}
		}
	}
}

func FuzzSafeKey(f *testing.F) {
	for _, s := range []string{"call_1", "../x", "a/b", "%", "é", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		k := SafeKey(id)
		if k == "" || len(k) > 200 || strings.ContainsAny(k, "/.\\") || strings.Contains(k, "..") {
			t.Fatalf("SafeKey(%q) = %q is not a safe key segment", id, k)
		}
		for i := 0; i < len(k); i++ {
			if !keyByteOK(k[i]) && k[i] != '%' && k[i] != '~' {
				t.Fatalf("SafeKey(%q) = %q holds byte %q", id, k, k[i])
			}
		}
		if got := unSafeKey(k); id != "" && !strings.Contains(k, "~") && got != id {
			t.Fatalf("SafeKey not injective: %q -> %q -> %q", id, k, got)
		}
	})
}

// unSafeKey inverts SafeKey, proving it injective.
func unSafeKey(k string) string {
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		if k[i] == '%' && i+2 < len(k)+0 && i+2 <= len(k)-1 {
			var v byte
			for _, c := range []byte(k[i+1 : i+3]) {
				v <<= 4
				switch {
				case c >= '0' && c <= '9':
					v |= c - '0'
				case c >= 'A' && c <= 'F':
					v |= c - 'A' + 10
				}
			}
			b.WriteByte(v)
			i += 2
			continue
		}
		b.WriteByte(k[i])
	}
	return b.String()
}
