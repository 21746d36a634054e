package compactapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/metricsreg"
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

// goneSessions bounds the deleted sessions a replica remembers, so a turn that was already
// past its lookup when its session was deleted cannot start work for it again (a session's
// UID is never reused).
const goneSessions = 4096

// background is the replica's pool for summarizations off the turn. Its workers start with
// the server (run) and stop with it.
type background struct {
	queue   chan backgroundWork
	metrics *Metrics

	mu       sync.Mutex
	sessions map[string]*sessionWork // by the session's own ID
	gone     *lru.Cache[string, struct{}]
	// watched: the sessions' deletions are watched (watch); under watchMu, as the handler
	// registered takes mu.
	watchMu sync.Mutex
	watched bool
}

type backgroundWork struct {
	session string
	sw      *sessionWork
	work    func(context.Context)
}

// sessionWork is the context a session's work runs on: cancelled once none is left, or
// with compaction.ErrSessionGone when the session is deleted (forget).
type sessionWork struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	n      int // queued or running
}

var _ compaction.Background = (*background)(nil)

func newBackground(m *Metrics) *background {
	gone, err := lru.New[string, struct{}](goneSessions)
	if err != nil {
		panic(err) // only for a size <= 0
	}
	return &background{queue: make(chan backgroundWork, backgroundQueue), metrics: m, sessions: map[string]*sessionWork{}, gone: gone}
}

// Go implements compaction.Background.
func (b *background) Go(sessionID string, work func(context.Context)) bool {
	base, _ := compaction.SplitSessionID(sessionID)
	b.mu.Lock()
	if b.gone.Contains(base) {
		b.mu.Unlock()
		b.count("cancelled")
		return false
	}
	sw := b.sessions[base]
	if sw == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		sw = &sessionWork{ctx: ctx, cancel: cancel}
		b.sessions[base] = sw
	}
	select {
	case b.queue <- backgroundWork{session: base, sw: sw, work: work}:
		sw.n++
		b.mu.Unlock()
		b.count("queued")
		b.gauge()
		return true
	default:
		if sw.n == 0 {
			delete(b.sessions, base)
			sw.cancel(nil)
		}
		b.mu.Unlock()
		b.count("rejected")
		return false
	}
}

// forget cancels the work of a deleted session (its session UID, or any of its
// conversations' IDs): running work sees its context cancelled with
// compaction.ErrSessionGone (and stores nothing), queued work is dropped when a worker
// takes it, and later work for it is refused.
func (b *background) forget(sessionID string) {
	base, _ := compaction.SplitSessionID(sessionID)
	b.mu.Lock()
	b.gone.Add(base, struct{}{})
	sw := b.sessions[base]
	delete(b.sessions, base)
	b.mu.Unlock()
	if sw != nil {
		sw.cancel(compaction.ErrSessionGone)
	}
}

// watch has gone called with the UID of each AgentSession being deleted (its
// deletionTimestamp set) or gone, from informers (the manager's cache); once: later calls
// do nothing. It is called before the first work is taken (engineFor), so no session's work
// can miss its deletion.
func (b *background) watch(ctx context.Context, informers cache.Informers, gone func(uid string)) error {
	b.watchMu.Lock()
	defer b.watchMu.Unlock()
	if b.watched {
		return nil
	}
	inf, err := informers.GetInformer(ctx, &compactionv1alpha1.AgentSession{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("AgentSession informer: %w", err)
	}
	deleting := func(obj any) {
		if s, ok := obj.(*compactionv1alpha1.AgentSession); ok && !s.DeletionTimestamp.IsZero() {
			gone(string(s.UID))
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    deleting,
		UpdateFunc: func(_, obj any) { deleting(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if s, ok := obj.(*compactionv1alpha1.AgentSession); ok {
				gone(string(s.UID))
			}
		},
	}); err != nil {
		return fmt.Errorf("AgentSession informer: %w", err)
	}
	b.watched = true
	return nil
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
	defer b.finish(w)
	if w.sw.ctx.Err() != nil { // its session was deleted while the work was queued
		b.count("cancelled")
		return
	}
	ctx, cancel := context.WithTimeout(w.sw.ctx, backgroundTimeout)
	stopAfter := context.AfterFunc(stop, cancel)
	w.work(ctx)
	stopAfter()
	cancel()
	if errors.Is(context.Cause(w.sw.ctx), compaction.ErrSessionGone) {
		b.count("cancelled")
		return
	}
	b.count("done")
}

// finish counts w's work out of its session's, ending the session's context with the last.
func (b *background) finish(w backgroundWork) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.sw.n--; w.sw.n == 0 && b.sessions[w.session] == w.sw {
		delete(b.sessions, w.session)
		w.sw.cancel(nil)
	}
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

// backgroundMetrics are the pool's metrics, registered by r.
func backgroundMetrics(r *metricsreg.Registrar) (*prometheus.CounterVec, prometheus.Gauge) {
	return r.CounterVec("compaction_api_background_summaries_total",
			"Summarizations off the turn (prepared ahead or late) by what became of them: queued, rejected (queue full), done, cancelled (session deleted: dropped from the queue, stopped while running, or refused).",
			"result"),
		r.Gauge("compaction_api_background_queue", "Summarizations off the turn waiting for a worker.")
}
