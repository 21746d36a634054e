// Package statusbatch writes the AgentSession status changes of the compaction API: turns,
// offloads at source and pass-through reports only record what they changed, and a flush
// loop writes each session's status off the request path, coalesced (at most one write per
// flush interval and per status interval of the session; counters are added, so none is
// lost).
package statusbatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

// maxAnchorChars bounds an anchor's content in status (the CRD allows 2000).
const maxAnchorChars = 2000

// DefaultFlushInterval is Config.FlushInterval's default.
const DefaultFlushInterval = 500 * time.Millisecond

// Config is what a Batcher writes with and how often.
type Config struct {
	// Cache reads a session for the first attempt of a write (the informer's copy);
	// APIReader reads it fresh when that attempt conflicts or would change nothing.
	Cache, APIReader client.Reader
	// Writer updates the sessions' status.
	Writer client.StatusClient
	// FlushInterval is the least time between two flushes (0: DefaultFlushInterval).
	FlushInterval time.Duration
	// Interval is the least time between two status writes of one session (0: every flush
	// writes every pending change).
	Interval time.Duration
	// UsageInterval is the least time between two writes of a session's tier and usage for
	// turns that changed nothing.
	UsageInterval time.Duration
	// PassThroughQuiet is how long after the last pass-through report a compacted request
	// ends the PassThrough condition (0: DefaultPassThroughQuiet).
	PassThroughQuiet time.Duration
	// Writes counts the writes by result (written, unchanged, failed); nil counts none.
	Writes *prometheus.CounterVec
	Log    logr.Logger
}

// Session is the AgentSession a change is recorded for.
type Session struct {
	// Obj is the session's cached copy, which the request was served from.
	Obj *compactionv1alpha1.AgentSession
	// AnchorsInStatus: the session's policy asks for the anchors in status.
	AnchorsInStatus bool
}

// key is the key of sess's pending change.
func (sess Session) key() types.NamespacedName {
	return types.NamespacedName{Namespace: sess.Obj.Namespace, Name: sess.Obj.Name}
}

// Turn is what a compact request of the session did.
type Turn struct {
	Record *compaction.CompactionRecord
	// Usage is the calibrated usage of the turn's input view, which chose its tier.
	Usage float64
	// Window is the context window of the session's policy.
	Window int
}

// pendingStatus is what compactions of one session changed since its last status write.
type pendingStatus struct {
	uid types.UID
	// last is the latest compaction above TierNone, nil when only usage changed.
	last *compaction.CompactionRecord
	// tier and usage are those of the latest turn; turn is false when only offloads at
	// source are pending (they say nothing about the session's tier).
	turn  bool
	tier  compaction.Tier
	usage string
	// counters to add.
	counts                         tierCounts
	summarizer                     summarizerWork
	offloadedCount, offloadedBytes int64
	// includeAnchors is the policy's anchorsInStatus at the latest change: without it, the
	// write clears status.anchors. anchorsKnown: a change of a route that resolved the
	// policy set it (a pass-through report does not, and leaves status.anchors as it is).
	includeAnchors, anchorsKnown bool
	// fit is what the latest turn said of the window against the view's fixed part (nil:
	// nothing to write).
	fit *windowFit
	// passThrough is what proxies reported of requests they forwarded uncompacted.
	passThrough passThroughWork
	// compacted is when a request of the session was last compacted (zero: none since the
	// last write): it may end the PassThrough condition (see resumeCompacting).
	compacted time.Time
}

// Batcher coalesces status writes: compactions only record what changed, and a flush loop
// (Run) writes each session's status off the request path, at most once per flush interval
// and per status interval of the session. A burst of compactions of one session becomes one
// write; per-tier counters are added, so none is lost.
type Batcher struct {
	cfg     Config
	mu      sync.Mutex
	pending map[types.NamespacedName]*pendingStatus
	// written is this replica's last status write of each session, for the sessions written
	// less than a status interval ago.
	written map[types.NamespacedName]statusWrite
	kick    chan struct{}
	// usageWritten paces the status writes of turns that compact nothing.
	usageWritten usageMarks
}

