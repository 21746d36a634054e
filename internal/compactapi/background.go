package compactapi

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harness9/compaction-operator/compaction"
)

// Summaries made off the turn (compaction.WithBackground): a replica runs them on a few
// workers with a bounded queue, so a flood of sessions crossing Warn cannot start unbounded
// LLM calls or goroutines; what does not fit is not prepared (the crossing then summarizes
// extractively, at once).
const (
	backgroundWorkers = 4
	backgroundQueue   = 64
	// backgroundTimeout bounds one summarization off the turn (the summarizer's own
	// timeout is usually shorter).
	backgroundTimeout = 5 * time.Minute
)

// background is the replica's pool for summarizations off the turn. Its workers start with
// the server (run) and stop with it.
type background struct {
	queue   chan backgroundWork
	metrics *Metrics

	mu       sync.Mutex
	sessions map[string]*sessionWork // by the session's own ID
}

type backgroundWork struct {
	session string
	work    func(context.Context)
}

// sessionWork is the context a session's work runs on, cancelled once none is left.
type sessionWork struct {
	ctx    context.Context
	cancel context.CancelFunc
	n      int // queued or running
}

var _ compaction.Background = (*background)(nil)

func newBackground(m *Metrics) *background {
	return &background{queue: make(chan backgroundWork, backgroundQueue), metrics: m, sessions: map[string]*sessionWork{}}
}

// Go implements compaction.Background.
func (b *background) Go(sessionID string, work func(context.Context)) bool {
	base, _ := compaction.SplitSessionID(sessionID)
	b.mu.Lock()
	sw := b.sessions[base]
	if sw == nil {
		ctx, cancel := context.WithCancel(context.Background())
		sw = &sessionWork{ctx: ctx, cancel: cancel}
		b.sessions[base] = sw
	}
	select {
	case b.queue <- backgroundWork{session: base, work: work}:
		sw.n++
		b.mu.Unlock()
		b.count("queued")
		b.gauge()
		return true
	default:
		if sw.n == 0 {
			delete(b.sessions, base)
			sw.cancel()
		}
		b.mu.Unlock()
		b.count("rejected")
		return false
	}
}

// run runs the workers until ctx ends.
func (b *background) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range backgroundWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case w := <-b.queue:
					b.gauge()
					b.do(ctx, w)
				}
			}
		})
	}
	wg.Wait()
}

func (b *background) do(stop context.Context, w backgroundWork) {
	b.mu.Lock()
	sw := b.sessions[w.session]
	b.mu.Unlock()
	if sw == nil { // forgotten while queued
		b.count("cancelled")
		return
	}
	ctx, cancel := context.WithTimeout(sw.ctx, backgroundTimeout)
	stopAfter := context.AfterFunc(stop, cancel)
	w.work(ctx)
	stopAfter()
	cancel()
	b.count("done")
	b.mu.Lock()
	if sw.n--; sw.n == 0 && b.sessions[w.session] == sw {
		delete(b.sessions, w.session)
		sw.cancel()
	}
	b.mu.Unlock()
}

func (b *background) count(result string) {
	if b.metrics != nil {
		b.metrics.BackgroundSummaries.WithLabelValues(result).Inc()
	}
}

func (b *background) gauge() {
	if b.metrics != nil {
		b.metrics.BackgroundQueue.Set(float64(len(b.queue)))
	}
}

// backgroundMetrics are the pool's metrics.
func backgroundMetrics() (*prometheus.CounterVec, prometheus.Gauge) {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compaction_api_background_summaries_total",
			Help: "Summarizations off the turn (prepared ahead or late) by what became of them: queued, rejected (queue full), done, cancelled (session deleted).",
		}, []string{"result"}), prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "compaction_api_background_queue",
			Help: "Summarizations off the turn waiting for a worker.",
		})
}
