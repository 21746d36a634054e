package compactapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

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
// nothing costs one storage request, a conditional read of the state. With --api-state-trust
// the turns are as correct, and a None turn that continues from the same replica's state
// (nothing compacted since) skips even that read.
func TestTwoReplicasAlternate(t *testing.T) {
	for _, trust := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("trust %s", trust), func(t *testing.T) {
			counter, sess := alternateSetup(t)
			replicas := []*Server{trustingReplica(t, trust), trustingReplica(t, trust)}
			skipped := 0
			alternate(t, replicas, sess, counter, func(turn int, _ bool, requests int64) {
				switch {
				case trust == 0 && requests != 1:
					t.Errorf("turn %d (None) on replica %d: %d storage requests, want 1 (the state's conditional read)", turn, turn%2, requests)
				case trust > 0 && requests > 1:
					t.Errorf("turn %d (None) on replica %d: %d storage requests, want at most 1", turn, turn%2, requests)
				case requests == 0:
					skipped++
				}
			})
			if trust > 0 && skipped == 0 {
				t.Errorf("with --api-state-trust no None turn skipped the state's read")
			}
		})
	}
}

// TestStateTrustOneReplica: a replica that serves all of a session's turns (session affinity)
// makes no storage request on a None turn that continues from its own answer; without
// --api-state-trust it makes one.
func TestStateTrustOneReplica(t *testing.T) {
	for _, trust := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("trust %s", trust), func(t *testing.T) {
			counter, sess := alternateSetup(t)
			r := trustingReplica(t, trust)
			// A None turn makes no storage request with the trust, one without: a delta turn
			// continues from the replica's answer, a full-history one (the conversation has
			// not compacted) from the store's "no state yet".
			none := map[bool]int{}
			alternate(t, []*Server{r, r}, sess, counter, func(turn int, delta bool, requests int64) {
				none[delta]++
				if want := map[bool]int64{true: 0, false: 1}[trust > 0]; requests != want {
					t.Errorf("turn %d (None, delta %t): %d storage requests, want %d", turn, delta, requests, want)
				}
			})
			if none[true] == 0 || none[false] == 0 {
				t.Fatalf("None turns by delta: %v; want both kinds", none)
			}
		})
	}
}

// alternateSetup starts MinIO and a pinned session whose store counts its requests.
func alternateSetup(t *testing.T) (*countingTransport, *session) {
	t.Helper()
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
	return counter, sess
}

// trustingReplica is a server that keeps engines, with Config.StateTrust trust.
func trustingReplica(t *testing.T, trust time.Duration) *Server {
	t.Helper()
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{UsageInterval: DefaultUsageInterval, MaxMessages: DefaultMaxMessages, StateTrust: trust}, metrics: metrics,
		recorder: events.NewFakeRecorder(1000), log: logr.Discard(), engines: newEngines()}
	s.status = newStatus(s)
	return s
}

// alternate sends 60 turns of one agent to replicas in turn, each a delta request on the last
// answer once there is a watermark, and checks that every turn starts from the watermark of
// the answer before it. onNone gets the storage requests of each None turn from turn 2 on
// (when both replicas have their engine), and whether it was a delta request.
func alternate(t *testing.T, replicas []*Server, sess *session, counter *countingTransport, onNone func(turn int, delta bool, requests int64)) {
	t.Helper()
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
		w, err := postCompact(t, replicas[turn%len(replicas)], sess, body)
		if err != nil || w.Code != http.StatusOK {
			t.Fatalf("turn %d on replica %d: %v %d %s", turn, turn%2, err, w.Code, w.Body)
		}
		requests := counter.n.Load() - before
		var resp compactclient.CompactResponse
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Record.WatermarkBefore != watermark {
			t.Fatalf("turn %d on replica %d started from watermark %d, the answer before says %d", turn, turn%2, resp.Record.WatermarkBefore, watermark)
		}
		switch {
		case resp.Watermark != watermark:
			compactions++
		case resp.Record.Tier == compaction.TierNone && turn >= 2:
			// Both replicas have their engine from turn 2 on.
			noneTurns++
			onNone(turn, watermark > 0, requests)
		}
		watermark, prefixHash = resp.Watermark, resp.PrefixHash
	}
	if compactions < 2 || noneTurns == 0 {
		t.Errorf("%d compactions moved the watermark, %d None turns: the test did not exercise both", compactions, noneTurns)
	}
}