// New returns a Batcher that writes with cfg; Run flushes it.
func New(cfg Config) *Batcher {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.PassThroughQuiet <= 0 {
		cfg.PassThroughQuiet = DefaultPassThroughQuiet
	}
	return &Batcher{cfg: cfg, pending: make(map[types.NamespacedName]*pendingStatus), written: make(map[types.NamespacedName]statusWrite),
		kick: make(chan struct{}, 1)}
}

// Pending is how many sessions have changes waiting to be written.
func (b *Batcher) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// UsageWritten counts the usage of session uid as written now: the next turn of the session
// that changes nothing writes none until UsageInterval is over.
func (b *Batcher) UsageWritten(uid types.UID) {
	b.usageWritten.due(uid, b.cfg.UsageInterval)
}

// statusWrite is when a status was written and the resourceVersion the write made.
type statusWrite struct {
	at time.Time
	rv string
}

// take removes and returns the pending changes that may be written at now: all of them with
// all or an interval of 0, else those of sessions not written in the last interval. waiting
// is how many stay pending.
func (b *Batcher) take(now time.Time, interval time.Duration, all bool) (due map[types.NamespacedName]*pendingStatus, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, w := range b.written {
		if now.Sub(w.at) >= interval {
			delete(b.written, key)
		}
	}
	if all || interval <= 0 || len(b.written) == 0 {
		due = b.pending
		b.pending = make(map[types.NamespacedName]*pendingStatus)
		b.inFlight(due, now)
		return due, 0
	}
	due = make(map[types.NamespacedName]*pendingStatus, len(b.pending))
	for key, p := range b.pending {
		if _, recent := b.written[key]; !recent {
			due[key] = p
			delete(b.pending, key)
		}
	}
	b.inFlight(due, now)
	return due, len(b.pending)
}

// inFlight marks the sessions of due as being written at now, with no resourceVersion yet:
// until the write is done (wrote) or fails (requeue), a turn that would change nothing on the
// cached copy is not skipped (settled), as that copy may be older than the write. Call with
// b.mu held.
func (b *Batcher) inFlight(due map[types.NamespacedName]*pendingStatus, now time.Time) {
	for key := range due {
		b.written[key] = statusWrite{at: now}
	}
}

// settled reports whether nothing of key waits to be written or is being written, and cached,
// the session's cached copy, shows this replica's last write of it: it is that write's
// resourceVersion, or the write is older than settle. Call with b.mu held.
func (b *Batcher) settled(key types.NamespacedName, cached *compactionv1alpha1.AgentSession, now time.Time, settle time.Duration) bool {
	if b.pending[key] != nil {
		return false
	}
	w, ok := b.written[key]
	return !ok || (w.rv != "" && w.rv == cached.ResourceVersion) || now.Sub(w.at) >= settle
}

// forget drops the in-flight mark of key after a flush that wrote nothing.
func (b *Batcher) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgetLocked(key)
}

func (b *Batcher) forgetLocked(key types.NamespacedName) {
	if w, ok := b.written[key]; ok && w.rv == "" {
		delete(b.written, key)
	}
}

// wrote notes that the status of key was written at t, making resourceVersion rv.
func (b *Batcher) wrote(key types.NamespacedName, t time.Time, rv string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.written[key] = statusWrite{at: t, rv: rv}
}

// statusShows reports whether obj's status already has tier and usage.
func statusShows(obj *compactionv1alpha1.AgentSession, tier compaction.Tier, usage string) bool {
	return string(obj.Status.Tier) == tier.String() && obj.Status.ContextUsage == usage
}

// entry returns the pending change of sess, creating it, with the anchorsInStatus of sess's
// policy; call with b.mu held.
func (b *Batcher) entry(sess Session) *pendingStatus {
	p := b.pendingOf(sess.Obj)
	p.includeAnchors, p.anchorsKnown = sess.AnchorsInStatus, true
	return p
}

