package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
)

// rich is a request with every kind of block and field this package handles, and some it
// does not know.
const rich = `{
  "model": "claude-sonnet-4-5",
  "max_tokens": 1024,
  "stream": true,
  "tools": [{"name": "bash", "description": "run a command", "input_schema": {"type": "object"}}],
  "metadata": {"user_id": "u-1"},
  "system": [{"type": "text", "text": "You are a coding agent. Use <tools> & be brief.", "cache_control": {"type": "ephemeral"}}],
  "messages": [
    {"role": "user", "content": "Fix the failing test in pkg/parse."},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "Run the tests first.", "signature": "sig-1"},
      {"type": "text", "text": "Running the tests."},
      {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "go test ./pkg/parse"}}
    ]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "--- FAIL: TestParse\n    parse_test.go:12: got 1, want 2", "is_error": true},
      {"type": "text", "text": "Also keep the API stable."},
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    ]},
    {"role": "assistant", "content": [
      {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "cat pkg/parse/parse.go"}},
      {"type": "tool_use", "id": "toolu_3", "name": "bash", "input": {}}
    ]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "package parse"}, {"type": "text", "text": "func Parse() int { return 1 }"}]},
      {"type": "tool_result", "tool_use_id": "toolu_3", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}], "cache_control": {"type": "ephemeral"}},
      {"type": "future_block", "payload": {"x": 1}}
    ]},
    {"role": "assistant", "content": "The bug is the constant."}
  ]
}`

func decode(t *testing.T, body string) *Request {
	t.Helper()
	r, err := DecodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameJSON compares two documents as values: the encoder may drop whitespace.
func sameJSON(t *testing.T, got, want []byte) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

func TestDecodeMapsEveryBlock(t *testing.T) {
	r := decode(t, rich)
	got := make([]string, 0, len(r.Messages))
	for _, m := range r.Messages {
		d := string(m.Role)
		switch {
		case m.ToolCallID != "":
			d += " result " + m.ToolCallID + ": " + m.Content
			if m.ContentParts != nil {
				d += "parts"
			}
		case len(m.ToolCalls) > 0:
			d += " " + m.Content + " calls"
			for _, tc := range m.ToolCalls {
				d += " " + tc.ID + tc.Function.Arguments
			}
		case m.ContentParts != nil:
			d += " parts"
		default:
			d += " " + m.Content
		}
		got = append(got, d)
	}
	want := []string{
		"system parts",
		"user Fix the failing test in pkg/parse.",
		`assistant Running the tests. calls toolu_1{"cmd": "go test ./pkg/parse"}`,
		"tool result toolu_1: --- FAIL: TestParse\n    parse_test.go:12: got 1, want 2",
		"user parts",
		`assistant  calls toolu_2{"cmd": "cat pkg/parse/parse.go"} toolu_3{}`,
		"tool result toolu_2: package parse\nfunc Parse() int { return 1 }",
		"tool result toolu_3: parts",
		"user parts",
		"assistant The bug is the constant.",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEncodeUnchangedIsTheRequest: a view that is the whole conversation encodes to the
// request itself: every block, unknown ones and thinking included, every field.
func TestEncodeUnchangedIsTheRequest(t *testing.T) {
	r := decode(t, rich)
	out, err := r.Encode(r.Messages)
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, out, []byte(rich)) {
		t.Errorf("encoded\n%s\nwant the request", out)
	}
	if !strings.Contains(string(out), "Use <tools> & be brief.") {
		t.Errorf("the encoder escaped the request's <, > or &: %s", out)
	}
}

// TestEncodeAfterTheCompactionAPI: the view comes back from the compaction API through a JSON
// encoder (compacted, HTML-escaped parts); kept messages still match their sources.
func TestEncodeAfterTheCompactionAPI(t *testing.T) {
	r := decode(t, rich)
	wire, err := json.Marshal(r.Messages)
	if err != nil {
		t.Fatal(err)
	}
	var back []compaction.Message
	if err := json.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	out, err := r.Encode(back)
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, out, []byte(rich)) {
		t.Errorf("encoded\n%s\nwant the request", out)
	}
}

func TestEncodeRebuildsWhatACompactionWrote(t *testing.T) {
	r := decode(t, rich)
	view := []compaction.Message{
		r.Messages[0],
		{Role: compaction.RoleUser, Content: "[summary] The task: fix TestParse."},
		r.Messages[5], // the assistant with toolu_2 and toolu_3
		{Role: compaction.RoleTool, ToolCallID: "toolu_2", Content: "[offloaded: 2 lines]"},
		r.Messages[7],
		r.Messages[8],
		r.Messages[9],
	}
	out, err := r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Stream || !strings.Contains(string(got.System), "cache_control") {
		t.Errorf("lost request fields: %s", out)
	}
	roles := make([]string, 0, len(got.Messages))
	for _, m := range got.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "user,assistant,user,assistant" {
		t.Fatalf("roles %v, want user,assistant,user,assistant:\n%s", roles, out)
	}
	if string(got.Messages[0].Content) != `"[summary] The task: fix TestParse."` {
		t.Errorf("summary message: %s", got.Messages[0].Content)
	}
	var blocks []map[string]any
	if err := json.Unmarshal(got.Messages[2].Content, &blocks); err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 || blocks[0]["type"] != "tool_result" || blocks[0]["content"] != "[offloaded: 2 lines]" ||
		blocks[1]["tool_use_id"] != "toolu_3" || blocks[1]["cache_control"] == nil || blocks[2]["type"] != "future_block" {
		t.Errorf("the user message after the tool calls: %s", got.Messages[2].Content)
	}
}

// TestEncodeKeepsIsErrorOfAnOffloadedResult: a rebuilt tool_result keeps the request's
// is_error: the model must still see that the command failed.
func TestEncodeKeepsIsErrorOfAnOffloadedResult(t *testing.T) {
	r := decode(t, rich)
	view := []compaction.Message{r.Messages[1], r.Messages[2],
		{Role: compaction.RoleTool, ToolCallID: "toolu_1", Content: "[offloaded]"}, r.Messages[4]}
	out, err := r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `{"content":"[offloaded]","is_error":true,"tool_use_id":"toolu_1","type":"tool_result"}`) {
		t.Errorf("rebuilt tool_result lost is_error: %s", out)
	}
}

