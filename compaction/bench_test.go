package compaction_test

// Benchmarks of CompactWithRecord per tier, on synthetic coding-agent histories of 100,
// 1,000 and 10,000 messages (internal/dev/synth: about 2 KB a message, every 10th tool result
// 5-50 KB, parallel calls, interjections, text-only turns), with the extractive summarizer
// and the filesystem store.
//
//	BENCH_STORE_DIR=/dev/shm go test -run '^$' -bench . -benchmem -benchtime=20x ./compaction/
//	TRANSCRIPTS=../shared/testdata/real BENCH_STORE_DIR=/dev/shm go test -run '^$' -bench Real -benchmem ./compaction/
//
// BENCH_STORE_DIR roots the store (use a tmpfs such as /dev/shm to measure the engine, not
// the disk); it defaults to the benchmark's temporary directory. TRANSCRIPTS names a
// directory of *.jsonl transcripts; a relative path is taken from the repository root
// first (so `make bench TRANSCRIPTS=../shared/testdata/real` works), then from this package.
//
// Each tier is measured in up to three modes:
//   - first: a fresh compactor and an empty store each iteration (built outside the timer):
//     every large result in the head is written, the state is saved, the record appended.
//   - steady: one compactor reused across iterations after a warm-up call, compacting the
//     same history at the same tier every turn, as the seed spec does. The offloader is
//     idempotent per tool call ID, so with a warm cache a Warn turn rewrites nothing; Soft
//     and Full still summarize (with the previous summary and anchors merged in), and the
//     record is still appended. The compactor is built with Config.RawHistory: by default
//     a Warn's offloads are shown in the next view, and Soft, Full and Emergency move the
//     session's watermark, so the next call would see the small derived view instead. The
//     offloads/op metric is the number of results written in the last measured call, so a
//     cache that does not hold shows up there.
//   - next: the default (watermark) mode after one compaction at the tier: the same history
//     again resolves to the carried summary plus the messages after the watermark, which is
//     what an agent's following turns cost. It usually lands in None; the "tier" metric
//     says where the last call landed (0 None, 1 Warn, 2 Soft, 3 Full, 4 Emergency).
//
// The context window is chosen from EstimateTokens so the usage lands inside the tier's
// band: None 30%, Warn 65%, Soft 75%, Full 90%, Emergency 97%.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/fs"
	"github.com/harness9/compaction-operator/internal/dev/synth"
)

var benchSizes = []int{100, 1000, 10000}

var benchTiers = []struct {
	tier  compaction.Tier
	usage float64
}{
	{compaction.TierNone, 0.30},
	{compaction.TierWarn, 0.65},
	{compaction.TierSoft, 0.75},
	{compaction.TierFull, 0.90},
	{compaction.TierEmergency, 0.97},
}

var (
	benchMu        sync.Mutex
	benchHistories = map[int][]compaction.Message{}
)

// benchHistory generates (once) the synthetic history of n messages.
func benchHistory(n int) []compaction.Message {
	benchMu.Lock()
	defer benchMu.Unlock()
	if h, ok := benchHistories[n]; ok {
		return h
	}
	h := synth.Generate(synth.Options{Seed: 1, Messages: n, AvgBytes: 2000, BigResultEvery: 10, ParallelCalls: true, UserInterjections: true, TextOnlyTurns: true})
	benchHistories[n] = h
	return h
}

func benchContentBytes(msgs []compaction.Message) int64 {
	var n int64
	for i := range msgs {
		n += int64(msgs[i].Chars())
	}
	return n
}

// benchWindow returns the context window that puts msgs at usage, checking it selects tier.
func benchWindow(b *testing.B, msgs []compaction.Message, usage float64, tier compaction.Tier) int {
	b.Helper()
	tokens := compaction.EstimateTokens(msgs)
	w := int(float64(tokens) / usage)
	if got := compaction.DefaultConfig(w).DetermineTier(tokens); got != tier {
		b.Fatalf("window %d for %d tokens selects %s, want %s", w, tokens, got, tier)
	}
	return w
}

// benchStoreRoot is a fresh directory for stores: under BENCH_STORE_DIR when set.
func benchStoreRoot(b *testing.B) string {
	b.Helper()
	base := os.Getenv("BENCH_STORE_DIR")
	if base == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(base, "compaction-bench-")
	if err != nil {
		b.Fatalf("BENCH_STORE_DIR: %v", err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) }) // best effort: a leftover temp dir is harmless
	return dir
}

func benchCompactor(b *testing.B, cfg compaction.Config, root string) *compaction.ProgressiveCompactor {
	b.Helper()
	store, err := fs.New(root)
	if err != nil {
		b.Fatal(err)
	}
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(store), compaction.WithSessionID("bench-session"))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchCheck(b *testing.B, rec *compaction.CompactionRecord, err error, want compaction.Tier) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	if rec.Tier != want {
		b.Fatalf("compacted at %s, want %s", rec.Tier, want)
	}
	if want != compaction.TierEmergency && rec.Error != "" {
		b.Fatalf("%s compaction failed open: %s", want, rec.Error)
	}
}

