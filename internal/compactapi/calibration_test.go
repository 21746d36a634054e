package compactapi

import (
	"encoding/json"
	"math"
	"net/http"
	"testing"

	"github.com/go-logr/logr"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/events"

	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
)

// TestCompactCalibratesFromPromptTokens: the agent's usage.promptTokens, reported for the
// view this replica returned last, calibrates the session's estimate: the tier and usage
// follow the real size, the factor is kept in the session's state (a replica that never
// served the session uses it), and a report this replica cannot match to a view of its
// own changes nothing.
func TestCompactCalibratesFromPromptTokens(t *testing.T) {
	spec := builder.DefaultedSpec(128000)
	spec.ContextWindow = 13000
	s, sess := pinTestServer(t, spec)
	newLRU := func() *lru.Cache[string, int] {
		c, err := lru.New[string, int](16)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s.lastViews = newLRU()
	compact := func(srv *Server, turns, promptTokens int) *compactclient.CompactResponse {
		t.Helper()
		body := map[string]any{"messages": toolHistory(turns)}
		if promptTokens > 0 {
			body["usage"] = map[string]any{"promptTokens": promptTokens}
		}
		w, err := postCompact(t, srv, sess, body)
		if err != nil || w.Code != http.StatusOK {
			t.Fatalf("compact: %v %d %s", err, w.Code, w.Body)
		}
		var resp compactclient.CompactResponse
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		return &resp
	}

	first := compact(s, 20, 0)
	if first.Record.Calibration != 1 || first.Record.Tier.String() != "None" {
		t.Fatalf("first turn: tier %s calibration %v, want None 1", first.Record.Tier, first.Record.Calibration)
	}
	// The model counted 1.8x the estimate for that view: the next turn's view (the same
	// history and one more tool turn) is 1.8x too, which moves it from None into Warn.
	reported := int(1.8 * float64(first.Record.TokensAfter))
	second := compact(s, 21, reported)
	rec := second.Record
	if math.Abs(rec.Calibration-1.8) > 0.01 {
		t.Fatalf("calibration %v after a report of %d for a view of %d, want 1.8", rec.Calibration, reported, first.Record.TokensAfter)
	}
	if want := 1.8 * float64(rec.TokensBefore) / 13000; math.Abs(rec.UsageBefore-want) > 0.001 || rec.Tier.String() != "Warn" {
		t.Fatalf("usage before %v tier %s, want %v (calibrated) and Warn", rec.UsageBefore, rec.Tier, want)
	}
	if rec.PromptTokens != reported || math.Abs(second.Usage-rec.UsageAfter) > 1e-9 {
		t.Fatalf("record promptTokens %d, response usage %v (record %v)", rec.PromptTokens, second.Usage, rec.UsageAfter)
	}

	// Another replica (no view of its own for this session) uses the stored factor and
	// ignores a report it cannot match.
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	other := &Server{cfg: s.cfg, metrics: metrics, recorder: events.NewFakeRecorder(100), log: logr.Discard(), lastViews: newLRU()}
	other.status = newStatus(other)
	third := compact(other, 21, 1)
	if math.Abs(third.Record.Calibration-1.8) > 0.01 {
		t.Fatalf("another replica: calibration %v, want the stored 1.8", third.Record.Calibration)
	}
}
