package proxy

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// TestOpenAIRewriteKeepsFieldBytes: the fields a rewrite does not touch keep their value
// bytes, and their keys are not HTML-escaped (<, > and & stay as they are: the same JSON, but
// not what the agent sent). A key is decoded and written again, so one the agent escaped
// itself comes back unescaped.
func TestOpenAIRewriteKeepsFieldBytes(t *testing.T) {
	body := []byte(`{"model":"m","metadata":{"a<b":"x&y"},"x<y>":"<z>","messages":[{"role":"user","content":"hi"}]}`)
	req, err := openAIProtocol{}.decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	out, err := req.rewrite(req.history())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"metadata":{"a<b":"x&y"}`, `"x<y>":"<z>"`, `"model":"m"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("rewritten body %s lacks %s", out, want)
		}
	}
}

// TestOpenAIDeveloperRole: the developer messages OpenAI's reasoning models take (the Vercel
// AI SDK sends its system prompt so for gpt-5) reach the engine as system messages, which
// it accepts, and go upstream as developer messages again, at the start or later in the
// conversation, text or parts; a system message stays one.
func TestOpenAIDeveloperRole(t *testing.T) {
	body := []byte(`{"model":"gpt-5.5","messages":[` +
		`{"role":"developer","content":"Be brief."},` +
		`{"role":"system","content":"Use tools."},` +
		`{"role":"user","content":"Fix the tests."},` +
		`{"role":"assistant","content":"On it."},` +
		`{"role":"developer","content":[{"type":"text","text":"Reminder: run pytest."}]},` +
		`{"role":"user","content":"Go on."}]}`)
	req, history := decodeOpenAI(t, body)
	roles := make([]compaction.Role, 0, len(history))
	for _, m := range history {
		roles = append(roles, m.Role)
	}
	if want := []compaction.Role{"system", "system", "user", "assistant", "system", "user"}; !slices.Equal(roles, want) {
		t.Fatalf("the engine sees roles %v, want %v", roles, want)
	}
	out, err := req.rewrite(history)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sentMessages(t, out), []string{
		`{"content":"Be brief.","role":"developer"}`,
		`{"content":"Use tools.","role":"system"}`,
		`{"content":"Fix the tests.","role":"user"}`,
		`{"content":"On it.","role":"assistant"}`,
		`{"content":[{"type":"text","text":"Reminder: run pytest."}],"role":"developer"}`,
		`{"content":"Go on.","role":"user"}`,
	}; !slices.Equal(got, want) {
		t.Errorf("upstream gets messages\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A view that summarized the later developer message away keeps the first one's role.
	view := []compaction.Message{history[0], history[1], {Role: compaction.RoleUser, Content: "[Context Compaction] ..."}, history[5]}
	out, err = req.rewrite(view)
	if err != nil {
		t.Fatal(err)
	}
	if got := sentMessages(t, out); len(got) != 4 || got[0] != `{"content":"Be brief.","role":"developer"}` || got[1] != `{"content":"Use tools.","role":"system"}` {
		t.Errorf("the view is sent as\n%s", strings.Join(got, "\n"))
	}
}

// TestOpenAITextParts: content given as text parts only (Qwen Code's tool results) is text to
// the engine, which can offload it; a message the view keeps goes upstream with its parts,
// one the compaction rewrote as text; parts with anything else stay parts.
func TestOpenAITextParts(t *testing.T) {
	big := strings.Repeat("step 07 | tests/unit/test_x.py::test_y PASSED\n", 100)
	bigJSON, _ := json.Marshal(big)
	body := []byte(`{"model":"qwen3-coder-plus","messages":[` +
		`{"role":"system","content":"You are Qwen Code."},` +
		`{"role":"user","content":[{"type":"text","text":"Check the logs."}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"run_shell_command","arguments":"{}"}},{"id":"call_2","type":"function","function":{"name":"run_shell_command","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":` + string(bigJSON) + `}]},` +
		`{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"a: "},{"type":"text","text":"ok"}]},` +
		`{"role":"user","content":[{"type":"text","text":"Go on.","cache_control":{"type":"ephemeral"}}]}]}`)
	req, history := decodeOpenAI(t, body)
	if history[3].Content != big || history[3].ContentParts != nil || history[4].Content != "a: ok" || history[1].Content != "Check the logs." {
		t.Fatalf("the engine does not see the text parts as text: %+v", history[3:5])
	}
	if history[5].ContentParts == nil {
		t.Fatal("parts with cache_control became text")
	}
	// As the engine offloads the large result: a new text in its place.
	view := slices.Clone(history)
	view[3].Content = "[Offloaded tool result] ..."
	out, err := req.rewrite(view)
	if err != nil {
		t.Fatal(err)
	}
	got := sentMessages(t, out)
	if want := `{"content":[{"type":"text","text":"Check the logs."}],"role":"user"}`; got[1] != want {
		t.Errorf("the kept user message is sent as %s, want %s", got[1], want)
	}
	if want := `{"content":"[Offloaded tool result] ...","role":"tool","tool_call_id":"call_1"}`; got[3] != want {
		t.Errorf("the offloaded result is sent as %s, want %s", got[3], want)
	}
	if want := `{"content":[{"type":"text","text":"a: "},{"type":"text","text":"ok"}],"role":"tool","tool_call_id":"call_2"}`; got[4] != want {
		t.Errorf("the kept result is sent as %s, want %s", got[4], want)
	}
	if !strings.Contains(got[5], `"cache_control"`) {
		t.Errorf("the parts with cache_control are sent as %s", got[5])
	}
}

// decodeOpenAI decodes a Chat Completions body and checks the engine takes its history.
func decodeOpenAI(t *testing.T, body []byte) (*openAIRequest, []compaction.Message) {
	t.Helper()
	req, err := openAIProtocol{}.decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	history := req.history()
	if err := compaction.Validate(history); err != nil {
		t.Fatalf("the engine refuses the decoded history: %v", err)
	}
	return req.(*openAIRequest), history
}

// sentMessages is each message of a rewritten body, as JSON.
func sentMessages(t *testing.T, body []byte) []string {
	t.Helper()
	var sent struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(sent.Messages))
	for i, m := range sent.Messages {
		out[i] = string(m)
	}
	return out
}
