package compaction

import (
	"slices"
	"strings"
	"testing"
)

// TestHistoryMatcher: substring search is case-insensitive and literal; a regex is RE2 and
// case-insensitive; the text searched is the content, parts' text, tool calls and IDs.
func TestHistoryMatcher(t *testing.T) {
	msgs := []Message{
		{Role: RoleUser, Content: "Error: TestParse FAILED (a.b*c)"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_9", Function: FunctionCall{Name: "bash", Arguments: `{"cmd":"go test ./parser"}`}}}},
		{Role: RoleUser, ContentParts: []byte(`[{"type":"text","text":"see the screenshot of the login page"},{"type":"image_url","image_url":{"url":"data:image/png;base64,QUJD"}}]`)},
		{Role: RoleTool, ToolCallID: "call_9", Content: "ok"},
	}
	for _, tc := range []struct {
		q     string
		regex bool
		want  []int
	}{
		{"testparse failed", false, []int{0}},
		{"A.B*C", false, []int{0}},
		{"a.b", true, []int{0}},
		{`go test \./\w+`, true, []int{1}},
		{"LOGIN PAGE", false, []int{2}},
		{"base64", false, nil},
		{"call_9", false, []int{1, 3}},
		{`(?-i)error`, true, nil},
	} {
		m, err := NewHistoryMatcher(tc.q, tc.regex)
		if err != nil {
			t.Fatalf("%q: %v", tc.q, err)
		}
		got := make([]int, 0, len(msgs))
		for i := range msgs {
			if m.Match(&msgs[i]) {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q (regex %v) matches %v, want %v", tc.q, tc.regex, got, tc.want)
		}
	}
	for _, bad := range []struct {
		q     string
		regex bool
	}{{"", false}, {strings.Repeat("a", MaxHistoryQueryBytes+1), false}, {"(unclosed", true}, {"a{2000}", true}} {
		if _, err := NewHistoryMatcher(bad.q, bad.regex); err == nil {
			t.Errorf("NewHistoryMatcher(%.20q, %v) accepted", bad.q, bad.regex)
		}
	}
}

// TestArchiveKeyLayout: archive keys round-trip through their names, list in range order,
// and sit under exactly one of their session's prefixes (so DeleteSession finds them), a
// conversation's under its session's, never under another session's.
func TestArchiveKeyLayout(t *testing.T) {
	if k := ArchiveKey("s", 1, 40); k != "archive/s/0000000001-0000000040.jsonl" {
		t.Errorf("ArchiveKey = %q", k)
	}
	for _, sp := range []ArchiveSpan{{0, 1}, {1, 40}, {9, 10}, {10, 12}, {MaxArchiveIndex - 1, MaxArchiveIndex}} {
		if got, ok := ParseArchiveName(ArchiveName(sp.From, sp.To)); !ok || got != sp {
			t.Errorf("ParseArchiveName(ArchiveName(%v)) = %v, %v", sp, got, ok)
		}
	}
	if ArchiveName(9, 10) >= ArchiveName(10, 12) || ArchiveName(1, 40) >= ArchiveName(1, 60) {
		t.Error("archive names do not sort by From, then To")
	}
	for _, bad := range []string{"", "1-40.jsonl", "0000000001-0000000040.json", "0000000040-0000000001.jsonl", "0000000001-0000000001.jsonl",
		"000000000a-0000000040.jsonl", "0000000001_0000000040.jsonl", "9999999999-9999999999.jsonl", "0000000001-9999999999.jsonl",
		".tmp-0000000001-0000000040.jsonl", "conversations/", "-000000001-0000000040.jsonl"} {
		if sp, ok := ParseArchiveName(bad); ok {
			t.Errorf("ParseArchiveName(%q) = %v, want not an archive", bad, sp)
		}
	}
	for _, id := range []string{"s", ConversationSessionID("s", "x")} {
		k := ArchiveKey(id, 1, 2)
		in := 0
		for _, p := range SessionPrefixes("s") {
			if strings.HasPrefix(k, p) {
				in++
			}
		}
		if in != 1 {
			t.Errorf("archive key %q is under %d of session s's prefixes %q, want 1", k, in, SessionPrefixes("s"))
		}
		for _, other := range []string{"s.json", "s2", "x", "s.jsonl"} {
			for _, p := range SessionPrefixes(other) {
				if strings.HasPrefix(k, p) {
					t.Errorf("archive key %q of session s is under session %s's %q", k, other, p)
				}
			}
		}
	}
}
