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
	out, err := req.(*openAIRequest).rewrite(req.history())
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
	req, err := openAIProtocol{}.decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	history := req.history()
	if err := compaction.Validate(history); err != nil {
		t.Fatalf("the engine refuses the decoded history: %v", err)
	}
	roles := make([]compaction.Role, 0, len(history))
	for _, m := range history {
		roles = append(roles, m.Role)
	}
	if want := []compaction.Role{"system", "system", "user", "assistant", "system", "user"}; !slices.Equal(roles, want) {
		t.Fatalf("the engine sees roles %v, want %v", roles, want)
	}
	out, err := req.(*openAIRequest).rewrite(history)
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
	out, err = req.(*openAIRequest).rewrite(view)
	if err != nil {
		t.Fatal(err)
	}
	if got := sentMessages(t, out); len(got) != 4 || got[0] != `{"content":"Be brief.","role":"developer"}` || got[1] != `{"content":"Use tools.","role":"system"}` {
		t.Errorf("the view is sent as\n%s", strings.Join(got, "\n"))
	}
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
