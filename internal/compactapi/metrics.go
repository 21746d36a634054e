package compactapi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/metricsreg"
)

// routeLabel names the API route (compact, toolresults, records, ...) in metrics and logs.
const routeLabel = "route"

// summarizerLabel names the summarizer ("extractive", "openai") in the summarizer metrics.
const summarizerLabel = "summarizer"

// Metrics of the compaction API.
type Metrics struct {
	Requests          *prometheus.CounterVec
	RequestDuration   *prometheus.HistogramVec
	Compactions       *prometheus.CounterVec
	CompressionRatio  prometheus.Histogram
	TokensSaved       prometheus.Counter
	OffloadBytes      prometheus.Counter
	SummarizerErrors  *prometheus.CounterVec
	SummarizerLatency *prometheus.HistogramVec
	SummarizerCalls   *prometheus.CounterVec
	SummarizerTokens  *prometheus.CounterVec
	StatusWrites      *prometheus.CounterVec
	Throttled         *prometheus.CounterVec
	Inflight          prometheus.Gauge
	TokenReviews      *prometheus.CounterVec
	TokensRefused     *prometheus.CounterVec
	// PassThroughReports and PassThroughRequests count the pass-through reports of
	// compaction-proxies and the requests they report, by reason.
	PassThroughReports  *prometheus.CounterVec
	PassThroughRequests *prometheus.CounterVec
	// BackgroundSummaries and BackgroundQueue are the pool of summarizations off the turn.
	BackgroundSummaries *prometheus.CounterVec
	BackgroundQueue     prometheus.Gauge
}

// NewMetrics creates the API's metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	r := metricsreg.New(reg)
	m := &Metrics{
		Requests: r.CounterVec("compaction_api_requests_total", "Compaction API requests by route and HTTP status code.",
			routeLabel, "code"),
		RequestDuration: r.HistogramVec("compaction_api_request_duration_seconds", "Compaction API request latency by route.",
			[]float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, routeLabel),
		Compactions: r.CounterVec("compaction_compactions_total",
			"Turns by the tier they reached (None: turns that needed no compaction), also those above None whose compaction waited and changed nothing (status.compactions counts only compactions that changed the view).",
			"tier"),
		CompressionRatio: r.Histogram("compaction_compression_ratio", "1 - tokensAfter/tokensBefore of compactions that changed the view.",
			prometheus.LinearBuckets(0, 0.1, 11)),
		TokensSaved:  r.Counter("compaction_tokens_saved_total", "Estimated tokens removed from agents' views by compaction."),
		OffloadBytes: r.Counter("compaction_offload_bytes_total", "Bytes of tool results offloaded to storage."),
		SummarizerErrors: r.CounterVec("compaction_summarizer_errors_total", "Failed summarizer calls (the compaction fell back), by summarizer.",
			summarizerLabel),
		SummarizerLatency: r.HistogramVec("compaction_summarizer_duration_seconds", "Summarizer call latency, by summarizer.",
			[]float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, summarizerLabel),
		SummarizerCalls: r.CounterVec("compaction_summarizer_calls_total",
			"Summarizer calls of compactions, as the compaction records count them, by the policy's summarizer.",
			summarizerLabel),
		SummarizerTokens: r.CounterVec("compaction_summarizer_tokens_total",
			"Tokens of the summarizer calls of compactions, by the policy's summarizer and direction (input: prompt, "+
				"output: completion): as the summarizer's server reported them, estimated when it reported none.",
			summarizerLabel, "direction"),
		StatusWrites: r.CounterVec("compaction_api_status_writes_total",
			"AgentSession status writes of the compaction API, by result (written, unchanged, failed and kept for a retry).",
			"result"),
		Throttled: r.CounterVec("compaction_api_throttled_requests_total",
			"Compaction API requests answered 429 because the in-flight budget (api.maxInflightBytes) could not take them, by route.",
			routeLabel),
		Inflight: r.Gauge("compaction_api_inflight_bytes",
			"Bytes of the in-flight budget held by the compaction API requests being served (bodies and what decoding them holds)."),
		TokenReviews: r.CounterVec("compaction_api_token_reviews_total",
			"TokenReviews of the compaction API's callers' tokens, by result (authenticated, rejected, error).",
			"result"),
		TokensRefused: r.CounterVec("compaction_api_tokens_refused_total",
			"Bearer tokens refused without a TokenReview, by reason (malformed: not a JWT; rate_limited: over api.reviews.newTokenRate, answered 429), and requests refused without a SubjectAccessReview (caller_rate_limited: the caller asked about more new sessions than its bucket allows, answered 429).",
			"reason"),
		PassThroughReports: r.CounterVec("compaction_api_passthrough_reports_total",
			"Pass-through reports of compaction-proxies (requests they forwarded to the LLM uncompacted), by reason (NotDecodable, StatefulRequest, TooLarge, UnsupportedRequest, CompactionFailed, WebSocket).",
			"reason"),
		PassThroughRequests: r.CounterVec("compaction_api_passthrough_requests_total",
			"Requests compaction-proxies reported they forwarded to the LLM uncompacted (the count of their pass-through reports), by reason.",
			"reason"),
	}
	m.BackgroundSummaries, m.BackgroundQueue = backgroundMetrics(r)
	if err := r.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// observeCompaction counts a compaction of a session whose policy's summarizer is named
