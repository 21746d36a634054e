package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/proxy"
)

// recallFact is a detail of an early tool result that no summary keeps (a plain config line
// among others): once compaction has summarized that turn away, the model gets it back only
// through the archive.
const recallFact = "deploy key fingerprint: SHA256:q7RecallZ9x"

// recallThroughProxy: an OpenAI SDK agent loop whose early tool result holds recallFact runs
// until a compaction has summarized that result away; the compaction message the model sees
// ends with the command that searches the archive on the proxy; the agent's tool (a shell)
// runs it with the model's words, gets the archived result, and the fact reaches the model
// on the next request.
func recallThroughProxy(t *testing.T, s *suite) {
	const name = "agent-recall"
	up, proxyURL, reg := s.proxied(t, name, 40)
	sdk := openai.NewClient(option.WithBaseURL(proxyURL+"/v1/"), option.WithAPIKey("sk-agent-key"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(agentSystem), openai.UserMessage("Fix the tests, then deploy"),
	}}
	recalled, recallTurn := "", 0
	for turn := 1; ; turn++ {
		resp, err := sdk.Chat.Completions.New(ctx, params)
		testenv.Must(t, err)
		msg := resp.Choices[0].Message
		params.Messages = append(params.Messages, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			break
		}
		out := toolOutput("tests", turn)
		last := up.requests()[turn-1]
		switch {
		case turn == 2:
			out = "$ cat deploy/config.yaml\nregion: eu-west-1\nreplicas: 3\n" + recallFact + "\nimage: app:1.8.2\n"
		case recalled == "" && turn > 2 && !bytes.Contains(last.raw, []byte("SHA256:q7RecallZ9x")):
			// The model read the compaction message, misses the fingerprint and searches
			// the archive with the command the message ends with.
			cmd := searchCommand(t, last)
			target := strings.Replace(cmd, "q=WORDS", "q="+url.QueryEscape("key fingerprint"), 1)
			res, err := http.Get(target)
			testenv.Must(t, err)
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			var hist compactclient.HistoryResponse
			if res.StatusCode != http.StatusOK || json.Unmarshal(body, &hist) != nil || len(hist.Messages) == 0 {
				t.Fatalf("search %s: %s %.300q", target, res.Status, body)
			}
			if m := hist.Messages[0]; m.Role != compaction.RoleTool || !strings.Contains(m.Message.Content, recallFact) {
				t.Fatalf("the search found %+v, want the turn-2 tool result", m)
			}
			recalled, recallTurn, out = string(body), turn, string(body)
		}
		params.Messages = append(params.Messages, openai.ToolMessage(out, msg.ToolCalls[0].ID))
	}
	if recalled == "" {
		t.Fatal("no compaction ever summarized the fingerprint away: the test proves nothing")
	}
	// The search result, with the fact, reaches the model on the next request.
	reqs := up.requests()
	if len(reqs) <= recallTurn || !strings.Contains(textOfTool(reqs[recallTurn]), recallFact) {
		t.Errorf("the request after the search does not carry the recalled fact")
	}
	var n float64
	mfs, err := reg.Gather()
	testenv.Must(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "compaction_proxy_history_reads_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	if n != 1 {
		t.Errorf("%v history reads counted, want 1", n)
	}
	t.Logf("fact recalled at turn %d of %d", recallTurn, len(reqs))
}

// searchCommand is the URL of the archive search the compaction message of r ends with.
func searchCommand(t *testing.T, r received) string {
	t.Helper()
	for _, m := range r.messages {
		c := textOf(m["content"])
		if m["role"] != "user" || !strings.HasPrefix(c, compaction.CompactionHeader) {
			continue
		}
		_, cmd, ok := strings.Cut(c, "search them with: curl -s '")
		target, _, _ := strings.Cut(cmd, "'")
		if !ok || !strings.Contains(target, proxy.HistorySearchPath+"?conversation=") || !strings.Contains(target, "q=WORDS") {
			t.Fatalf("the compaction message names no search command on the proxy:\n%s", c)
		}
		return target
	}
	t.Fatalf("the view lost the fact but holds no compaction message: %.500s", r.raw)
	return ""
}

// textOfTool is the text of r's tool results, concatenated.
func textOfTool(r received) string {
	var b strings.Builder
	for _, m := range r.messages {
		if m["role"] == "tool" {
			b.WriteString(textOf(m["content"]))
		}
	}
	return b.String()
}
