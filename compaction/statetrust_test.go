package compaction_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
)

// versionedStore is an in-memory store with versioned states, as the S3 store has them: conditional
// saves (ErrConflict when the state changed since it was loaded) and conditional reads
// (LoadStateIfChanged). It counts the state reads of each kind.
type versionedStore struct {
	*faultstore.Store
	vmu          sync.Mutex
	version      map[string]int
	reads, revs  int
	unchangedRev int
}

func newVersionedStore() *versionedStore {
	return &versionedStore{Store: newStore(), version: map[string]int{}}
}

func (s *versionedStore) LoadState(ctx context.Context, sid string) (*compaction.State, error) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.reads++
	return s.load(ctx, sid)
}

func (s *versionedStore) load(ctx context.Context, sid string) (*compaction.State, error) {
	st, err := s.Store.LoadState(ctx, sid)
	if err != nil {
		return nil, err
	}
	st.Version = strconv.Itoa(s.version[sid])
	return st, nil
}

func (s *versionedStore) LoadStateIfChanged(ctx context.Context, sid, version string) (*compaction.State, error) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.revs++
	if version == strconv.Itoa(s.version[sid]) {
		s.unchangedRev++
		return nil, nil
	}
	return s.load(ctx, sid)
}

func (s *versionedStore) SaveState(ctx context.Context, sid string, st *compaction.State) error {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	if cur := s.version[sid]; cur != 0 && st.Version != strconv.Itoa(cur) {
		return compaction.ErrConflict
	}
	if err := s.Store.SaveState(ctx, sid, st); err != nil {
		return err
	}
	s.version[sid]++
	st.Version = strconv.Itoa(s.version[sid])
	return nil
}

func (s *versionedStore) counts() (reads, revalidations int) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	return s.reads, s.revs
}

// storedWatermark is the watermark of the stored state of sid.
func (s *versionedStore) storedWatermark(t *testing.T, sid string) int {
	t.Helper()
	return mustLoad(t, s.Store, sid).Watermark
}