// benchFirst measures a compaction by a fresh compactor with an empty store.
func benchFirst(b *testing.B, msgs []compaction.Message, cfg compaction.Config, tier compaction.Tier) {
	ctx := context.Background()
	root := benchStoreRoot(b)
	b.ReportAllocs()
	b.SetBytes(benchContentBytes(msgs))
	offloaded := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(root, strconv.Itoa(i))
		c := benchCompactor(b, cfg, dir)
		b.StartTimer()
		_, rec, err := c.CompactWithRecord(ctx, msgs)
		b.StopTimer()
		benchCheck(b, rec, err, tier)
		offloaded = len(rec.Offloaded)
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(offloaded), "offloads/op")
}

// anyTier accepts whatever tier the measured calls land in (reported as the "tier" metric).
const anyTier compaction.Tier = -1

// benchSteady measures compactions of msgs by one compactor, after a warm-up compaction at
// tier; every measured call must land in then (or anywhere, with anyTier).
func benchSteady(b *testing.B, msgs []compaction.Message, cfg compaction.Config, tier, then compaction.Tier) {
	ctx := context.Background()
	c := benchCompactor(b, cfg, benchStoreRoot(b))
	_, rec, err := c.CompactWithRecord(ctx, msgs) // warm-up: offload cache, state, record file
	benchCheck(b, rec, err, tier)
	b.ReportAllocs()
	b.SetBytes(benchContentBytes(msgs))
	offloaded := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, rec, err = c.CompactWithRecord(ctx, msgs)
		if err != nil || (then != anyTier && rec.Tier != then) {
			b.StopTimer()
			benchCheck(b, rec, err, then)
		}
		offloaded = len(rec.Offloaded)
	}
	b.ReportMetric(float64(offloaded), "offloads/op")
	if then == anyTier {
		b.ReportMetric(float64(rec.Tier), "tier") // 0 None, 1 Warn, 2 Soft, 3 Full, 4 Emergency
	}
}

// benchTier runs the modes that make sense for tier on msgs.
func benchTier(b *testing.B, prefix string, msgs []compaction.Message, tier compaction.Tier, usage float64) {
	cfg := compaction.DefaultConfig(benchWindow(b, msgs, usage, tier))
	raw := cfg
	raw.RawHistory = true
	switch tier {
	case compaction.TierNone:
		b.Run(prefix+"None", func(b *testing.B) { benchSteady(b, msgs, cfg, tier, tier) })
	case compaction.TierWarn:
		b.Run(prefix+"Warn/first", func(b *testing.B) { benchFirst(b, msgs, cfg, tier) })
		b.Run(prefix+"Warn/steady", func(b *testing.B) { benchSteady(b, msgs, raw, tier, tier) })
	default:
		b.Run(prefix+tier.String()+"/first", func(b *testing.B) { benchFirst(b, msgs, cfg, tier) })
		then := tier
		if tier == compaction.TierSoft {
			// The same history again, with the previous summary merged in: a Soft that no
			// longer reaches the target is done as Full in the same turn (the "tier" metric
			// says which).
			then = anyTier
		}
		b.Run(prefix+tier.String()+"/steady", func(b *testing.B) { benchSteady(b, msgs, raw, tier, then) })
		b.Run(prefix+tier.String()+"/next", func(b *testing.B) { benchSteady(b, msgs, cfg, tier, anyTier) })
	}
}

func BenchmarkCompactWithRecord(b *testing.B) {
	for _, n := range benchSizes {
		// The history is generated inside the size's group, so a -bench filter that skips
		// the size does not pay for (or profile) its generation.
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			msgs := benchHistory(n)
			for _, bt := range benchTiers {
				benchTier(b, "", msgs, bt.tier, bt.usage)
			}
		})
	}
}

// BenchmarkCompactRealTranscripts compacts each real transcript in $TRANSCRIPTS at the Full
// tier. Without TRANSCRIPTS it is skipped: the transcripts are not part of the repository.
func BenchmarkCompactRealTranscripts(b *testing.B) {
	dir := os.Getenv("TRANSCRIPTS")
	if dir == "" {
		b.Skip("TRANSCRIPTS is not set; set it to a directory of *.jsonl transcripts, e.g. TRANSCRIPTS=../shared/testdata/real")
	}
	dir, err := resolveTranscriptDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	if len(paths) == 0 {
		b.Fatalf("TRANSCRIPTS=%s holds no *.jsonl files", dir)
	}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		msgs, err := compaction.DecodeTranscript(f, compaction.DecodeOptions{})
		f.Close()
		if err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		benchTier(b, strings.TrimSuffix(filepath.Base(path), ".jsonl")+"/", msgs, compaction.TierFull, 0.90)
	}
}

// resolveTranscriptDir finds a TRANSCRIPTS directory: absolute, else relative to the
// repository root (where make runs), else relative to this package.
func resolveTranscriptDir(dir string) (string, error) {
	candidates := []string{dir}
	if !filepath.IsAbs(dir) {
		if root, err := benchRepoRoot(); err == nil {
			candidates = []string{filepath.Join(root, dir), dir}
		}
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("TRANSCRIPTS=%s: no such directory (tried %s)", dir, strings.Join(candidates, ", "))
}

func benchRepoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("no go.mod above the working directory")
		}
		d = parent
	}
}
