package compactapi

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The in-flight budget bounds the memory of the requests being served at once. A request
// counts its body's size plus valueWeight bytes for each JSON value in it (what decoding
// makes of a value), at least minWeight; it holds that until it is answered. A request the
// budget cannot take is answered 429 with Retry-After, before its body is read.
const (
	DefaultMaxInflightBytes = 64 << 20
	// minWeight is what any request counts, also one without a body (a tool result or the
	// records, streamed through buffers of 32 KiB).
	minWeight = 64 << 10
	// valueWeight is what a JSON value costs decoded: about 110 bytes for a tiny message
	// with an unknown field (BenchmarkDecodeHostileBody), more for empty tool calls.
	valueWeight = 128
	// smallWeight: requests up to it (delta requests, offloads of ordinary tool results,
	// reads) may use the whole budget; larger ones only three quarters of it, so a burst of
	// large requests leaves room for the small ones of other sessions.
	smallWeight = 1 << 20
	// DefaultCallerInflightShare: one caller (callerOf: a ServiceAccount, or one pod's bound
	// tokens) may hold at most this part of the budget, 8 MiB of the default 64 MiB, so
	// uploads one caller stalls (counted at their Content-Length from the start, for up to
	// api.readTimeout) leave the rest to the others. A caller's only request is taken
	// whatever its size, as before.
	DefaultCallerInflightShare = 8
)

// budget is the in-flight budget, in bytes.
type budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
	// callerLimit is what one caller's requests may hold together (0: no share); callers
	// is what each caller holding anything holds.
	callerLimit int64
	callers     map[string]int64
	gauge       prometheus.Gauge
}

func newBudget(limit int64, gauge prometheus.Gauge) *budget {
	return &budget{limit: limit, gauge: gauge, callerLimit: limit / DefaultCallerInflightShare, callers: map[string]int64{}}
}

// largeLimit is the part of the budget large requests may hold.
func (b *budget) largeLimit() int64 { return b.limit - b.limit/4 }

// weight is what a request of bodyBytes bytes and values JSON values counts. A request
// larger than what the budget lets large requests hold counts that much, so it is taken
// when no other large request is served.
func (b *budget) weight(bodyBytes int64, values int) int64 {
	return min(max(bodyBytes+int64(values)*valueWeight, minWeight), max(b.largeLimit(), minWeight))
}

// resize changes what a request of caller ("": none) holds from held to want bytes (held 0:
// a new request) and reports whether the budget allowed it; on false the request still
// holds held. callerFull says the caller's share, not the budget, refused it.
func (b *budget) resize(caller string, held, want int64) (ok, callerFull bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.limit
	if want > smallWeight {
		limit = b.largeLimit()
	}
	used := b.used - held + want
	if want > held && used > limit {
		return false, false
	}
	if caller != "" {
		// The caller's other requests: with none, any request the budget takes is taken.
		others := b.callers[caller] - held
		if want > held && b.callerLimit > 0 && others > 0 && others+want > b.callerLimit {
			return false, true
		}
		if others+want == 0 {
			delete(b.callers, caller)
		} else {
			b.callers[caller] = others + want
		}
	}
	b.used = used
	if b.gauge != nil {
		b.gauge.Set(float64(used))
	}
	return true, false
}

// inflight is one request's share of the budget.
type inflight struct {
	b      *budget
	caller string
	held   int64
}

// admit takes weight of the budget for a request of caller (callerOf; "" for none), within
// the caller's share, or answers why not.
func (b *budget) admit(caller string, weight int64) (*inflight, error) {
	f := &inflight{b: b, caller: caller}
	if err := f.grow(weight); err != nil {
		return nil, err
	}
	return f, nil
}

// grow sets the request's share to weight (a larger one once its body is read).
func (f *inflight) grow(weight int64) error {
	if weight == f.held {
		return nil
	}
	ok, callerFull := f.b.resize(f.caller, f.held, weight)
	if callerFull {
		return &apiError{http.StatusTooManyRequests, ReasonTooManyRequests,
			fmt.Sprintf("this caller's requests being served hold their share of the compaction API's in-flight budget (%d KiB of %d MiB, api.maxInflightBytesPerCaller); retry shortly",
				f.b.callerLimit>>10, f.b.limit>>20)}
	}
	if !ok {
		return &apiError{http.StatusTooManyRequests, ReasonTooManyRequests,
			fmt.Sprintf("the compaction API is serving as much as its in-flight budget allows (%d MiB, api.maxInflightBytes); retry shortly",
				f.b.limit>>20)}
	}
	f.held = weight
	return nil
}

// release gives the request's share back.
func (f *inflight) release() {
	f.b.resize(f.caller, f.held, 0)
	f.held = 0
}
