package proxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus metrics. A nil *Metrics counts nothing.
type Metrics struct {
	// Requests counts chat requests by protocol and result: compacted, failed_open (the
	// compaction failed and the request went upstream as the agent sent it), not_decoded
	// (passed through: a body the proxy does not understand) and too_large.
	Requests *prometheus.CounterVec
	// UpstreamErrors counts requests the upstream could not be reached for.
	UpstreamErrors prometheus.Counter
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compaction_proxy_requests_total",
			Help: "Chat requests by protocol and result: compacted, failed_open (sent upstream uncompacted after a failed compaction), not_decoded, too_large.",
		}, []string{"protocol", "result"}),
		UpstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "compaction_proxy_upstream_errors_total",
			Help: "Requests the upstream could not be reached for (answered 502).",
		}),
	}
	for _, c := range []prometheus.Collector{m.Requests, m.UpstreamErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) request(protocol, result string) {
	if m != nil {
		m.Requests.WithLabelValues(protocol, result).Inc()
	}
}

func (m *Metrics) upstreamError() {
	if m != nil {
		m.UpstreamErrors.Inc()
	}
}
