package agents

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// model is the scripted model an agent talks to (through the proxy): it speaks the
// provider's protocol (Anthropic Messages, OpenAI Responses or Gemini, see the handlers in
// anthropic_test.go, responses_test.go and gemini_test.go) and plays one script whatever
// the agent: for each of steps steps it asks the agent, with one of the agent's own tools,
// to print the log file of the step the test wrote in the workspace, then answers with
// finalText.
//
// Each log file starts with a random proof line that exists nowhere else: the model moves to
// step k+1 only once a request carries the proof of step k, which the agent could only have
// read from the file with its tool. The step of a request is the highest step whose proof it
// carries, so a retried request gets the same answer, and compaction (which keeps the newest
// turns) never hides the step.
//
// Requests that declare none of the tools the script uses (an agent's title, topic or
// next-speaker requests, warm-ups) are side requests: answered with side text, counted apart.
type model struct {
	t     *testing.T
	steps int
	ws    *workspace
	// decode is the protocol's request decoder (compaction/anthropic, responses, gemini):
	// the test names the conversation with it.
	decode func([]byte) ([]compaction.Message, error)

	mu       sync.Mutex
	main     []exchange // the tool loop's requests, in order
	side     []exchange // every other request
	proved   map[int]bool
	asked    int // the highest step asked for
	finals   int // final answers sent
	problems []string
}

// exchange is one request the model received.
type exchange struct {
	method, path string
	header       http.Header
	raw          []byte
	step         int  // the highest step whose proof the request carried
	compacted    bool // the request carries the compaction header (a compacted view)
	tool         string
}

// finalText is the model's last answer, which the agent must print.
func finalText(steps int) string {
	return fmt.Sprintf("All %d step logs checked: no failures. AGENTS-E2E-DONE", steps)
}

// workspace is the agent's working directory: logs/step_K.log for each step.
type workspace struct {
	dir    string
	proofs []string // proofs[k]: the first line of step k's log (index 0 unused)
	sizes  []int
}

// newWorkspace writes steps log files of a few KB each (every third about 6 KB, above the
// engine's default offload threshold of 4000 bytes, below the proxy's hook threshold of 10000) into a new temporary directory.
func newWorkspace(t *testing.T, steps int) *workspace {
	t.Helper()
	ws := &workspace{dir: t.TempDir(), proofs: make([]string, steps+1), sizes: make([]int, steps+1)}
	if err := os.MkdirAll(filepath.Join(ws.dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= steps; k++ {
		var nonce [6]byte
		_, _ = rand.Read(nonce[:])
		ws.proofs[k] = fmt.Sprintf("PROOF-step%d-%s", k, hex.EncodeToString(nonce[:]))
		var b strings.Builder
		fmt.Fprintf(&b, "%s\n", ws.proofs[k])
		lines := 36 + (k%2)*8
		if k%3 == 0 {
			lines = 76
		}
		for j := range lines {
			fmt.Fprintf(&b, "step %02d | tests/unit/test_module_%02d.py::test_case_%03d PASSED in 0.%03ds [%3d%%]\n", k, k, j, (k*j)%997, 100*j/lines)
		}
		fmt.Fprintf(&b, "step %02d | ==== %d passed in %d.%02ds ====\n", k, lines, k, (k*37)%100)
		if err := os.WriteFile(ws.logPath(k), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		ws.sizes[k] = b.Len()
	}
	return ws
}

func (ws *workspace) logPath(k int) string {
	return filepath.Join(ws.dir, "logs", fmt.Sprintf("step_%d.log", k))
}

// totalBytes is the size of every step's log.
func (ws *workspace) totalBytes() int {
	n := 0
	for _, s := range ws.sizes {
		n += s
	}
	return n
}

func newModel(t *testing.T, ws *workspace, steps int) *model {
	return &model{t: t, steps: steps, ws: ws, proved: map[int]bool{}}
}

// stepOf is the highest step whose proof raw carries (0: none).
func (m *model) stepOf(raw []byte) int {
	for k := m.steps; k >= 1; k-- {
		if bytes.Contains(raw, []byte(m.ws.proofs[k])) {
			return k
		}
	}
	return 0
}

// next records a tool-loop request and decides the answer: the step to ask for (1..steps),
// or 0 for the final answer.
func (m *model) next(r *http.Request, raw []byte, tool string) (ask int) {
	step := m.stepOf(raw)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.main = append(m.main, exchange{method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), raw: raw, step: step,
		compacted: bytes.Contains(raw, []byte(compaction.CompactionHeader)), tool: tool})
	if step > 0 {
		m.proved[step] = true
	}
	if step < m.asked-1 {
		m.problems = append(m.problems, fmt.Sprintf("request %d carries the proof of step %d only, after the model asked for step %d: the agent did not run its tool", len(m.main), step, m.asked))
	}
	if step >= m.steps {
		m.finals++
		return 0
	}
	m.asked = max(m.asked, step+1)
	return step + 1
}

// sideRequest records a request outside the tool loop.
func (m *model) sideRequest(r *http.Request, raw []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.side = append(m.side, exchange{method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), raw: raw})
}

// problem records something the agent did wrong, reported by check.
func (m *model) problem(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.problems = append(m.problems, fmt.Sprintf(format, args...))
}

func (m *model) requests() (main, side []exchange) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]exchange(nil), m.main...), append([]exchange(nil), m.side...)
}

// command is the shell command of step k.
func (m *model) command(k int) string { return "cat " + m.ws.logPath(k) }

// promptTokens is what the model reports as the prompt's size: a token per 3.6 bytes of
// the request body, a little more than the engine estimates, as a provider counts.
func promptTokens(raw []byte) int { return len(raw) * 10 / 36 }

// toolNames are the names of tools in a JSON array of objects with a "name" (Anthropic,
// Responses), of Chat Completions' {"function": {"name": ...}} or of Gemini's
// {"functionDeclarations": [...]}.
func toolNames(tools []json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, raw := range tools {
		var tool struct {
			Name     string            `json:"name"`
			Decls    []json.RawMessage `json:"functionDeclarations"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &tool) != nil {
			continue
		}
		if tool.Name != "" {
			out[tool.Name] = raw
		}
		if tool.Function.Name != "" {
			out[tool.Function.Name] = raw
		}
		for name, decl := range toolNames(tool.Decls) {
			out[name] = decl
		}
	}
	return out
}

// writeSSE writes an event stream in small flushed pieces, as a provider streams.
func writeSSE(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for rest := body; len(rest) > 0; {
		n := min(len(rest), 113)
		_, _ = w.Write([]byte(rest[:n]))
		w.(http.Flusher).Flush()
		rest = rest[n:]
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// conversation is the conversation of the request body raw, as the proxy names it.
func (m *model) conversation(raw []byte) string {
	msgs, err := m.decode(raw)
	if err != nil {
		m.t.Logf("decoding the first request: %v", err)
		return ""
	}
	return conversationOf(msgs)
}
