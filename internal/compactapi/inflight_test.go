package compactapi

import (
	"errors"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestBudget: requests are admitted while the budget has room; large ones only into three
// quarters of it, so small ones still fit when large ones fill their part; a refused
// request is a 429 and holds nothing more; released shares are taken again.
func TestBudget(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "inflight"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(gauge)
	const limit = 16 << 20 // large requests: 12 MiB of it
	s := &Server{inflight: newBudget(limit, gauge)}
	held := func() int64 {
		t.Helper()
		if v := int64(metricValue(t, reg, "inflight", nil)); v != s.inflight.used {
			t.Fatalf("the gauge says %d held, the budget %d", v, s.inflight.used)
		}
		return s.inflight.used
	}
	admit := func(w int64) *inflight {
		t.Helper()
		f, err := s.inflight.admit("", w)
		if err != nil {
			t.Fatalf("admit %d KiB with %d KiB held: %v", w>>10, held()>>10, err)
		}
		return f
	}
	refused := func(w int64) {
		t.Helper()
		before := held()
		_, err := s.inflight.admit("", w)
		var ae *apiError
		if !errors.As(err, &ae) || ae.code != http.StatusTooManyRequests || ae.reason != ReasonTooManyRequests {
			t.Fatalf("admit %d KiB with %d KiB held: %v, want a 429", w>>10, before>>10, err)
		}
		if held() != before {
			t.Fatalf("a refused request changed the budget from %d to %d", before, held())
		}
	}

	large := make([]*inflight, 0, 3)
	large = append(large, admit(5<<20), admit(5<<20))
	refused(3 << 20) // 13 MiB of large requests: over three quarters
	large = append(large, admit(2<<20))
	refused(smallWeight + 1)
	// Small requests use the last quarter.
	small := make([]*inflight, 0, 4)
	for range 4 {
		small = append(small, admit(smallWeight))
	}
	refused(minWeight)
	if held() != limit {
		t.Fatalf("held %d, want the whole budget %d", held(), limit)
	}
	small[0].release()
	small[0].release() // twice is once
	f := admit(minWeight)
	// Growing a share once the body is read: refused, it keeps what it held.
	if err := f.grow(2 * smallWeight); err == nil {
		t.Fatal("a share grew past the budget")
	}
	if f.held != minWeight {
		t.Fatalf("a refused grow left the share at %d", f.held)
	}
	if err := f.grow(minWeight / 2); err != nil || f.held != minWeight/2 {
		t.Fatalf("shrinking a share: %v, held %d", err, f.held)
	}
	for _, f := range append(append(large, small...), f) {
		f.release()
	}
	if held() != 0 {
		t.Fatalf("everything released, %d still held", held())
	}
	// A request larger than the large part counts as the large part: it is taken alone.
	if w := s.inflight.weight(64<<20, 0); w != 12<<20 {
		t.Fatalf("weight of a 64 MiB body: %d, want the large part 12 MiB", w)
	}
	if w := s.inflight.weight(0, 0); w != minWeight {
		t.Fatalf("weight of a request without a body: %d, want %d", w, minWeight)
	}
	if w := s.inflight.weight(1<<20, 1000); w != 1<<20+1000*valueWeight {
		t.Fatalf("weight of a 1 MiB body of 1000 JSON values: %d", w)
	}
	huge := admit(s.inflight.weight(64<<20, 0))
	refused(smallWeight + 1)
	huge.release()
}
