package compaction

import (
	"strings"
	"testing"
)

func TestSummarizerBudgetValidation(t *testing.T) {
	for _, v := range []int{-1, maxSummarizerCallsPerHour + 1} {
		cfg := DefaultConfig(10000)
		cfg.SummarizerCallsPerHour = v
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "summarizer calls per hour") {
			t.Errorf("%d calls per hour: %v", v, err)
		}
	}
}
