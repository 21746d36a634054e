package compaction_test

// BenchmarkCompactScaling measures how the engine's time and memory grow with the history:
// 1,000, 10,000 and 100,000 messages of the synthetic history of BenchmarkCompactWithRecord
// (about 2 KB a message: 100,000 messages are about 235 MB), for every tier. Besides ns/op,
// B/op and allocs/op it reports per message (per op divided by the history's length):
// ns/msg, cpu-ns/msg (the process's CPU time, all threads, which other load on the machine
// disturbs less than wall time) and B/msg. The engine grows linearly when those stay flat
// from one size to the next.
//
// It is skipped unless BENCH_SCALE=1, so `make bench` stays fast (the 1,000 and 10,000
// message points are also in BenchmarkCompactWithRecord). A run takes about 5 minutes:
//
//	BENCH_SCALE=1 BENCH_STORE_DIR=/dev/shm go test -run '^$' -bench CompactScaling -benchmem -benchtime=2s -count=3 -timeout=30m ./compaction/
//	make bench BENCH_SCALE=1
//
// Modes, as in BenchmarkCompactWithRecord: None is measured steady (the tier does no work
// beyond estimating and validating, every turn alike); the other tiers are measured first
// (a fresh compactor and an empty store each iteration: every large result in the head is
// written, the summary made, the state saved, the record appended) and steady (the same
// compactor again with its offload cache warm; Soft, Full and Emergency with
// Config.RawHistory so each call does the same work again, without the writes of results
// already offloaded).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

var scaleSizes = []int{1000, 10000, 100000}

func BenchmarkCompactScaling(b *testing.B) {
	if os.Getenv("BENCH_SCALE") != "1" {
		b.Skip("BENCH_SCALE is not 1; set BENCH_SCALE=1 to measure 1,000 to 100,000 messages (a 235 MB history)")
	}
	for _, n := range scaleSizes {
		// Generated inside the size's group: a -bench filter that skips the size does not
		// pay for its history.
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			msgs := benchHistory(n)
			for _, bt := range benchTiers {
				cfg := compaction.DefaultConfig(benchWindow(b, msgs, bt.usage, bt.tier))
				if bt.tier == compaction.TierNone {
					b.Run("None/steady", func(b *testing.B) { scaleSteady(b, msgs, cfg, bt.tier) })
					continue
				}
				raw := cfg
				raw.RawHistory = bt.tier != compaction.TierWarn
				b.Run(bt.tier.String()+"/first", func(b *testing.B) { scaleFirst(b, msgs, cfg, bt.tier) })
				b.Run(bt.tier.String()+"/steady", func(b *testing.B) { scaleSteady(b, msgs, raw, bt.tier) })
			}
		})
	}
}

// meter sums the bytes allocated and the CPU time used (all threads: the GC and the
// offloader's concurrent writes count) between its start and stop calls. The testing
// package measures B/op the same way but does not hand the figure back to the benchmark.
type meter struct {
	bytes, since uint64
	cpu, cpu0    time.Duration
	noCPU        bool
	ms           runtime.MemStats
}

func (m *meter) start() {
	runtime.ReadMemStats(&m.ms)
	m.since = m.ms.TotalAlloc
	cpu, ok := processCPU()
	m.cpu0, m.noCPU = cpu, m.noCPU || !ok
}

func (m *meter) stop() {
	cpu, ok := processCPU()
	m.cpu, m.noCPU = m.cpu+cpu-m.cpu0, m.noCPU || !ok
	runtime.ReadMemStats(&m.ms)
	m.bytes += m.ms.TotalAlloc - m.since
}

// report reports the time, the CPU time and the allocated bytes per op and message.
func (m *meter) report(b *testing.B, msgs int) {
	per := float64(b.N) * float64(msgs)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/msg")
	if !m.noCPU {
		b.ReportMetric(float64(m.cpu.Nanoseconds())/per, "cpu-ns/msg")
	}
	b.ReportMetric(float64(m.bytes)/per, "B/msg")
}

// scaleFirst measures a compaction by a fresh compactor with an empty store (built and
// removed outside the timer and the meter).
func scaleFirst(b *testing.B, msgs []compaction.Message, cfg compaction.Config, tier compaction.Tier) {
	ctx := context.Background()
	root := benchStoreRoot(b)
	var m meter
	b.ReportAllocs()
	b.StopTimer()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(root, strconv.Itoa(i))
		c := benchCompactor(b, cfg, dir)
		m.start()
		b.StartTimer()
		_, rec, err := c.CompactWithRecord(ctx, msgs)
		b.StopTimer()
		m.stop()
		benchCheck(b, rec, err, tier)
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
	}
	m.report(b, len(msgs))
}

// scaleSteady measures compactions of msgs at tier by one compactor after a warm-up call.
func scaleSteady(b *testing.B, msgs []compaction.Message, cfg compaction.Config, tier compaction.Tier) {
	ctx := context.Background()
	c := benchCompactor(b, cfg, benchStoreRoot(b))
	_, rec, err := c.CompactWithRecord(ctx, msgs) // warm-up: offload cache, state, record file
	benchCheck(b, rec, err, tier)
	var m meter
	b.ReportAllocs()
	m.start()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, rec, err = c.CompactWithRecord(ctx, msgs)
		if err != nil || rec.Tier != tier {
			b.StopTimer()
			benchCheck(b, rec, err, tier)
		}
	}
	b.StopTimer()
	m.stop()
	m.report(b, len(msgs))
}
