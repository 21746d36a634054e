package compactapi

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/policy/backends"
)

// metricValue is the value of the counter or gauge (or the sample count of the histogram) name with
// exactly labels, 0 when it has no such series.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			pairs := m.GetLabel()
			same := len(pairs) == len(labels)
			for _, p := range pairs {
				if v, ok := labels[p.GetName()]; !ok || v != p.GetValue() {
					same = false
				}
			}
			if !same {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			default:
				t.Fatalf("%s is neither a counter, a gauge nor a histogram", name)
			}
		}
	}
	return 0
}

func newTestMetrics(t *testing.T) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return &Server{metrics: m, sessions: &resolver{summarizers: backends.NewSummarizer, metrics: m}}, reg
}

// testResolver resolves sessions as New's does, reading through s's cache and API reader, in
// its cluster resource namespace, and Secrets through secrets, on stores of its own.
func testResolver(s *Server, secrets policy.SecretReader) *resolver {
	return &resolver{cache: s.cache, apiReader: s.apiReader, secrets: secrets, stores: &backends.Stores{}, summarizers: backends.NewSummarizer,
		access: policy.Access{ClusterResourceNamespace: s.cfg.ClusterResourceNamespace}, metrics: s.metrics}
}

// fakeUsageSummarizer reports fixed usage.
type fakeUsageSummarizer struct {
	usage compaction.SummaryUsage
	err   error
}

func (fakeUsageSummarizer) Name() string { return "openai" }
func (f fakeUsageSummarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	res, err := f.SummarizeResult(ctx, req)
	return res.Text, err
}
func (f fakeUsageSummarizer) SummarizeResult(context.Context, compaction.SummaryRequest) (compaction.SummaryResult, error) {
	if f.err != nil {
		return compaction.SummaryResult{}, f.err
	}
	return compaction.SummaryResult{Text: "## Anchors\n## Summary\nok", Usage: f.usage}, nil
}

// TestTimedKeepsResults: the timing wrapper passes on what the summarizer answers: the
// server's usage for one that reports it, none for the others (the engine estimates theirs),
// the extractive summarizer's anchors as values.
func TestTimedKeepsResults(t *testing.T) {
	ctx := context.Background()
	s, reg := newTestMetrics(t)
	want := compaction.SummaryUsage{InputTokens: 1200, OutputTokens: 80}
	wrapped := s.metrics.timed(fakeUsageSummarizer{usage: want})
	if wrapped.Name() != "openai" {
		t.Errorf("Name() = %q", wrapped.Name())
	}
	res, err := compaction.Summarize(ctx, wrapped, compaction.SummaryRequest{})
	if err != nil || res.Usage != want {
		t.Errorf("Summarize = %+v, %v; want usage %+v: the engine would never see the server's usage", res, err, want)
	}
	if _, err := wrapped.Summarize(ctx, compaction.SummaryRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := compaction.Summarize(ctx, s.metrics.timed(fakeUsageSummarizer{err: errors.New("down")}), compaction.SummaryRequest{}); err == nil {
		t.Fatal("the error was lost")
	}
	openai := map[string]string{"summarizer": "openai"}
	if n := metricValue(t, reg, "compaction_summarizer_duration_seconds", openai); n != 3 {
		t.Errorf("%v timed calls, want 3", n)
	}
	if n := metricValue(t, reg, "compaction_summarizer_errors_total", openai); n != 1 {
		t.Errorf("%v errors, want 1", n)
	}

	req := compaction.SummaryRequest{Messages: []compaction.Message{{Role: compaction.RoleUser, Content: "Fix the flaky TestEviction"}}}
	res, err = compaction.Summarize(ctx, s.metrics.timed(compaction.ExtractiveSummarizer{}), req)
	if err != nil || res.Usage != (compaction.SummaryUsage{}) {
		t.Errorf("timed(extractive) = %+v, %v: reporting usage, the engine would count it instead of estimating", res.Usage, err)
	}
	if res.Text != "" || compaction.CountAvailable(res.Anchors) == 0 {
		t.Errorf("timed(extractive) answered text %q, anchors %v; want the anchors as values", res.Text, res.Anchors)
	}
}

// TestObserveCompactionSummarizerUsage: the summarizer calls and tokens of the records are
// counted by the policy's summarizer and direction; a record without summarizer work creates
// no series.
func TestObserveCompactionSummarizerUsage(t *testing.T) {
	s, reg := newTestMetrics(t)
	m := s.metrics
	m.observeCompaction("openai", &compaction.CompactionRecord{Tier: compaction.TierFull, TokensBefore: 900, TokensAfter: 400,
		SummarizerCalls: 1, SummarizerInputTokens: 1200, SummarizerOutputTokens: 150})
	m.observeCompaction("openai", &compaction.CompactionRecord{Tier: compaction.TierSoft, TokensBefore: 800, TokensAfter: 500,
		SummarizerCalls: 2, SummarizerInputTokens: 800, SummarizerOutputTokens: 90})
	// Summarizer work in a turn whose tier is None is counted too.
	m.observeCompaction("openai", &compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 700, TokensAfter: 700,
		SummarizerCalls: 1, SummarizerInputTokens: 10, SummarizerOutputTokens: 1})
	m.observeCompaction("extractive", &compaction.CompactionRecord{Tier: compaction.TierFull, TokensBefore: 900, TokensAfter: 300,
		SummarizerCalls: 1, SummarizerInputTokens: 600, SummarizerOutputTokens: 60})
	// No summarizer work (Warn, Emergency, a record of an engine that does not count).
	m.observeCompaction("extractive", &compaction.CompactionRecord{Tier: compaction.TierEmergency, TokensBefore: 990, TokensAfter: 100})
	m.observeCompaction("none", &compaction.CompactionRecord{Tier: compaction.TierWarn, TokensBefore: 650, TokensAfter: 500,
		SummarizerCalls: -1, SummarizerInputTokens: -5})

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"compaction_summarizer_calls_total", map[string]string{"summarizer": "openai"}, 4},
		{"compaction_summarizer_tokens_total", map[string]string{"summarizer": "openai", "direction": "input"}, 2010},
		{"compaction_summarizer_tokens_total", map[string]string{"summarizer": "openai", "direction": "output"}, 241},
		{"compaction_summarizer_calls_total", map[string]string{"summarizer": "extractive"}, 1},
		{"compaction_summarizer_tokens_total", map[string]string{"summarizer": "extractive", "direction": "input"}, 600},
		{"compaction_summarizer_tokens_total", map[string]string{"summarizer": "extractive", "direction": "output"}, 60},
		{"compaction_summarizer_calls_total", map[string]string{"summarizer": "none"}, 0},
		{"compaction_compactions_total", map[string]string{"tier": "None"}, 1},
	} {
		if got := metricValue(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "compaction_summarizer_tokens_total" && len(f.GetMetric()) != 4 {
			t.Errorf("compaction_summarizer_tokens_total has %d series, want 4 (2 summarizers x input/output)", len(f.GetMetric()))
		}
	}
}