// pendingOf returns the pending change of the session obj, creating it; call with b.mu held.
func (b *Batcher) pendingOf(obj *compactionv1alpha1.AgentSession) *pendingStatus {
	key := Session{Obj: obj}.key()
	p := b.pending[key]
	if p == nil || p.uid != obj.UID {
		p = &pendingStatus{uid: obj.UID}
		b.pending[key] = p
	}
	return p
}

// requeue puts back the change of a failed write, under any change that arrived since (which
// is newer): counters are added, the newer turn and compaction win.
func (b *Batcher) requeue(key types.NamespacedName, failed *pendingStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgetLocked(key) // retried at the next flush, not after a status interval
	cur := b.pending[key]
	switch {
	case cur == nil:
		b.pending[key] = failed
		return
	case cur.uid != failed.uid:
		return // the session was re-created: the failed numbers were the old one's
	}
	if !cur.turn {
		cur.turn, cur.tier, cur.usage = failed.turn, failed.tier, failed.usage
	}
	if cur.fit == nil {
		cur.fit = failed.fit
	}
	if cur.last == nil {
		cur.last = failed.last
	}
	cur.counts.add(failed.counts)
	cur.summarizer.add(failed.summarizer)
	cur.offloadedCount += failed.offloadedCount
	cur.offloadedBytes += failed.offloadedBytes
	if !cur.anchorsKnown {
		cur.includeAnchors, cur.anchorsKnown = failed.includeAnchors, failed.anchorsKnown
	}
	cur.passThrough.add(failed.passThrough)
	if failed.compacted.After(cur.compacted) {
		cur.compacted = failed.compacted
	}
}

// tierCounts are compactions per tier, to add to status.compactions.
type tierCounts struct{ warn, soft, full, emergency int64 }

func (c *tierCounts) add(o tierCounts) {
	c.warn += o.warn
	c.soft += o.soft
	c.full += o.full
	c.emergency += o.emergency
}

// summarizerWork is the summarizer's work, to add to status.summarizer: its calls and
// tokens, and what was summarized off the turn (prepared ahead or made late).
type summarizerWork struct {
	calls, inputTokens, outputTokens, throttled                                 int64
	preparedCalls, preparedUsed, preparedWasted, preparedWastedTokens, deferred int64
}

func (w *summarizerWork) add(o summarizerWork) {
	w.calls += o.calls
	w.inputTokens += o.inputTokens
	w.outputTokens += o.outputTokens
	w.throttled += o.throttled
	w.preparedCalls += o.preparedCalls
	w.preparedUsed += o.preparedUsed
	w.preparedWasted += o.preparedWasted
	w.preparedWastedTokens += o.preparedWastedTokens
	w.deferred += o.deferred
}

// summarizerUsage is the summarizer's work recorded in rec; a negative count (never written
// by the engine, but one would fail every status write of the session) is 0.
func summarizerUsage(rec *compaction.CompactionRecord) summarizerWork {
	w := summarizerWork{calls: int64(max(rec.SummarizerCalls, 0)),
		inputTokens: int64(max(rec.SummarizerInputTokens, 0)), outputTokens: int64(max(rec.SummarizerOutputTokens, 0))}
	if rec.SummarizerThrottled {
		w.throttled = 1
	}
	// A started summarization is counted when it starts; its call and tokens join calls and
	// the token counters in the record of the compaction that uses or discards it.
	if rec.PreparedStarted != "" {
		w.preparedCalls = 1
	}
	w.preparedUsed = int64(max(rec.PreparedUsed, 0))
	w.preparedWasted = int64(max(rec.PreparedWasted, 0))
	w.preparedWastedTokens = int64(max(rec.PreparedWastedTokens, 0))
	if rec.SummarizerDeferred {
		w.deferred = 1
	}
	return w
}