// TestCompactedByTheEngine runs the real engine over a long Anthropic tool loop and checks
// that every view it makes encodes to a request the Messages API accepts: roles alternate,
// the conversation starts with the user, and every tool_result answers a tool_use of the
// assistant message right before it.
func TestCompactedByTheEngine(t *testing.T) {
	msgs := make([]string, 1, 81)
	msgs[0] = `{"role": "user", "content": "Refactor the parser; keep the API stable."}`
	for i := range 40 {
		msgs = append(msgs,
			fmt.Sprintf(`{"role": "assistant", "content": [{"type": "text", "text": "Step %d."}, {"type": "tool_use", "id": "toolu_%d", "name": "bash", "input": {"cmd": "cat file%d.go"}}]}`, i, i, i),
			fmt.Sprintf(`{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_%d", "content": %q}]}`, i, strings.Repeat(fmt.Sprintf("line %d of file%d.go\n", i, i), 25)))
	}
	body := `{"model": "m", "max_tokens": 100, "system": "You are a coding agent.", "messages": [` + strings.Join(msgs, ",") + `]}`
	r := decode(t, body)
	c, err := compaction.NewProgressiveCompactor(compaction.Config{ContextWindow: 6000, MinTailMessages: 6},
		compaction.WithStore(mem.New()), compaction.WithSessionID("anthropic"))
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[compaction.Tier]bool{}
	for n := 3; n <= len(r.Messages); n += 2 { // the system prompt, then a user turn each time
		sub := &Request{Messages: r.Messages[:n], fields: r.fields, sources: r.sources, toolResults: r.toolResults}
		view, rec, err := c.CompactWithRecord(context.Background(), sub.Messages)
		if err != nil {
			t.Fatal(err)
		}
		tiers[rec.Tier] = true
		out, err := sub.Encode(view)
		if err != nil {
			t.Fatalf("turn %d: %v", n, err)
		}
		if err := checkValid(out); err != nil {
			t.Fatalf("turn %d (%s): %v\n%s", n, rec.Tier, err, out)
		}
	}
	t.Logf("tiers over the loop: %v", tiers)
	if !tiers[compaction.TierWarn] || !tiers[compaction.TierFull] && !tiers[compaction.TierSoft] {
		t.Errorf("the loop never compacted (tiers %v): the test checks nothing", tiers)
	}
}

