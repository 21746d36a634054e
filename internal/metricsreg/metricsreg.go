// Package metricsreg creates Prometheus collectors and registers them in one step, so a
// component declares each metric once: with a list of collectors to register kept apart
// from their creation, a metric added to one and not the other is never exported.
package metricsreg

import "github.com/prometheus/client_golang/prometheus"

// Registrar registers every collector it creates on one Registerer. The first registration
// error is kept for Err and nothing is registered after it: the caller fails, and what was
// registered before stays, as with a list registered in order.
type Registrar struct {
	reg prometheus.Registerer
	err error
}

// New is a Registrar on reg.
func New(reg prometheus.Registerer) *Registrar { return &Registrar{reg: reg} }

// Err is the first registration error, nil when every collector was registered.
func (r *Registrar) Err() error { return r.err }

// Register registers c (a collector not made here, such as one computed at scrape time).
func (r *Registrar) Register(c prometheus.Collector) {
	if r.err == nil {
		r.err = r.reg.Register(c)
	}
}

// Counter is a registered counter.
func (r *Registrar) Counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	r.Register(c)
	return c
}

// CounterVec is a registered counter split by labels.
func (r *Registrar) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	r.Register(c)
	return c
}

// Gauge is a registered gauge.
func (r *Registrar) Gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	r.Register(g)
	return g
}

// Histogram is a registered histogram with buckets.
func (r *Registrar) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	r.Register(h)
	return h
}

// HistogramVec is a registered histogram with buckets, split by labels.
func (r *Registrar) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	r.Register(h)
	return h
}