// addTo adds n to the status counter *dst, leaving an absent counter absent while n is 0
// (status counters are pointers: absent means none yet).
func addTo(dst **int64, n int64) {
	if n == 0 {
		return
	}
	*dst = ptr.To(ptr.Deref(*dst, 0) + n)
}

// addCounts adds the per-tier counters of src to dst.
func addCounts(dst *compactionv1alpha1.TierCounts, src tierCounts) {
	addTo(&dst.Warn, src.warn)
	addTo(&dst.Soft, src.soft)
	addTo(&dst.Full, src.full)
	addTo(&dst.Emergency, src.emergency)
}

// addSummarizerUsage adds the summarizer counters of src to dst.
func addSummarizerUsage(dst *compactionv1alpha1.SummarizerUsage, src summarizerWork) {
	addTo(&dst.Calls, src.calls)
	addTo(&dst.InputTokens, src.inputTokens)
	addTo(&dst.OutputTokens, src.outputTokens)
	addTo(&dst.Throttled, src.throttled)
	addTo(&dst.PreparedCalls, src.preparedCalls)
	addTo(&dst.PreparedUsed, src.preparedUsed)
	addTo(&dst.PreparedWasted, src.preparedWasted)
	addTo(&dst.PreparedWastedTokens, src.preparedWastedTokens)
	addTo(&dst.Deferred, src.deferred)
}

// maxUsageMarks bounds usageMarks: past it, the least recently written session may have its
// usage written again before its interval is over, which costs one status write.
const maxUsageMarks = 100000

// usageMarks remembers when the usage of recent sessions was last written for a turn that
// changed nothing, in an LRU (not golang-lru's expirable one, whose cleanup goroutine would
// outlive the server). The zero value is ready.
type usageMarks struct {
	mu     sync.Mutex // makes due's look and mark one step
	recent *lru.Cache[types.UID, time.Time]
}