// summarizer ("extractive" or "openai").
func (m *Metrics) observeCompaction(summarizer string, rec *compaction.CompactionRecord) {
	m.Compactions.WithLabelValues(rec.Tier.String()).Inc()
	// A negative count (never written by the engine) counts as 0, as in status.summarizer.
	calls, in, out := max(rec.SummarizerCalls, 0), max(rec.SummarizerInputTokens, 0), max(rec.SummarizerOutputTokens, 0)
	if calls > 0 || in > 0 || out > 0 {
		m.SummarizerCalls.WithLabelValues(summarizer).Add(float64(calls))
		m.SummarizerTokens.WithLabelValues(summarizer, "input").Add(float64(in))
		m.SummarizerTokens.WithLabelValues(summarizer, "output").Add(float64(out))
	}
	if !rec.ChangedView() {
		return // a turn that waited saved nothing: its ratio of 0 is no compaction's
	}
	m.CompressionRatio.Observe(rec.CompressionRatio)
	if saved := rec.TokensBefore - rec.TokensAfter; saved > 0 {
		m.TokensSaved.Add(float64(saved))
	}
	m.OffloadBytes.Add(float64(rec.OffloadedBytes()))
}

// timedSummarizer counts and times the calls of a summarizer. It is a
// compaction.ResultSummarizer whatever it wraps, so the engine still gets the server's
// usage (an OpenAI summarizer) or the anchors as values (the extractive one) through it.
type timedSummarizer struct {
	inner compaction.Summarizer
	m     *Metrics
}

// timed wraps inner to time its calls.
func (m *Metrics) timed(inner compaction.Summarizer) compaction.Summarizer {
	return timedSummarizer{inner: inner, m: m}
}

func (t timedSummarizer) Name() string { return t.inner.Name() }

func (t timedSummarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	start := time.Now()
	out, err := t.inner.Summarize(ctx, req)
	t.observe(start, err)
	return out, err
}

func (t timedSummarizer) SummarizeResult(ctx context.Context, req compaction.SummaryRequest) (compaction.SummaryResult, error) {
	start := time.Now()
	res, err := compaction.Summarize(ctx, t.inner, req)
	t.observe(start, err)
	return res, err
}

func (t timedSummarizer) observe(start time.Time, err error) {
	t.m.SummarizerLatency.WithLabelValues(t.inner.Name()).Observe(time.Since(start).Seconds())
	if err != nil {
		t.m.SummarizerErrors.WithLabelValues(t.inner.Name()).Inc()
	}
}
