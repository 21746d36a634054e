package compactapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// TestSummariesOffTurn: issue 29, through the compaction API (--api-summaries-off-turn)
// with an OpenAI-compatible summarizer that takes 3 s to answer. The turn that crosses
// Full is answered without waiting for it (summarized extractively, the LLM started off
// the turn); the LLM's answer is finished and stored after the request ended, under the
// session's objects; the next crossing merges it, again without a call on the turn.
func TestSummariesOffTurn(t *testing.T) {
	var calls, done atomic.Int64
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(3 * time.Second)
		const summary = "## Anchors\n- user_intent: fix the failing test\n- execution_progress: read the files\n- key_decision:\n  - OFFTURN-DECISION keep the parser\n- tried_solution: none\n- next_step: run the tests\n\n## Summary\nRead the package's files."
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "c1", "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": summary}}},
			"usage":   map[string]any{"prompt_tokens": 1000, "completion_tokens": 60, "total_tokens": 1060},
		})
		done.Add(1)
	}))
	t.Cleanup(llm.Close)
	e := startConversationEnv(t, func(spec *compactionv1alpha1.CompactionPolicySpec) {
		spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI,
			OpenAI: compactionv1alpha1.OpenAISummarizerSpec{BaseURL: llm.URL + "/v1", Model: "m", TimeoutSeconds: 30}, MaxCallsPerHour: ptr.To[int32](100)}
	})
	e.server.cfg.SummariesOffTurn = true
	e.server.background = newBackground(e.server.metrics)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.server.background.run(ctx)

	crossing := func(h []compaction.Message) *compaction.CompactionRecord {
		t.Helper()
		// The client gives up after 2 s, less than the summarizer takes.
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer rcancel()
		resp, err := e.api.Compact(rctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: h})
		if err != nil {
			t.Fatalf("compact: %v (the turn waited for the summarizer?)", err)
		}
		return resp.Record
	}
	h := fullHistory(t, "OFFTURN", 8000)
	rec := crossing(h)
	if rec.Tier != compaction.TierFull || !rec.SummarizerDeferred || rec.PreparedStarted != "late" {
		t.Fatalf("first crossing: tier %s, deferred %v, started %q; notes %q", rec.Tier, rec.SummarizerDeferred, rec.PreparedStarted, rec.Notes)
	}
	// The request is over; the summarization goes on and is stored.
	deadline := time.Now().Add(20 * time.Second)
	stored := func() bool {
		for k := range e.keys(t) {
			if strings.Contains(k, ".prepared") {
				return true
			}
		}
		return false
	}
	for (done.Load() == 0 || !stored()) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if done.Load() == 0 || !stored() {
		t.Fatalf("the summarization off the turn was not finished and stored (calls %d, done %d, keys %v)", calls.Load(), done.Load(), e.keys(t))
	}
	time.Sleep(500 * time.Millisecond) // the store write follows the answer
	// Grow the history until the next Soft or Full: it merges the LLM's summary.
	for turns := 1; turns < 200; turns++ {
		h2 := append(append([]compaction.Message(nil), h...), markedHistory("MORE", turns)[2:]...)
		rec = crossing(h2)
		if rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull {
			continue
		}
		if !rec.PreparedLateMerged || rec.SummarizerCalls == 0 || !strings.Contains(rec.SummaryText+strings.Join(anchorTexts(rec.Anchors), "\n"), "OFFTURN-DECISION") {
			t.Fatalf("next crossing: late merged %v, calls %d; notes %q", rec.PreparedLateMerged, rec.SummarizerCalls, rec.Notes)
		}
		return
	}
	t.Fatal("no second crossing")
}

func anchorTexts(as []compaction.Anchor) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.Content)
	}
	return out
}