// due reports whether the usage of session uid may be written now, at most once per
// interval, and if so counts it as written.
func (u *usageMarks) due(uid types.UID, interval time.Duration) bool {
	if interval <= 0 {
		return true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.recent == nil {
		u.recent, _ = lru.New[types.UID, time.Time](maxUsageMarks) // errors only for a size below 1
	}
	now := time.Now()
	if at, written := u.recent.Get(uid); written && now.Sub(at) < interval {
		return false
	}
	u.recent.Add(uid, now)
	return true
}

func (b *Batcher) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// RecordTurn notes what a turn changed. A compaction (a record that changed the view) is
// always written. The tier and usage of a turn that changed nothing (TierNone, or a tier
// whose compaction waited for a saving worth its cost) are written at most once per
// UsageInterval per session. The summarizer's work is always counted, also in a turn that
// changed nothing (the engine may call the summarizer and then not apply a summary that
// saves too little).
//
// A turn also ends the session's PassThrough condition when the last pass-through report is
// older than the quiet interval (see resumeCompacting): such a turn is written even when it
// would not be otherwise.
func (b *Batcher) RecordTurn(sess Session, t Turn) {
	now := time.Now()
	rec := t.Record
	spent := summarizerUsage(rec)
	changed := rec.ChangedView()
	resume := passThroughOver(sess.Obj, now, b.cfg.PassThroughQuiet)
	fitChanged := windowFitChanged(sess.Obj, rec)
	turn := changed || fitChanged || b.usageWritten.due(sess.Obj.UID, b.cfg.UsageInterval)
	if !turn && spent == (summarizerWork{}) && !resume {
		return
	}
	usage := fmt.Sprintf("%.2f", t.Usage)
	settle := max(b.cfg.Interval, b.cfg.FlushInterval, DefaultFlushInterval)
	b.mu.Lock()
	if !changed && !fitChanged && spent == (summarizerWork{}) && !resume && statusShows(sess.Obj, rec.Tier, usage) &&
		b.settled(sess.key(), sess.Obj, now, settle) {
		// The session's status already says this (the cache's copy, which this request was
		// served from, and which has had time to see this replica's last write): a write
		// would change nothing.
		b.mu.Unlock()
		return
	}
	p := b.entry(sess)
	if turn {
		p.turn, p.tier, p.usage = true, rec.Tier, usage
		p.fit = windowFitOf(t.Window, rec)
	}
	p.compacted = now
	p.summarizer.add(spent)
	if changed {
		p.last = rec
		p.offloadedCount += int64(len(rec.Offloaded))
		p.offloadedBytes += int64(rec.OffloadedBytes())
		switch rec.Tier {
		case compaction.TierWarn:
			p.counts.warn++
		case compaction.TierSoft:
			p.counts.soft++
		case compaction.TierFull:
			p.counts.full++
		case compaction.TierEmergency:
			p.counts.emergency++
		}
	}
	b.mu.Unlock()
	b.wake()
}

// RecordOffload notes an offload at source of bytes.
func (b *Batcher) RecordOffload(sess Session, bytes int) {
	b.mu.Lock()
	p := b.entry(sess)
	p.offloadedCount++
	p.offloadedBytes += int64(bytes)
	b.mu.Unlock()
	b.wake()
}

// Run flushes pending status changes until stop is closed (after the server has stopped
// taking requests), then all of them once more. Writes that fail (the API server
// restarting, say) are kept and retried with a growing pause, so the status catches up once
// it is back.
func (b *Batcher) Run(stop <-chan struct{}) {
	pause := b.cfg.FlushInterval
	for {
		select {
		case <-stop:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			b.flush(ctx, true)
			cancel()
			return
		case <-b.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		failed, waiting := b.flush(ctx, false)
		cancel()
		if failed > 0 {
			pause = min(2*pause, maxStatusRetryPause)
		} else {
			pause = b.cfg.FlushInterval
		}
		if failed > 0 || waiting > 0 {
			b.wake() // retry the kept changes, write the waiting ones, even if no request comes
		}
		// Let the next changes gather: at most one write per session per interval.
		select {
		case <-stop:
		case <-time.After(pause):
		}
	}
}

// maxStatusRetryPause bounds the pause between flushes while status writes fail.
const maxStatusRetryPause = 10 * time.Second

// Flush writes the pending changes that are due (see flush) and returns how many writes
// failed.
func (b *Batcher) Flush(ctx context.Context) int {
	failed, _ := b.flush(ctx, false)
	return failed
}

// flush writes the pending changes, a few sessions at a time: all of them, or those of
// sessions not written in the last Interval. It returns how many writes failed (their
// changes are pending again) and how many changes wait for their session's interval.
func (b *Batcher) flush(ctx context.Context, all bool) (failed, waiting int) {
	batch, waiting := b.take(time.Now(), b.cfg.Interval, all)

	const workers = 8
	keys := make(chan types.NamespacedName)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range min(workers, len(batch)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range keys {
				rv, err := b.write(ctx, key, batch[key])
				switch {
				case err == nil && rv != "":
					b.wrote(key, time.Now(), rv)
					b.count("written")
				case err == nil || apierrors.IsNotFound(err):
					b.forget(key)
					b.count("unchanged")
				default:
					b.count("failed")
					b.requeue(key, batch[key])
					mu.Lock()
					if failed++; firstErr == nil {
						firstErr = fmt.Errorf("session %s: %w", key, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for key := range batch {
		keys <- key
	}
	close(keys)
	wg.Wait()
	if failed > 0 {
		b.cfg.Log.Error(firstErr, "status writes failed; kept for a retry", "failed", failed, "sessions", len(batch))
	}
	return failed, waiting
}

// count counts a write with result.
func (b *Batcher) count(result string) {
	if b.cfg.Writes != nil {
		b.cfg.Writes.WithLabelValues(result).Inc()
	}
}

// write applies p to the session's status and returns the resourceVersion it wrote
// ("": nothing to write). The first attempt updates the informer's copy: current unless a
// write raced it, and then the update fails with a conflict. A conflict, or a copy on which p would change nothing (which a stale
// copy could claim), is decided on a fresh read from the API server, retried on conflict.
func (b *Batcher) write(ctx context.Context, key types.NamespacedName, p *pendingStatus) (string, error) {
	rv, skipped, err := b.apply(ctx, b.cfg.Cache, key, p)
	if err == nil && !skipped {
		return rv, nil
	}
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return "", err
	}
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var err error
		rv, _, err = b.apply(ctx, b.cfg.APIReader, key, p)
		return err
	})
	return rv, err
}

// apply reads the session with r, applies p and updates it with the read
// resourceVersion; rv is the resourceVersion the update made. skipped: nothing to write (no
// change, or a session re-created meanwhile, whose numbers these are not).
func (b *Batcher) apply(ctx context.Context, r client.Reader, key types.NamespacedName, p *pendingStatus) (rv string, skipped bool, err error) {
	var obj compactionv1alpha1.AgentSession
	if err := r.Get(ctx, key, &obj); err != nil {
		return "", false, err
	}
	if obj.UID != p.uid {
		return "", true, nil
	}
	st := &obj.Status
	before := st.DeepCopy()
	if p.turn {
		st.Tier = compactionv1alpha1.Tier(p.tier.String())
		st.ContextUsage = p.usage
	}
	addCounts(&st.Compactions, p.counts)
	addSummarizerUsage(&st.Summarizer, p.summarizer)
	addTo(&st.OffloadedCount, p.offloadedCount)
	addTo(&st.OffloadedBytes, p.offloadedBytes)
	if rec := p.last; rec != nil {
		st.CompressionRatio = fmt.Sprintf("%.2f", rec.CompressionRatio)
		st.TokensBefore, st.TokensAfter = ptr.To(int64(rec.TokensBefore)), ptr.To(int64(rec.TokensAfter))
		st.MessagesBefore, st.MessagesAfter = ptr.To(int64(rec.MsgsBefore)), ptr.To(int64(rec.MsgsAfter))
		st.LastCompactionTime = &metav1.Time{Time: rec.Timestamp}
		st.Watermark = ptr.To(int64(rec.WatermarkAfter))
		if p.includeAnchors && len(rec.Anchors) > 0 {
			st.Anchors = statusAnchors(rec.Anchors)
		}
	}
	if p.anchorsKnown && !p.includeAnchors {
		st.Anchors = nil
	}
	applyWindowFit(&obj, p.fit)
	applyPassThrough(&obj, p.passThrough)
	if !p.compacted.IsZero() {
		resumeCompacting(&obj, p.compacted, b.cfg.PassThroughQuiet)
	}
	if equality.Semantic.DeepEqual(before, st) {
		return "", true, nil
	}
	if err := b.cfg.Writer.Status().Update(ctx, &obj); err != nil {
		return "", false, err
	}
	return obj.ResourceVersion, false, nil
}

// statusAnchors keeps the available anchors, one per type, bounded in size.
func statusAnchors(anchors []compaction.Anchor) []compactionv1alpha1.Anchor {
	out := make([]compactionv1alpha1.Anchor, 0, len(anchors))
	for _, a := range anchors {
		if !a.Available() {
			continue
		}
		content := a.Content
		if len(content) > maxAnchorChars {
			cut := maxAnchorChars - len("…")
			for cut > 0 && !utf8RuneStart(content[cut]) {
				cut--
			}
			content = content[:cut] + "…"
		}
		t, ok := compactionv1alpha1.ParseAnchorType(string(a.Type))
		if !ok || content == "" {
			continue // an anchor type the API does not know would fail the whole status write
		}
		out = append(out, compactionv1alpha1.Anchor{Type: t, Content: content})
	}
	if len(out) > 5 {
		out = out[:5]
	}
	return out
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
