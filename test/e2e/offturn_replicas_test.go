package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// offTurnPrefix is the key prefix of the off-turn two-replica policy in the bucket.
const offTurnPrefix = "offturn"

// offTurnMarker is in every summary the gated LLM writes, never in an extractive one.
const offTurnMarker = "LLM-PREPARED decision: one preparer per span"

// gatedLLM is an OpenAI-compatible summarizer whose answers wait until the test opens the
// gate, so the test decides when a summarization is in flight and when it is done.
type gatedLLM struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   int
	arrived chan struct{} // one send per call, buffered
	gate    chan struct{} // closed to answer
}

func newGatedLLM(t *testing.T) *gatedLLM {
	l := &gatedLLM{arrived: make(chan struct{}, 16), gate: make(chan struct{})}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.calls++
		l.mu.Unlock()
		select {
		case l.arrived <- struct{}{}:
		default:
		}
		select {
		case <-l.gate:
		case <-r.Context().Done():
			return
		}
		content := "USER_INTENT: keep the session whole\nEXECUTION_PROGRESS: summarized off the turn\nKEY_DECISION: " + offTurnMarker +
			"\nTRIED_SOLUTION: N/A\nNEXT_STEP: continue\n\nSummary: prepared ahead by one replica."
		body, err := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": content}}}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *gatedLLM) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// testTwoReplicasOffTurn: with summaries off the turn (the default), two replicas of the
// manager serve one session. A turn past the prepare threshold on replica 1 starts the
// summary the next Soft needs; while its call is in flight, the same turn on replica 2 finds
// the span claimed in storage and makes no second call. Once the summary is stored, the turn
// that crosses Soft, on replica 2, uses it at once: the LLM's anchors are in its view, and
// the LLM was called once in all.
func (s *suite) testTwoReplicasOffTurn(t *testing.T) {
	ctx := context.Background()
	llm := newGatedLLM(t)
	testenv.Must(t, s.c.Create(ctx, builder.CredentialsSecret(ns, "offturn-llm", map[string]string{"apiKey": "sk-test"})))
	s.cl.CreateMinIOPolicy(ns, "offturn", offTurnPrefix, s.m, replicasWindow, func(spec *compactionv1alpha1.CompactionPolicySpec) {
		spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
			BaseURL: llm.srv.URL + "/v1", Model: "test-model", TimeoutSeconds: 120,
			APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "offturn-llm"}, Key: "apiKey"},
		}}
	})
	sess := s.cl.CreateReadySession(ns, "two-replicas-offturn", "offturn")
	sid := sess.Status.SessionID

	// Two API replicas with the default, summaries off the turn (the suite's own manager
	// keeps them on the turn).
	var replicas [2]*compactclient.Client
	for i := range replicas {
		m := s.cl.StartManager(s.bin)
		t.Cleanup(func() { _ = m.Stop(20 * time.Second) })
		cc, err := compactclient.New(m.URL, compactclient.WithToken(s.agentToken), compactclient.WithCAPool(s.mgr.CAPool))
		testenv.Must(t, err)
		replicas[i] = cc
		testenv.Eventually(t, waitFor, fmt.Sprintf("replica %d serves the session", i+1), func() (bool, string) {
			err := cc.Records(ctx, ns, sess.Name, io.Discard)
			return err == nil, fmt.Sprint(err)
		})
	}

	history, _ := cappedHistory(s.history, replicasMaxContent)
	turns := compaction.AssistantTurns(history)
	cfg := compaction.DefaultConfig(replicasWindow)
	usage := func(n int) float64 { return cfg.Usage(compaction.EstimateTokens(history[:n])) }
	first := func(from int, lo float64) int {
		for i := from; i < len(turns); i++ {
			if usage(turns[i]) >= lo {
				return i
			}
		}
		t.Fatalf("no prefix of the history at %.2f of the window", lo)
		return 0
	}
	warn := first(0, cfg.WarnThreshold+0.01)
	if usage(turns[warn]) >= cfg.SoftThreshold {
		t.Fatalf("the first turn past Warn is already at %.2f, past Soft", usage(turns[warn]))
	}
	compact := func(r, n int) *compaction.CompactionRecord {
		t.Helper()
		resp, err := replicas[r].Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: history[:n]})
		if err != nil {
			t.Fatalf("replica %d, %d messages: %v", r+1, n, err)
		}
		return resp.Record
	}

	rec := compact(0, turns[warn])
	if rec.PreparedStarted != "ahead" {
		t.Fatalf("replica 1 at %.2f (%s): prepared %q, want ahead; notes %q", usage(turns[warn]), rec.Tier, rec.PreparedStarted, rec.Notes)
	}
	select {
	case <-llm.arrived:
	case <-time.After(waitFor):
		t.Fatal("replica 1's summarization never called the LLM")
	}
	// Replica 2, the same turn, while replica 1's call is in flight.
	compact(1, turns[warn])
	time.Sleep(2 * time.Second) // replica 2's background work would have called by now
	if n := llm.count(); n != 1 {
		t.Fatalf("%d LLM calls for one span with two replicas, want 1", n)
	}
	close(llm.gate)
	testenv.Eventually(t, waitFor, "the prepared summary stored", func() (bool, string) {
		st := loadStateAt(t, s.m, offTurnPrefix, compaction.PreparedID(sid))
		for _, p := range st.Prepared {
			if !p.At.IsZero() && p.Error == "" && !p.Late {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", st.Prepared)
	})

	// The crossing, on the replica that did not prepare.
	soft := first(warn+1, cfg.SoftThreshold+0.02)
	if usage(turns[soft]) >= cfg.FullThreshold {
		soft = warn + 1 // a one-turn jump past Full: cross there, Full uses it too
	}
	rec = compact(1, turns[soft])
	if rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull {
		t.Fatalf("replica 2 at %.2f: tier %s, want Soft or Full", usage(turns[soft]), rec.Tier)
	}
	if rec.PreparedUsed != 1 || rec.SummarizerDeferred || !strings.Contains(rec.SummaryText+anchorText(rec.Anchors), offTurnMarker) {
		t.Fatalf("replica 2's crossing: used %d, deferred %v, LLM anchors in the summary %v; notes %q",
			rec.PreparedUsed, rec.SummarizerDeferred, strings.Contains(anchorText(rec.Anchors), offTurnMarker), rec.Notes)
	}
	if n := llm.count(); n != 1 {
		t.Errorf("%d LLM calls in all, want 1: the one prepared ahead", n)
	}
}

func anchorText(anchors []compaction.Anchor) string {
	var b strings.Builder
	for _, a := range anchors {
		b.WriteString(a.Content)
		b.WriteByte('\n')
	}
	return b.String()
}
