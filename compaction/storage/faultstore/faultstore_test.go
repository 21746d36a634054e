package faultstore_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
	"github.com/harness9/compaction-operator/compaction/storage/storetest"
)

// Without failures the wrapper is the store it wraps (without its archives).
func TestConformance(t *testing.T) {
	storetest.RunStore(t, func(*testing.T) compaction.Store { return faultstore.New(mem.New()) })
}

// The optional interfaces of the wrapped store do not show through.
func TestPlainStore(t *testing.T) {
	var s compaction.Store = faultstore.New(mem.New())
	if _, ok := s.(compaction.ArchiveStore); ok {
		t.Error("the wrapper is an ArchiveStore")
	}
	if _, ok := s.(compaction.StateRevalidator); ok {
		t.Error("the wrapper is a StateRevalidator")
	}
}

func TestCounts(t *testing.T) {
	ctx := context.Background()
	s := faultstore.New(mem.New())
	for _, id := range []string{"c1", "c2", "c1"} {
		if _, err := s.PutToolResult(ctx, "s1", id, "out"); err != nil {
			t.Fatal(err)
		}
	}
	// The wrapped store refuses different content under a stored ID: not counted.
	if _, err := s.PutToolResult(ctx, "s1", "c2", "other"); !errors.Is(err, compaction.ErrToolResultExists) {
		t.Fatalf("replacing put: %v", err)
	}
	if _, err := s.PutToolResult(ctx, "s2", "c3", "out"); err != nil {
		t.Fatal(err)
	}
	if got, want := s.PutsByID(), map[string]int{"c1": 2, "c2": 1, "c3": 1}; s.Puts() != 4 || !maps.Equal(got, want) {
		t.Errorf("puts %d by ID %v, want 4 and %v", s.Puts(), got, want)
	}
	s.PutsByID()["c1"] = 100 // a copy
	if n := s.PutsByID()["c1"]; n != 2 {
		t.Errorf("PutsByID shares its map: c1 %d", n)
	}
	for _, sid := range []string{"s1", "s2"} {
		if err := s.AppendRecord(ctx, storetest.NewRecord(t, sid, time.Now(), 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SaveState(ctx, "s1", &compaction.State{LastSummary: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveState(ctx, "bad/id", &compaction.State{}); err == nil {
		t.Fatal("the wrapped store took an invalid session ID")
	}
	if s.Appends() != 2 || s.Saves() != 1 {
		t.Errorf("appends %d saves %d, want 2 and 1", s.Appends(), s.Saves())
	}
}

func TestFailures(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	s := faultstore.New(mem.New())
	if err := s.SaveState(ctx, "s1", &compaction.State{LastSummary: "kept"}); err != nil {
		t.Fatal(err)
	}
	s.FailPut(boom)
	s.FailAppend(boom)
	s.FailLoad(boom)
	s.FailSave(boom)
	if _, err := s.PutToolResult(ctx, "s1", "c1", "out"); !errors.Is(err, boom) {
		t.Errorf("put: %v", err)
	}
	if err := s.AppendRecord(ctx, storetest.NewRecord(t, "s1", time.Now(), 0)); !errors.Is(err, boom) {
		t.Errorf("append: %v", err)
	}
	if _, err := s.LoadState(ctx, "s1"); !errors.Is(err, boom) {
		t.Errorf("load: %v", err)
	}
	if err := s.SaveState(ctx, "s1", &compaction.State{LastSummary: "lost"}); !errors.Is(err, boom) {
		t.Errorf("save: %v", err)
	}
	if s.Puts() != 0 || s.Appends() != 0 || s.Saves() != 1 {
		t.Errorf("failed writes counted: puts %d appends %d saves %d", s.Puts(), s.Appends(), s.Saves())
	}
	// Nothing reached the wrapped store.
	if _, err := s.GetToolResult(ctx, "s1", "c1"); !errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("failed put stored: %v", err)
	}
	var buf bytes.Buffer
	if err := s.ReadRecords(ctx, "s1", &buf); err != nil || buf.Len() != 0 {
		t.Errorf("failed append stored: %q, %v", buf.String(), err)
	}

	s.FailPut(nil)
	s.FailAppend(nil)
	s.FailLoad(nil)
	s.FailSave(nil)
	if st, err := s.LoadState(ctx, "s1"); err != nil || st.LastSummary != "kept" {
		t.Fatalf("state after a failed save: %+v, %v", st, err)
	}
	if _, err := s.PutToolResult(ctx, "s1", "c1", "out"); err != nil {
		t.Errorf("put after the failure ended: %v", err)
	}
	if err := s.AppendRecord(ctx, storetest.NewRecord(t, "s1", time.Now(), 0)); err != nil {
		t.Errorf("append after the failure ended: %v", err)
	}
	if err := s.SaveState(ctx, "s1", &compaction.State{}); err != nil {
		t.Errorf("save after the failure ended: %v", err)
	}
	if s.Puts() != 1 || s.Appends() != 1 || s.Saves() != 2 {
		t.Errorf("puts %d appends %d saves %d, want 1, 1, 2", s.Puts(), s.Appends(), s.Saves())
	}
}

// Failures set while calls run are race-free.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	s := faultstore.New(mem.New())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			id := string(rune('a' + i))
			_, _ = s.PutToolResult(ctx, "s1", id, id)
			s.FailPut(nil)
			_, _ = s.LoadState(ctx, "s1")
			_ = s.Puts()
		})
	}
	wg.Wait()
	if s.Puts() != 8 || len(s.PutsByID()) != 8 {
		t.Errorf("puts %d by ID %v", s.Puts(), s.PutsByID())
	}
}
