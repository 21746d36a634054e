package compactapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/events"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// countingTransport counts the requests a store sends.
type countingTransport struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// TestTwoReplicasAlternate: issue 15. Two servers, each keeping the session's engine between
// requests, serve one session's turns alternately, as replicas behind a Service may: every
// turn sees what the other saved (its delta request, built on the other's answer, is
// accepted, and its record starts from the other's watermark), and a turn that compacts
// nothing costs one storage request, a conditional read of the state.
func TestTwoReplicasAlternate(t *testing.T) {
	m := testenv.StartMinIO(t)
	ctx := context.Background()
	counter := &countingTransport{next: http.DefaultTransport}
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "alternate", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey},
		s3.WithTransport(counter))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureBucket(ctx, true); err != nil {
		t.Fatal(err)
	}
	spec := builder.DefaultedSpec(128000)
	spec.ContextWindow = 8000
	_, sess := pinTestServer(t, spec)
	sess.store = store
	replica := func() *Server {
		metrics, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return &Server{cfg: Config{UsageInterval: DefaultUsageInterval, MaxMessages: DefaultMaxMessages}, metrics: metrics,
			recorder: events.NewFakeRecorder(1000), log: logr.Discard(), status: newStatusBatcher(), engines: newEngines()}
	}
	replicas := []*Server{replica(), replica()}

	history := toolHistory(70)
	watermark, prefixHash := 0, ""
	compactions, noneTurns := 0, 0
	for turn := 0; turn < 60; turn++ {
		// The agent's history: system, task, then turn+1 tool rounds; it sends what follows
		// the watermark of the last answer, whichever replica gave it.
		msgs := history[:4+2*turn]
		body := map[string]any{"messages": msgs}
		if watermark > 0 {
			body = map[string]any{"messages": append([]map[string]any{msgs[0]}, msgs[watermark:]...), "watermark": watermark, "prefixHash": prefixHash}
		}
		before := counter.n.Load()
		w, err := postCompact(t, replicas[turn%2], sess, body)
		if err != nil || w.Code != http.StatusOK {
			t.Fatalf("turn %d on replica %d: %v %d %s", turn, turn%2, err, w.Code, w.Body)
		}
		requests := counter.n.Load() - before
		var resp compactclient.CompactResponse
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Record.WatermarkBefore != watermark {
			t.Fatalf("turn %d on replica %d started from watermark %d, the other replica's answer says %d", turn, turn%2, resp.Record.WatermarkBefore, watermark)
		}
		switch {
		case resp.Watermark != watermark:
			compactions++
		case resp.Record.Tier == compaction.TierNone && turn >= 2:
			// Both replicas have their engine from turn 2 on.
			noneTurns++
			if requests != 1 {
				t.Errorf("turn %d (None) on replica %d: %d storage requests, want 1 (the state's conditional read)", turn, turn%2, requests)
			}
		}
		watermark, prefixHash = resp.Watermark, resp.PrefixHash
	}
	if compactions < 2 || noneTurns == 0 {
		t.Errorf("%d compactions moved the watermark, %d None turns: the test did not exercise both", compactions, noneTurns)
	}
}