// TestStateTrust: with WithStateTrust, a delta call that continues from the state the
// compactor last read or saved skips the store while the store confirmed it less than the
// trust ago; anything else (a full history, another watermark, an older confirmation) reads
// it. A state another compactor saved meanwhile is never overwritten: the write conflicts,
// and the call run again reads the stored state.
func TestStateTrust(t *testing.T) {
	ctx := context.Background()
	// About 9,000 estimated tokens in a window of 10,000: Full.
	history := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000, 4000}, 500)
	cfg := compaction.DefaultConfig(10000)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	store := newVersionedStore()
	a := revalidating(t, cfg, store, "s", clock, time.Minute)
	_, first, err := a.CompactWithRecord(ctx, history)
	if err != nil || first.WatermarkAfter == 0 {
		t.Fatalf("first call: watermark %d, %v; want a compaction", first.WatermarkAfter, err)
	}
	// The agent's next turn: the leading system message and what came after the watermark,
	// plus one short exchange (a None turn).
	next := append(append(history[:1:1], history[first.WatermarkAfter:]...), user("ok?"), asst("ok."))
	d := compaction.Delta{Watermark: first.WatermarkAfter, PrefixHash: first.PrefixHash}
	reads, revs := store.counts()

	now = now.Add(30 * time.Second)
	_, rec, err := compactDelta(ctx, a, d, next, false)
	if err != nil || rec.Tier != compaction.TierNone {
		t.Fatalf("delta call within the trust: %v, %v; want a None turn", rec, err)
	}
	if r, v := store.counts(); r != reads || v != revs {
		t.Fatalf("delta call within the trust read the store: %d reads and %d revalidations, want %d and %d", r, v, reads, revs)
	}

	// Past the trust (the save confirmed it 61 s ago, the skip did not renew it): one
	// conditional read, which renews it.
	now = now.Add(31 * time.Second)
	if _, _, err := compactDelta(ctx, a, d, next, false); err != nil {
		t.Fatal(err)
	}
	if r, v := store.counts(); r != reads || v != revs+1 {
		t.Fatalf("delta call past the trust: %d reads and %d revalidations, want %d and %d", r, v, reads, revs+1)
	}
	now = now.Add(time.Second)
	if _, _, err := compactDelta(ctx, a, d, next, false); err != nil {
		t.Fatal(err)
	}
	if _, v := store.counts(); v != revs+1 {
		t.Fatalf("delta call after a revalidation: %d revalidations, want %d", v, revs+1)
	}
	// A full history is revalidated once the watermark has moved.
	if _, _, err := a.CompactWithRecord(ctx, history); err != nil {
		t.Fatal(err)
	}
	if _, v := store.counts(); v != revs+2 {
		t.Fatalf("full-history call: %d revalidations, want %d", v, revs+2)
	}

	// Another compactor (another replica) saves a new state: a longer history compacted again.
	b := revalidating(t, cfg, store, "s", clock, 0)
	longer := append(append([]compaction.Message{}, history...), proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000, 4000}, 500)[2:]...)
	_, byB, err := b.CompactWithRecord(ctx, longer)
	if err != nil || byB.WatermarkAfter <= first.WatermarkAfter {
		t.Fatalf("b: watermark %d, %v; want past %d", byB.WatermarkAfter, err, first.WatermarkAfter)
	}
	// a is asked to force a compaction from its kept state, within its trust: it skips the
	// read, and its conditional write conflicts instead of overwriting b's state.
	_, _, err = compactDelta(ctx, a, d, next, true)
	if !errors.Is(err, compaction.ErrStateConflict) {
		t.Fatalf("forced compaction from a stale kept state: %v, want ErrStateConflict", err)
	}
	if got := store.storedWatermark(t, "s"); got != byB.WatermarkAfter {
		t.Fatalf("stored watermark %d after the conflict, want b's %d", got, byB.WatermarkAfter)
	}
	// Run again (as the server does), it reads the stored state: the caller's watermark is
	// no longer the session's.
	if _, _, err := compactDelta(ctx, a, d, next, true); !errors.Is(err, compaction.ErrStaleWatermark) {
		t.Fatalf("the same call run again: %v, want ErrStaleWatermark", err)
	}
	// A caller that got b's answer continues from b's state on a.
	dB := compaction.Delta{Watermark: byB.WatermarkAfter, PrefixHash: byB.PrefixHash}
	_, byA, err := compactDelta(ctx, a, dB, append(longer[:1:1], longer[byB.WatermarkAfter:]...), false)
	if err != nil || byA.WatermarkBefore != byB.WatermarkAfter {
		t.Fatalf("a after b's save: %v, %v; want it to start from b's watermark %d", byA, err, byB.WatermarkAfter)
	}

	// Without WithStateTrust every delta call revalidates.
	c := revalidating(t, cfg, store, "s", clock, 0)
	if _, _, err := compactDelta(ctx, c, dB, append(longer[:1:1], longer[byB.WatermarkAfter:]...), false); err != nil {
		t.Fatal(err)
	}
	_, v0 := store.counts()
	if _, _, err := compactDelta(ctx, c, dB, append(longer[:1:1], longer[byB.WatermarkAfter:]...), false); err != nil {
		t.Fatal(err)
	}
	if _, v := store.counts(); v != v0+1 {
		t.Fatalf("without WithStateTrust: %d revalidations, want %d", v, v0+1)
	}
}

