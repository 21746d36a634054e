package main

import (
	"context"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// usageSummarizer reports a fixed usage for every call.
type usageSummarizer struct {
	compaction.ExtractiveSummarizer
}

func (u usageSummarizer) SummarizeResult(ctx context.Context, req compaction.SummaryRequest) (compaction.SummaryResult, error) {
	out, err := u.Summarize(ctx, req)
	return compaction.SummaryResult{Text: out, Usage: compaction.SummaryUsage{InputTokens: 123, OutputTokens: 45}}, err
}

// The counter passes on what the base answers: the usage its server reported, anchors as
// values (the extractive summarizer), and no usage when the base reports none.
func TestCountingSummarizerKeepsResults(t *testing.T) {
	ctx := context.Background()
	req := compaction.SummaryRequest{Messages: []compaction.Message{{Role: compaction.RoleUser, Content: "Fix the flaky TestEviction"}}, MaxSummaryChars: 2000}
	var engineSees compaction.Summarizer = newCountingSummarizer(compaction.ExtractiveSummarizer{})
	res, err := compaction.Summarize(ctx, engineSees, req)
	if err != nil || res.Usage != (compaction.SummaryUsage{}) || res.Text != "" || compaction.CountAvailable(res.Anchors) == 0 {
		t.Fatalf("over the extractive summarizer: %+v, %v; want its anchors as values and no usage", res, err)
	}
	c := newCountingSummarizer(usageSummarizer{})
	res, err = compaction.Summarize(ctx, c, req)
	if err != nil || res.Usage != (compaction.SummaryUsage{InputTokens: 123, OutputTokens: 45}) {
		t.Fatalf("usage %+v, err %v", res.Usage, err)
	}
	text, err := c.Summarize(ctx, req)
	if err != nil || !strings.Contains(text, "## Anchors") {
		t.Fatalf("Summarize = %q, %v", text, err)
	}
	if c.calls.Load() != 2 || c.failures.Load() != 0 || c.Name() != "extractive" {
		t.Fatalf("%d calls, %d failures, name %q", c.calls.Load(), c.failures.Load(), c.Name())
	}
}