// claudeCodeEnv is the environment block Claude Code sends as a system message inside
// "messages" (2.1.x).
const claudeCodeEnv = `<env>Working directory: /work/repo\nIs directory a git repo: Yes\nPlatform: linux</env>`

// TestSystemMessagesInMessages: Claude Code's requests carry a system message inside
// "messages"; it is accepted, written back in place, and kept in every view the engine
// makes of a long loop, as a system message of its own.
func TestSystemMessagesInMessages(t *testing.T) {
	const turns = 40
	msgs := make([]string, 0, 2+2*turns)
	msgs = append(msgs,
		`{"role": "user", "content": [{"type": "text", "text": "Refactor the parser; keep the API stable.", "cache_control": {"type": "ephemeral"}}]}`,
		`{"role": "system", "content": "`+claudeCodeEnv+`"}`,
	)
	for i := range turns {
		msgs = append(msgs,
			fmt.Sprintf(`{"role": "assistant", "content": [{"type": "thinking", "thinking": "t%d", "signature": "s%d"}, {"type": "tool_use", "id": "toolu_%d", "name": "Bash", "input": {"command": "cat file%d.go"}}]}`, i, i, i, i),
			fmt.Sprintf(`{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_%d", "content": %q}]}`, i, strings.Repeat(fmt.Sprintf("line %d of file%d.go\n", i, i), 25)))
	}
	body := `{"model": "claude-sonnet-4-5", "max_tokens": 100, "thinking": {"type": "adaptive"}, "context_management": {"edits": []}, "output_config": {"effort": "high"}, "system": [{"type": "text", "text": "You are Claude Code."}], "messages": [` + strings.Join(msgs, ",") + `]}`
	r := decode(t, body)
	if got := r.Messages[2]; got.Role != compaction.RoleUser || !got.Pinned || got.Content != strings.ReplaceAll(claudeCodeEnv, `\n`, "\n") {
		t.Fatalf("the system message of messages decoded as %+v, want a pinned user message with its text", got)
	}
	out, err := r.Encode(r.Messages)
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, out, []byte(body)) {
		t.Fatalf("encoded\n%s\nwant the request", out)
	}
	c, err := compaction.NewProgressiveCompactor(compaction.Config{ContextWindow: 6000, MinTailMessages: 6},
		compaction.WithStore(mem.New()), compaction.WithSessionID("claude-code"))
	if err != nil {
		t.Fatal(err)
	}
	compacted := 0
	for n := 5; n <= len(r.Messages); n += 2 { // up to a tool result each time
		sub := &Request{Messages: r.Messages[:n], fields: r.fields, sources: r.sources, toolResults: r.toolResults}
		view, rec, err := c.CompactWithRecord(context.Background(), sub.Messages)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Tier == compaction.TierSoft || rec.Tier == compaction.TierFull {
			compacted++
		}
		out, err := sub.Encode(view)
		if err != nil {
			t.Fatalf("turn %d: %v", n, err)
		}
		if err := checkValid(out); err != nil {
			t.Fatalf("turn %d (%s): %v\n%s", n, rec.Tier, err, out)
		}
		if !strings.Contains(string(out), `{"content":"`+claudeCodeEnv+`","role":"system"}`) {
			t.Fatalf("turn %d (%s): the system message of messages is not in the request as it came:\n%s", n, rec.Tier, out)
		}
		for _, field := range []string{`"thinking":{"type": "adaptive"}`, `"context_management":{"edits": []}`, `"output_config":{"effort": "high"}`} {
			if !strings.Contains(string(out), field) {
				t.Fatalf("turn %d: %s is not passed through byte for byte:\n%s", n, field, out)
			}
		}
	}
	if compacted == 0 {
		t.Fatal("the loop never summarized: the test checks nothing")
	}
}

