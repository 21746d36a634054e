package compaction_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

// BenchmarkLongSession replays one agent session that grows to 50x the context window and
// reports, for the turns where the raw history is about 1x, 10x, 25x and 50x the window,
// the engine time per turn and the summarizer input per summarization. mode=derived is the
// engine (derived view after the watermark); mode=raw is the seed spec's behaviour
// (Config.RawHistory), measured in the same run for comparison.
//
//	go test -run '^$' -bench LongSession -benchtime 3x ./compaction/
func BenchmarkLongSession(b *testing.B) {
	const window = 8000
	// The history an agent holds: tool results pass the OffloadHook as they arrive, so the
	// session's length is measured after it.
	r := rand.New(rand.NewPCG(7, 7))
	hook := compaction.NewOffloader(discardResults{}, "bench", compaction.DefaultConfig(window).OffloadThreshold, compaction.DefaultConfig(window).PreviewLines)
	var full []compaction.Message
	for compaction.EstimateTokens(full) < 52*window {
		full = genHistory(r, len(full)+400)
		for i := range full {
			if full[i].Role == compaction.RoleTool {
				full[i], _, _ = hook.Hook(context.Background(), full[i], compaction.DefaultConfig(window).HookThreshold)
			}
		}
	}
	marks := []int{1, 10, 25, 50}
	for _, raw := range []bool{false, true} {
		mode := "derived"
		if raw {
			mode = "raw"
		}
		b.Run("mode="+mode, func(b *testing.B) {
			turnNs := make([]float64, len(marks))
			turnN := make([]int, len(marks))
			inBytes := make([]float64, len(marks))
			inN := make([]int, len(marks))
			for b.Loop() {
				cfg := compaction.DefaultConfig(window)
				cfg.RawHistory = raw
				sum := &measuringBucketSummarizer{}
				// Records go nowhere: a store that keeps them in memory would grow the heap,
				// and the GC work with it, with the session's length.
				st := newStore()
				c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithToolResultStore(discardResults{}), compaction.WithStateStore(st), compaction.WithSessionID("bench"), compaction.WithSummarizer(sum))
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				var history []compaction.Message
				historyBytes := 0
				for i, m := range full {
					historyBytes += m.Chars()
					history = append(history, m)
					if i+1 >= len(full) || full[i+1].Role != compaction.RoleAssistant {
						continue
					}
					bucket := -1
					x := float64(historyBytes/4) / window
					for k, mk := range marks {
						if x >= float64(mk)-1 && x < float64(mk)+1 { // a band of two windows around the mark
							bucket = k
						}
					}
					sum.input = 0
					start := time.Now()
					if _, _, err := c.CompactWithRecord(ctx, history); err != nil {
						b.Fatal(err)
					}
					if bucket >= 0 {
						turnNs[bucket] += float64(time.Since(start).Nanoseconds())
						turnN[bucket]++
						if sum.input > 0 {
							inBytes[bucket] += float64(sum.input)
							inN[bucket]++
						}
					}
				}
			}
			for k, mk := range marks {
				if turnN[k] > 0 {
					b.ReportMetric(turnNs[k]/float64(turnN[k])/1000, fmt.Sprintf("us/turn@%dx", mk))
				}
				if inN[k] > 0 {
					b.ReportMetric(inBytes[k]/float64(inN[k]), fmt.Sprintf("sumB/call@%dx", mk))
				}
			}
		})
	}
}

// measuringBucketSummarizer is the extractive summarizer, remembering the input of its last call.
type measuringBucketSummarizer struct {
	compaction.ExtractiveSummarizer
	input int
}

func (m *measuringBucketSummarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	m.input = charsOf(req.Messages) + len(req.PreviousSummary) + len(compaction.FormatAnchors(req.PreviousAnchors))
	return m.ExtractiveSummarizer.Summarize(ctx, req)
}

// discardResults is a tool-result store that keeps nothing.
type discardResults struct{}

func (discardResults) PutToolResult(_ context.Context, _, id, _ string) (string, error) {
	return "discard://" + id, nil
}

func (discardResults) GetToolResult(context.Context, string, string) ([]byte, error) {
	return nil, compaction.ErrNotFound
}
