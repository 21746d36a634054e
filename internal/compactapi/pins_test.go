package compactapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/policy"
)

// pinTestServer is the compaction API's handlers on a real MinIO, with a session whose
// policy is spec; no control plane: the handlers are called after auth and lookup.
func pinTestServer(t *testing.T, spec *compactionv1alpha1.CompactionPolicySpec) (*Server, *session) {
	t.Helper()
	m := testenv.StartMinIO(t)
	ctx := context.Background()
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "pins", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureBucket(ctx, true); err != nil {
		t.Fatal(err)
	}
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{UsageInterval: DefaultUsageInterval, MaxMessages: DefaultMaxMessages}, metrics: metrics, recorder: events.NewFakeRecorder(100),
		log: logr.Discard()}
	s.status = newStatus(s)
	obj := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent", UID: "uid-1"}}
	cfg, err := policy.EngineConfig(spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s, &session{obj: obj, id: "uid-1", cfg: cfg, store: store, summarizer: compaction.ExtractiveSummarizer{}}
}

// pinHistory: system, the task, a marked user message of markedBytes, then tool turns.
func pinHistory(markedBytes int) []map[string]any {
	msgs := make([]map[string]any, 0, 23)
	msgs = append(msgs,
		map[string]any{"role": "system", "content": "You are a coding agent."},
		map[string]any{"role": "user", "content": "Fix the failing test in pkg/parse."},
		map[string]any{"role": "user", "content": "Constraint: keep the metrics names unchanged.\n" + strings.Repeat("keep this line verbatim\n", markedBytes/24), "pinned": true},
	)
	for i := range 10 {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": fmt.Sprintf("Step %d: reading a file.", i), "tool_calls": []map[string]any{
				{"id": id, "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"cmd": "cat f.go"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": strings.Repeat(fmt.Sprintf("line %d of the output\n", i), 40)},
		)
	}
	return msgs
}

func postCompact(t *testing.T, s *Server, sess *session, body map[string]any) (*httptest.ResponseRecorder, error) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	req, err := s.parseCompact(data)
	if err != nil {
		return w, err
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/namespaces/ns/sessions/agent/compact", strings.NewReader(string(data)))
	return w, s.compact(w, r, sess, req)
}

// TestCompactPinnedMessage: a message sent with "pinned": true is accepted under the policy's
// pins, opens the compacted view right after the system message with the mark stripped, and
// when it is over the pin budget its full text is read back through the toolresults route.
func TestCompactPinnedMessage(t *testing.T) {
	spec := builder.DefaultedSpec(128000)
	spec.ContextWindow = 16000
	// 5% of 16,000 tokens is about 3,200 bytes: a 6,000-byte pin is shortened.
	spec.Pins = compactionv1alpha1.PinsSpec{Rule: compactionv1alpha1.PinMarked, BudgetPercent: 5}
	s, sess := pinTestServer(t, spec)
	history := pinHistory(6000)
	marked := history[2]["content"].(string)

	w, err := postCompact(t, s, sess, map[string]any{"messages": history, "force": true})
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	if w.Code != http.StatusOK {
		t.Fatalf("compact: %d %s", w.Code, w.Body)
	}
	var raw struct {
		Messages []map[string]json.RawMessage `json:"messages"`
		Record   compaction.CompactionRecord  `json:"record"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for i, m := range raw.Messages {
		if v, ok := m["pinned"]; ok {
			t.Errorf("view message %d carries \"pinned\": %s", i, v)
		}
	}
	if raw.Record.PinnedMessages != 1 || raw.Record.PinnedHash == "" || raw.Record.PinnedTokens == 0 {
		t.Errorf("record pins: %d messages, %d tokens, hash %q; want the one marked message", raw.Record.PinnedMessages, raw.Record.PinnedTokens, raw.Record.PinnedHash)
	}
	if len(raw.Messages) < 2 {
		t.Fatalf("view of %d messages", len(raw.Messages))
	}
	var pin struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(mustJSON(t, raw.Messages[1]), &pin); err != nil {
		t.Fatal(err)
	}
	head := marked[:200]
	if pin.Role != "user" || !strings.HasPrefix(pin.Content, head) || len(pin.Content) >= len(marked) {
		t.Fatalf("view message 1 is %s %.200q..., want the marked message shortened to the pin budget", pin.Role, pin.Content)
	}
	const id = "pinned-message-2"
	if !strings.Contains(pin.Content, id) {
		t.Fatalf("shortened pin does not name %s: %q", id, pin.Content)
	}

	rw := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/v1/namespaces/ns/sessions/agent/toolresults/"+id, nil)
	r.SetPathValue("id", id)
	if err := s.toolResult(rw, r, sess, struct{}{}); err != nil {
		t.Fatalf("read back %s: %v", id, err)
	}
	if rw.Body.String() != marked {
		t.Errorf("read back %s: %d bytes, want the %d-byte marked message verbatim", id, rw.Body.Len(), len(marked))
	}

	// The mark is refused where the engine cannot honor it: on a tool result.
	bad := pinHistory(100)
	bad[4]["pinned"] = true
	other := *sess
	other.id = "uid-2"
	_, err = postCompact(t, s, &other, map[string]any{"messages": bad})
	var ae *apiError
	if !errors.As(err, &ae) || ae.code != http.StatusBadRequest || ae.reason != ReasonInvalidMessages || !strings.Contains(ae.msg, "pinned") {
		t.Errorf("a pinned tool result: %v, want a 400 %s naming pinned", err, ReasonInvalidMessages)
	}
}

func mustJSON(t *testing.T, m map[string]json.RawMessage) []byte {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
