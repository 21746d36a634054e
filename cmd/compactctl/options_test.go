package main

import (
	"context"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// usageSummarizer reports a fixed usage for every call.
type usageSummarizer struct {
	compaction.ExtractiveSummarizer
}

func (u usageSummarizer) SummarizeWithUsage(ctx context.Context, req compaction.SummaryRequest) (string, compaction.SummaryUsage, error) {
	out, err := u.Summarize(ctx, req)
	return out, compaction.SummaryUsage{InputTokens: 123, OutputTokens: 45}, err
}

// The counter keeps the usage a summarizer reports visible to the engine, and does not
// claim usage for one that reports none.
func TestCountingSummarizerKeepsUsage(t *testing.T) {
	req := compaction.SummaryRequest{Messages: []compaction.Message{{Role: compaction.RoleUser, Content: "Fix the flaky TestEviction"}}, MaxSummaryChars: 2000}
	plain := newCountingSummarizer(compaction.ExtractiveSummarizer{})
	if _, ok := plain.wrapped().(compaction.UsageSummarizer); ok {
		t.Fatal("a counter over a summarizer without usage claims usage")
	}
	c := newCountingSummarizer(usageSummarizer{})
	u, ok := c.wrapped().(compaction.UsageSummarizer)
	if !ok {
		t.Fatal("the counter hides the base's usage from the engine")
	}
	_, usage, err := u.SummarizeWithUsage(context.Background(), req)
	if err != nil || usage != (compaction.SummaryUsage{InputTokens: 123, OutputTokens: 45}) {
		t.Fatalf("usage %+v, err %v", usage, err)
	}
	if _, err := u.Summarize(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if c.calls.Load() != 2 || c.failures.Load() != 0 || u.Name() != "extractive" {
		t.Fatalf("%d calls, %d failures, name %q", c.calls.Load(), c.failures.Load(), u.Name())
	}
}