// TestStateTrustNoStateYet: with WithStateTrust, a call with the full history of a
// conversation whose watermark has not moved (the store said there is no state, or the kept
// state holds offloads only) skips the read while the store confirmed it less than the trust
// ago. Another compactor's first save meanwhile is
// never overwritten: the write conflicts, and the call run again starts from that state.
func TestStateTrustNoStateYet(t *testing.T) {
	ctx := context.Background()
	cfg := compaction.DefaultConfig(10000)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	store := newVersionedStore()
	a := revalidating(t, cfg, store, "s", clock, time.Minute)
	short := make([]compaction.Message, 0, 5)
	short = append(short, sys("You are a coding agent."), user("Fix the failing parser test."), asst("Looking."))
	none := func(msgs []compaction.Message) {
		t.Helper()
		if _, rec, err := a.CompactWithRecord(ctx, msgs); err != nil || rec.Tier != compaction.TierNone {
			t.Fatalf("short history: %v, %v; want a None turn", rec, err)
		}
	}
	none(short)
	if r, _ := store.counts(); r != 1 {
		t.Fatalf("first call: %d reads, want 1", r)
	}
	now = now.Add(30 * time.Second)
	short = append(short, user("and?"), asst("Still looking."))
	none(short)
	if r, _ := store.counts(); r != 1 {
		t.Fatalf("full history within the trust of the store's \"no state\": %d reads, want 1", r)
	}
	now = now.Add(31 * time.Second)
	none(short)
	if r, _ := store.counts(); r != 2 {
		t.Fatalf("full history past the trust: %d reads, want 2", r)
	}

	// Another compactor saves the conversation's first state; a, within its trust, is given
	// a history that compacts: its write conflicts, and run again it starts from b's state.
	b := revalidating(t, cfg, store, "s", clock, 0)
	long := proseHistory([]int{4000, 4000, 4000, 4000, 4000, 4000, 4000, 4000}, 500)
	_, byB, err := b.CompactWithRecord(ctx, long)
	if err != nil || byB.WatermarkAfter == 0 {
		t.Fatalf("b: watermark %d, %v; want a compaction", byB.WatermarkAfter, err)
	}
	now = now.Add(time.Second)
	if _, _, err := a.CompactWithRecord(ctx, long); !errors.Is(err, compaction.ErrStateConflict) {
		t.Fatalf("a compacting over b's first save from its kept \"no state\": %v, want ErrStateConflict", err)
	}
	if got := store.storedWatermark(t, "s"); got != byB.WatermarkAfter {
		t.Fatalf("stored watermark %d after the conflict, want b's %d", got, byB.WatermarkAfter)
	}
	_, byA, err := a.CompactWithRecord(ctx, long)
	if err != nil || byA.WatermarkBefore != byB.WatermarkAfter {
		t.Fatalf("a run again: %v, %v; want it to start from b's watermark %d", byA, err, byB.WatermarkAfter)
	}

	// A state of offloads only (Warn keeps the watermark at 0) is trusted likewise: the next
	// full history, within the trust, is answered from it without a read.
	warned := warnHistory(20000, 12000, 6000, 6000)
	w := revalidating(t, compaction.DefaultConfig(windowFor(warned, 0.62)), store, "w", clock, time.Minute)
	_, rec, err := w.CompactWithRecord(ctx, warned)
	if err != nil || rec.Tier != compaction.TierWarn || len(rec.Offloaded) == 0 || rec.WatermarkAfter != 0 {
		t.Fatalf("warn: %+v, %v; want offloads at watermark 0", rec, err)
	}
	r0, v0 := store.counts()
	now = now.Add(10 * time.Second)
	warned = append(warned, user("and?"))
	_, rec, err = w.CompactWithRecord(ctx, warned)
	if err != nil || rec.Tier != compaction.TierNone {
		t.Fatalf("the turn after the offloads: %+v, %v; want None from the kept offloads", rec, err)
	}
	if r, v := store.counts(); r != r0 || v != v0 {
		t.Fatalf("full history on a kept state of offloads: %d reads and %d revalidations, want %d and %d", r, v, r0, v0)
	}

	// A store without versions (no conditional writes) is never trusted: the second call
	// reads it, and fails open on the read error.
	mem := newStore()
	u, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(mem), compaction.WithSessionID("u"), compaction.WithClock(clock), compaction.WithStateRevalidation(), compaction.WithStateTrust(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.CompactWithRecord(ctx, short); err != nil {
		t.Fatal(err)
	}
	mem.FailLoad(errors.New("store down"))
	if _, rec, err := u.CompactWithRecord(ctx, short); err != nil || !strings.Contains(rec.Error, "store down") {
		t.Fatalf("a store without versions, within the trust: %v, record error %q; want the store read", err, rec.Error)
	}

	// Without WithStateTrust every full-history call reads the store.
	c := revalidating(t, cfg, store, "fresh", clock, 0)
	r0, _ = store.counts()
	for range 2 {
		if _, _, err := c.CompactWithRecord(ctx, short); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := store.counts(); r != r0+2 {
		t.Fatalf("without WithStateTrust: %d reads, want %d", r, r0+2)
	}
}

// revalidating is a compactor of session sid on store that starts every call from the stored
// state, trusting its kept copy for trust (0: never).
func revalidating(t *testing.T, cfg compaction.Config, store *versionedStore, sid string, clock func() time.Time, trust time.Duration) *compaction.ProgressiveCompactor {
	t.Helper()
	opts := []compaction.Option{compaction.WithStore(store), compaction.WithSessionID(sid), compaction.WithClock(clock), compaction.WithStateRevalidation()}
	if trust > 0 {
		opts = append(opts, compaction.WithStateTrust(trust))
	}
	c, err := compaction.NewProgressiveCompactor(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
