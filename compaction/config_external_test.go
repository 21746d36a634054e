package compaction_test

import (
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// NoPreviewLines survives the defaults (0 takes the default of 10) and offloads show no line.
func TestNoPreviewLines(t *testing.T) {
	cfg := compaction.DefaultConfig(1000)
	cfg.PreviewLines = compaction.NoPreviewLines
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(newStore()), compaction.WithSessionID("s"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Config().PreviewLines; got != compaction.NoPreviewLines {
		t.Fatalf("PreviewLines = %d after defaults, want NoPreviewLines", got)
	}
	ph := compaction.Placeholder("id", "first line\nsecond\n", "ref", c.Config().PreviewLines)
	if strings.Contains(ph, "first line") || strings.Contains(ph, "preview") {
		t.Errorf("placeholder with NoPreviewLines shows a preview:\n%s", ph)
	}
	cfg.PreviewLines = -2
	if cfg.Validate() == nil {
		t.Error("PreviewLines -2 validated")
	}
}
