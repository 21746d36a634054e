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
