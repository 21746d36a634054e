package metricsreg

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// What a Registrar creates is registered; after the first error (a name registered twice)
// Err says so and nothing more is registered.
func TestRegistrarRegistersUntilTheFirstError(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(reg)
	r.Counter("a_total", "a").Inc()
	r.CounterVec("b_total", "b", "l").WithLabelValues("x").Inc()
	r.Gauge("c", "c").Set(1)
	r.Histogram("d", "d", []float64{1}).Observe(1)
	r.HistogramVec("e", "e", []float64{1}, "l").WithLabelValues("x").Observe(1)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil || len(families) != 5 {
		t.Fatalf("gathered %d families, %v; want 5", len(families), err)
	}

	r.Counter("a_total", "a")
	var already prometheus.AlreadyRegisteredError
	if !errors.As(r.Err(), &already) {
		t.Fatalf("a name registered twice: %v, want AlreadyRegisteredError", r.Err())
	}
	r.Gauge("f", "f").Set(1)
	if families, _ := reg.Gather(); len(families) != 5 {
		t.Errorf("%d families after an error, want 5: nothing is registered after it", len(families))
	}
}
