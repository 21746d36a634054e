package compactapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// fakeOpenAI is an OpenAI-compatible chat completions endpoint that answers every request
// with a summary in the anchors format and counts the requests.
func fakeOpenAI(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		const summary = "## Anchors\n- user_intent: fix the failing test\n- execution_progress: read the files\n- key_decision: none\n- tried_solution: none\n- next_step: run the tests\n\n## Summary\nRead the package's files."
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "c1", "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": summary}}},
			"usage": map[string]any{"prompt_tokens": 1000, "completion_tokens": 60, "total_tokens": 1060},
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// fullHistory is a marked history whose estimate is in the Full tier of an 8,000-token window.
func fullHistory(t *testing.T, mark string) []compaction.Message {
	t.Helper()
	cfg := compaction.DefaultConfig(8000)
	for turns := 1; turns < 200; turns++ {
		h := markedHistory(mark, turns)
		if cfg.DetermineTier(compaction.EstimateTokens(h)) == compaction.TierFull {
			return h
		}
	}
	t.Fatal("no history in the Full tier")
	return nil
}

// TestSummarizerBudgetSpansConversations: summarizer.maxCallsPerHour bounds the LLM calls
// of the whole AgentSession, not of each conversation: with a limit of 1, two conversations
// (and the default one) each reaching Full make one LLM call in total; the others are
// summarized extractively and say so. The count is one object under the session, which
// deleting the session's objects removes with the rest.
func TestSummarizerBudgetSpansConversations(t *testing.T) {
	llm, calls := fakeOpenAI(t)
	e := startConversationEnv(t, func(spec *compactionv1alpha1.CompactionPolicySpec) {
		spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI,
			OpenAI: compactionv1alpha1.OpenAISummarizerSpec{BaseURL: llm.URL + "/v1", Model: "m"}, MaxCallsPerHour: ptr.To[int32](1)}
	})
	ctx := context.Background()
	throttled := 0
	for _, conv := range []string{"a", "b", ""} {
		resp, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: fullHistory(t, "CONV"+conv)},
			compactclient.InConversation(conv))
		if err != nil {
			t.Fatalf("conversation %q: %v", conv, err)
		}
		rec := resp.Record
		if rec.Tier != compaction.TierFull || rec.Summarized == 0 {
			t.Fatalf("conversation %q: tier %s, summarized %d; want a Full summary", conv, rec.Tier, rec.Summarized)
		}
		if rec.SummarizerThrottled {
			throttled++
			if !strings.Contains(strings.Join(rec.Notes, "; "), "summarizer budget of 1 calls per hour used up") {
				t.Errorf("conversation %q: notes %q do not say the budget is used up", conv, rec.Notes)
			}
		} else if rec.SummarizerCalls != 1 {
			t.Errorf("conversation %q: not throttled, %d summarizer calls in the record", conv, rec.SummarizerCalls)
		}
	}
	if n := calls.Load(); n != 1 || throttled != 2 {
		t.Fatalf("%d LLM calls, %d compactions throttled; want one call for the session and the other two throttled", n, throttled)
	}
	uid := string(e.sess.UID)
	e.checkDeleteSession(t, []string{"conv/state/conversations/" + uid + "/" + strings.TrimPrefix(compaction.SessionBudgetID(uid), uid+"/conversations/") + ".json",
		"conv/state/conversations/" + uid + "/a.json", "conv/state/" + uid + ".json"})
}
