package proxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harness9/compaction-operator/internal/metricsreg"
)

// Metrics are the proxy's Prometheus metrics. A nil *Metrics counts nothing.
type Metrics struct {
	// Requests counts chat requests by protocol and result: compacted, failed_open (the
	// compaction failed and the request went upstream as the agent sent it), not_decoded
	// (passed through: a body the proxy does not understand) and too_large.
	Requests *prometheus.CounterVec
	// UpstreamErrors counts requests the upstream could not be reached for.
	UpstreamErrors prometheus.Counter
	// OffloadHook counts new tool results sent to the OffloadHook by result: offloaded,
	// kept (the hook left it in the history) and failed_open (the call failed: the result
	// stays in the request).
	OffloadHook *prometheus.CounterVec
	// ReadBacks counts requests of the read-back route by result: ok, not_found,
	// bad_request, failed.
	ReadBacks *prometheus.CounterVec
	// HistoryReads counts requests of the loopback history routes by route (history,
	// search) and result: ok, not_found, bad_request, failed.
	HistoryReads *prometheus.CounterVec
}

// labelResult is the label every proxy counter splits by.
const labelResult = "result"

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	r := metricsreg.New(reg)
	m := &Metrics{
		Requests: r.CounterVec("compaction_proxy_requests_total",
			"Chat requests by protocol and result: compacted, failed_open (sent upstream uncompacted after a failed compaction), not_decoded, too_large.",
			"protocol", labelResult),
		UpstreamErrors: r.Counter("compaction_proxy_upstream_errors_total",
			"Requests the upstream could not be reached for (answered 502)."),
		OffloadHook: r.CounterVec("compaction_proxy_offload_hook_total",
			"New tool results over the hook threshold sent to the OffloadHook, by result: offloaded, kept, failed_open (kept in the request).",
			labelResult),
		ReadBacks: r.CounterVec("compaction_proxy_read_backs_total",
			"Requests of the read-back route (GET /compaction/v1/toolresults/{id}) by result: ok, not_found, bad_request, failed.",
			labelResult),
		HistoryReads: r.CounterVec("compaction_proxy_history_reads_total",
			"Requests of the history routes (GET /compaction/v1/history[/search]) by route (history, search) and result: ok, not_found, bad_request, failed.",
			"route", labelResult),
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("register proxy metrics: %w", err)
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

func (m *Metrics) hook(result string) {
	if m != nil {
		m.OffloadHook.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) readBack(result string) {
	if m != nil {
		m.ReadBacks.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) historyRead(route, result string) {
	if m != nil {
		m.HistoryReads.WithLabelValues(route, result).Inc()
	}
}