// checkValid checks what the Messages API requires of a conversation.
func checkValid(body []byte) error {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	if len(req.Messages) == 0 || req.Messages[0].Role != "user" {
		return errors.New("the conversation does not start with a user message")
	}
	var calls map[string]bool
	// A system message inside "messages" stands anywhere, and the API combines consecutive
	// turns of one role, so only an alternation without one between is checked.
	prev := -1
	for i, m := range req.Messages {
		if m.Role == "system" {
			prev = -1
			continue
		}
		if prev >= 0 && m.Role == req.Messages[prev].Role {
			return fmt.Errorf("messages %d and %d are both %s", prev, i, m.Role)
		}
		prev = i
		var blocks []block
		_ = json.Unmarshal(m.Content, &blocks) // a string content has no blocks
		if m.Role == "assistant" {
			calls = map[string]bool{}
			for _, b := range blocks {
				if b.Type == "tool_use" {
					calls[b.ID] = true
				}
			}
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" && !calls[b.ToolUseID] {
				return fmt.Errorf("message %d answers %s, which the assistant before it did not call", i, b.ToolUseID)
			}
		}
	}
	return nil
}

func TestDecodeRefusesBadRequests(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":                   `{"messages": [`,
		"not an object":              `[1, 2]`,
		"null":                       `null`,
		"no messages":                `{"model": "m"}`,
		"messages not an array":      `{"messages": {"role": "user"}}`,
		"unknown role":               `{"messages": [{"role": "developer", "content": "hi"}]}`,
		"system content a number":    `{"messages": [{"role": "system", "content": 1}]}`,
		"content a number":           `{"messages": [{"role": "user", "content": 7}]}`,
		"block without type":         `{"messages": [{"role": "user", "content": [{"text": "hi"}]}]}`,
		"block not an object":        `{"messages": [{"role": "user", "content": ["hi"]}]}`,
		"tool_result without id":     `{"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}`,
		"tool_result from assistant": `{"messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]}]}`,
		"tool_use without name":      `{"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a"}]}]}`,
		"system a number":            `{"system": 1, "messages": []}`,
		"invalid UTF-8":              "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}",
	} {
		if _, err := DecodeRequest([]byte(body)); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
}

func TestEncodeRefusesAnUnknownRole(t *testing.T) {
	r := decode(t, `{"messages": [{"role": "user", "content": "hi"}]}`)
	if _, err := r.Encode([]compaction.Message{{Role: "developer", Content: "x"}}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Encode with role developer: %v, want ErrInvalidRequest", err)
	}
}

// BenchmarkDecodeEncode: a 200-turn tool loop (about 400 KB) decoded and encoded back, the
// work a proxy adds to each request besides the compaction itself.
func BenchmarkDecodeEncode(b *testing.B) {
	msgs := make([]string, 1, 401)
	msgs[0] = `{"role": "user", "content": "Refactor the parser."}`
	for i := range 200 {
		msgs = append(msgs,
			fmt.Sprintf(`{"role": "assistant", "content": [{"type": "text", "text": "Step %d."}, {"type": "tool_use", "id": "toolu_%d", "name": "bash", "input": {"cmd": "cat f%d.go"}}]}`, i, i, i),
			fmt.Sprintf(`{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_%d", "content": %q}]}`, i, strings.Repeat("some output line\n", 100)))
	}
	body := []byte(`{"model": "m", "max_tokens": 100, "system": "You are a coding agent.", "messages": [` + strings.Join(msgs, ",") + `]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := DecodeRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Encode(r.Messages); err != nil {
			b.Fatal(err)
		}
	}
}
