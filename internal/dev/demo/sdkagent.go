package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/devenv"
	"github.com/harness9/compaction-operator/internal/dev/proc"
)

// sdkSession is the AgentSession of the SDK agent that talks to compaction-proxy.
const sdkSession = "sdk-agent"

// sdkStats is what the SDK agent's run showed.
type sdkStats struct {
	turns                int
	compacted            int   // requests the model received shorter than the agent sent them
	sentBytes, recvBytes int64 // message bytes the agent sent and the model received
	keyPassed            bool  // the model saw the agent's own API key
}

// runSDKAgent runs an agent built on the official OpenAI Go SDK, unmodified, against the
// compaction-proxy binary: only its base URL points at the proxy. The model behind the proxy
// replays the transcript's assistant turns and the agent's tools answer with its tool
// results, so the agent sends what the transcript's agent sent, and the model receives what
// the operator made of it.
func runSDKAgent(ctx context.Context, o Options, env *devenv.Env, c client.Client, history []compaction.Message, say func(string, ...any)) (*sdkStats, error) {
	if err := c.Create(ctx, builder.Session(ns, sdkSession, "demo").Build()); err != nil {
		return nil, fmt.Errorf("create AgentSession %s: %w", sdkSession, err)
	}
	if err := waitReady(ctx, c, sdkSession); err != nil {
		return nil, err
	}
	model := newReplayModel(history)
	upstream := httptest.NewServer(model)
	defer upstream.Close()

	bin := o.ProxyBin
	if bin == "" {
		bin = filepath.Join(o.Root, "bin", "compaction-proxy")
	}
	ports, err := proc.FreeLoopbackPorts(1)
	if err != nil {
		return nil, err
	}
	args := []string{"--listen", ports[0], "--upstream", upstream.URL + "/v1", "--server", env.APIURL,
		"--session", ns + "/" + sdkSession, "--token-file", env.AgentTokenFile, "--ca-file", env.CAFile}
	say("$ compaction-proxy %s", strings.Join(args, " "))
	p, err := proc.Start(exec.Command(bin, args...), 40, nil)
	if err != nil {
		return nil, fmt.Errorf("start %s (make build builds it): %w", bin, err)
	}
	defer func() { _ = p.Stop(5 * time.Second) }()
	base := "http://" + ports[0] + "/v1/"
	if err := waitServing(ctx, base+"models", p); err != nil {
		return nil, err
	}

	// The agent: the SDK's own client and types, nothing of ours.
	sdk := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("sk-demo-agent"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "gpt-demo"}
	st := &sdkStats{}
	seenUser := false
	for _, msg := range history {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		switch msg.Role {
		case compaction.RoleSystem:
			params.Messages = append(params.Messages, openai.SystemMessage(msg.Content))
		case compaction.RoleUser:
			seenUser = true
			params.Messages = append(params.Messages, openai.UserMessage(msg.Content))
		case compaction.RoleTool:
			params.Messages = append(params.Messages, openai.ToolMessage(msg.Content, msg.ToolCallID))
		case compaction.RoleAssistant:
			if !seenUser {
				continue
			}
			resp, err := sdk.Chat.Completions.New(ctx, params)
			if err != nil {
				return nil, fmt.Errorf("SDK agent, turn %d: %w", st.turns+1, err)
			}
			st.turns++
			sent, recv := model.last()
			st.sentBytes += int64(requestSize(params))
			st.recvBytes += int64(recv.bytes)
			if recv.messages < len(params.Messages) {
				st.compacted++
			}
			if st.turns%30 == 0 {
				say("turn %3d  the agent sent %3d messages (%4d KB); the model received %3d (%3d KB)%s",
					st.turns, len(params.Messages), requestSize(params)/1024, recv.messages, recv.bytes/1024, sent)
			}
			params.Messages = append(params.Messages, resp.Choices[0].Message.ToParam())
		}
	}
	st.keyPassed = model.keyPassed()
	return st, nil
}

// requestSize is the size of the messages as the agent sends them.
func requestSize(p openai.ChatCompletionNewParams) int {
	b, _ := json.Marshal(p.Messages)
	return len(b)
}

// waitServing polls url until it answers 200 or the process exits.
func waitServing(ctx context.Context, url string, p *proc.Process) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.Done():
			return fmt.Errorf("compaction-proxy exited:\n%s", p.Output())
		case <-ctx.Done():
			return fmt.Errorf("compaction-proxy not serving %s: %w\n%s", url, ctx.Err(), p.Output())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// replayModel is an OpenAI-compatible model endpoint that answers each chat request with the
// transcript's next assistant turn, and notes what it received.
type replayModel struct {
	mu      sync.Mutex
	answers []compaction.Message
	next    int
	recv    received
	note    string
	keyOK   bool
	keySeen bool
}

type received struct{ messages, bytes int }

func newReplayModel(history []compaction.Message) *replayModel {
	m := &replayModel{keyOK: true}
	seenUser := false
	for _, msg := range history {
		seenUser = seenUser || msg.Role == compaction.RoleUser
		if msg.Role == compaction.RoleAssistant && seenUser {
			m.answers = append(m.answers, msg)
		}
	}
	return m
}

func (m *replayModel) last() (string, received) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.note, m.recv
}

func (m *replayModel) keyPassed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keySeen && m.keyOK
}

func (m *replayModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-demo","object":"model"}]}`)
		return
	case r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions":
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	size, note := 0, ""
	for _, raw := range req.Messages {
		size += len(raw)
		if note == "" && strings.Contains(string(raw), compaction.CompactionHeader) {
			note = "  (starts with the operator's summary)"
		}
	}
	m.mu.Lock()
	m.recv, m.note = received{messages: len(req.Messages), bytes: size + len(req.Messages) + 1}, note
	m.keySeen = true
	m.keyOK = m.keyOK && r.Header.Get("Authorization") == "Bearer sk-demo-agent"
	answer := compaction.Message{Role: compaction.RoleAssistant, Content: "Done."}
	if m.next < len(m.answers) {
		answer = m.answers[m.next]
		m.next++
	}
	m.mu.Unlock()

	msg, err := json.Marshal(answer)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	finish := "stop"
	if len(answer.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	// A provider's count of the prompt: about a token per 4 bytes of messages.
	prompt := size / 4
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-demo","object":"chat.completion","created":1,"model":"gpt-demo","choices":[{"index":0,"message":%s,"finish_reason":%q}],"usage":{"prompt_tokens":%d,"completion_tokens":50,"total_tokens":%d}}`,
		msg, finish, prompt, prompt+50)
}

// checkProxyBin fails early, naming the make target, when the proxy binary is missing.
func checkProxyBin(o Options) error {
	bin := o.ProxyBin
	if bin == "" {
		bin = filepath.Join(o.Root, "bin", "compaction-proxy")
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("no compaction-proxy binary at %s (make build builds it): %w", bin, err)
	}
	return nil
}
