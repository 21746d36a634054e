package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// reportingStub is a stubCompactor that records the pass-throughs reported to it.
type reportingStub struct {
	stubCompactor
	mu      sync.Mutex
	reports []PassThrough
}

func (s *reportingStub) ReportPassThrough(_ context.Context, r PassThrough) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports = append(s.reports, r)
	return nil
}

func (s *reportingStub) got() []PassThrough {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]PassThrough(nil), s.reports...)
}

// logLines keeps what a logger logs, for tests that read the proxy's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

// logger returns a logger that keeps each line's key and value pairs in l.
func (l *logLines) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestPassThroughSaysWhy: a request passed through is counted by its reason every time, logged
// at info once per conversation and reason, and reported to the AgentSession's status at once
// (then at most every reportInterval).
func TestPassThroughSaysWhy(t *testing.T) {
	var log logLines
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	stub := &reportingStub{stubCompactor: stubCompactor{err: errors.New("compaction API down")}}
	p, err := New(Config{Upstream: echo(t), Compactor: stub, Metrics: m, Log: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	for range 3 {
		if code, got := post(t, srv.URL+"/v1/chat/completions", `{"model":"m","messages":"nope"}`); code != http.StatusOK || got != `{"model":"m","messages":"nope"}` {
			t.Fatalf("not decodable: upstream got %d %q, want the agent's body", code, got)
		}
		if code, got := post(t, srv.URL+"/v1/chat/completions", twoMessages); code != http.StatusOK || got != twoMessages {
			t.Fatalf("compaction failed: upstream got %d %q, want the agent's body", code, got)
		}
	}
	for _, reason := range []Reason{ReasonNotDecodable, ReasonCompactionFailed} {
		if n := value(m.Requests.WithLabelValues("openai", reason.Label())); n != 3 {
			t.Errorf("%s: counted %v, want 3", reason, n)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(stub.got()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	reports := stub.got()
	if len(reports) != 2 {
		t.Fatalf("reports %+v, want one per reason within the interval", reports)
	}
	for _, r := range reports {
		if r.Count != 1 || r.Protocol != "openai" || !strings.Contains(r.Message, string(r.Reason)) {
			t.Errorf("report %+v, want a count of 1 naming its reason", r)
		}
	}
	lines := log.get()
	logged := map[string]int{}
	for _, l := range lines {
		for _, reason := range []Reason{ReasonNotDecodable, ReasonCompactionFailed} {
			if strings.Contains(l, `"reason"="`+string(reason)+`"`) && strings.Contains(l, "passed through uncompacted") {
				logged[string(reason)]++
			}
		}
	}
	if logged[string(ReasonNotDecodable)] != 1 || logged[string(ReasonCompactionFailed)] != 1 {
		t.Errorf("info lines per reason %v, want one each:\n%s", logged, strings.Join(lines, "\n"))
	}
}

// TestReasonsAreTheAPIs: every reason the proxy reports is one the compaction API takes.
func TestReasonsAreTheAPIs(t *testing.T) {
	for _, r := range []Reason{ReasonNotDecodable, ReasonStatefulRequest, ReasonTooLarge, ReasonUnsupportedRequest, ReasonCompactionFailed, ReasonWebSocket} {
		if !compactclient.PassThroughReason(r).Valid() {
			t.Errorf("reason %s is not one the compaction API takes", r)
		}
	}
}
