package compactapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// TestSessionSeenDeltas: a compactclient.Session sends a conversation that compacts nothing
// as seen deltas (only what is new, after the history the last answer returned as it was),
// through the whole handler (TokenReview, SubjectAccessReview, the pinned location) on a
// real kube-apiserver and MinIO. Every turn's view is the one a full history gets on another
// conversation; the turn that must compact is sent back (409) and compacts on the full
// history; later turns are watermark deltas.
func TestSessionSeenDeltas(t *testing.T) {
	env := startConversationEnv(t)
	ctx := context.Background()
	var mu sync.Mutex
	type sent struct {
		seen, watermark, messages int
		code                      int
	}
	var log []sent
	spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		var req compactclient.CompactRequest
		_ = json.Unmarshal(body, &req) // the handler reports a bad body
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		env.server.Handler().ServeHTTP(rec, r)
		mu.Lock()
		if strings.Contains(r.URL.Path, "/compact") && r.URL.Query().Get("conversation") == "" {
			log = append(log, sent{req.Seen, req.Watermark, len(req.Messages), rec.Code})
		}
		mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(spy.Close)
	api, err := compactclient.New(spy.URL, compactclient.WithToken(env.token))
	if err != nil {
		t.Fatal(err)
	}
	s := &compactclient.Session{Client: api, Namespace: env.sess.Namespace, Name: env.sess.Name}
	history := make([]compaction.Message, 0, 122)
	history = append(history, compaction.Message{Role: compaction.RoleSystem, Content: "You are a coding agent."},
		compaction.Message{Role: compaction.RoleUser, Content: "Fix the failing test in pkg/parse."})
	compactions := 0
	for turn := range 60 {
		id := fmt.Sprintf("call_%d", turn)
		history = append(history,
			compaction.Message{Role: compaction.RoleAssistant, Content: fmt.Sprintf("Step %d: reading a file.", turn),
				ToolCalls: []compaction.ToolCall{{ID: id, Type: "function", Function: compaction.FunctionCall{Name: "bash", Arguments: `{"cmd":"cat f.go"}`}}}},
			compaction.Message{Role: compaction.RoleTool, ToolCallID: id, Content: strings.Repeat(fmt.Sprintf("line %d of the output\n", turn), 30)})
		got, err := s.Compact(ctx, history, 0)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		want, err := api.Compact(ctx, env.sess.Namespace, env.sess.Name, compactclient.CompactRequest{Messages: history}, compactclient.InConversation("full"))
		if err != nil {
			t.Fatalf("turn %d, full history: %v", turn, err)
		}
		if got.Record.Tier != want.Record.Tier || !compaction.EqualMessages(got.Messages, want.Messages) {
			t.Fatalf("turn %d: %s view of %d messages, the full history's is %s of %d", turn, got.Record.Tier, len(got.Messages), want.Record.Tier, len(want.Messages))
		}
		if got.Record.Tier != compaction.TierNone {
			compactions++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	seen, refused, watermark := 0, 0, 0
	for i, r := range log {
		switch {
		case r.seen > 0 && r.code == http.StatusOK:
			seen++
			if r.messages != 3 { // the system message and the turn's two
				t.Errorf("request %d: a seen delta of %d messages, want 3", i, r.messages)
			}
		case r.seen > 0 && r.code == http.StatusConflict:
			refused++
			if i+1 >= len(log) || log[i+1].seen != 0 || log[i+1].watermark != 0 || log[i+1].code != http.StatusOK {
				t.Errorf("request %d: a refused seen delta not followed by the full history", i)
			}
		case r.watermark > 0:
			watermark++
		}
	}
	t.Logf("%d requests: %d seen deltas, %d refused, %d watermark deltas; %d compactions", len(log), seen, refused, watermark, compactions)
	if seen < 10 || refused == 0 || watermark == 0 || compactions == 0 {
		t.Errorf("%d seen deltas, %d refused, %d watermark deltas, %d compactions: want seen deltas until the first compaction, then the others", seen, refused, watermark, compactions)
	}
}
