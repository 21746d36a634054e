package storeargs

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
)

func TestRecordAndState(t *testing.T) {
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil record", Record(ctx, "x store", nil), "x store: append record: nil record"},
		{"unsafe session", Record(ctx, "x store", &compaction.CompactionRecord{SessionID: "../s", ID: "r"}), "x store: append record: "},
		{"no ID", Record(ctx, "x store", &compaction.CompactionRecord{SessionID: "s"}), "x store: append record to session s: record has no ID"},
		{"finished context", Record(done, "x store", &compaction.CompactionRecord{SessionID: "s", ID: "r"}), "x store: append record of session s: context canceled"},
		{"nil state", stateErr(ctx, nil), `x store: save state of session "s": nil state`},
		{"state too large", stateErr(ctx, &compaction.State{LastSummary: strings.Repeat("x", 64<<20)}), "x store: save state of session s: "},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error starting %q", tc.name, tc.err, tc.want)
		}
	}
	if err := stateErr(ctx, &compaction.State{LastSummary: strings.Repeat("x", 64<<20)}); !errors.Is(err, compaction.ErrObjectTooLarge) {
		t.Errorf("a state too large: %v, want ErrObjectTooLarge", err)
	}
	if err := Record(ctx, "x store", &compaction.CompactionRecord{SessionID: "s", ID: "r"}); err != nil {
		t.Errorf("a good record: %v", err)
	}
	if data, err := State(ctx, "x store", "s", &compaction.State{Watermark: 3}, func() string { return "where" }); err != nil || !strings.Contains(string(data), `"watermark":3`) {
		t.Errorf("a good state: %s, %v", data, err)
	}
}

func stateErr(ctx context.Context, st *compaction.State) error {
	_, err := State(ctx, "x store", "s", st, func() string { return "where" })
	return err
}

func TestArchiveAndListSpans(t *testing.T) {
	ctx := context.Background()
	if err := Archive(ctx, "x store", "open archive", "s", 0, 4); err != nil {
		t.Errorf("a good span: %v", err)
	}
	if err := Archive(ctx, "x store", "open archive", "s", 4, 4); err == nil || !strings.HasPrefix(err.Error(), "x store: open archive of session s: ") {
		t.Errorf("an empty span: %v, want an error naming the store, the call and the session", err)
	}
	if err := Archive(ctx, "x store", "put archive", "../s", 0, 4); err == nil || !strings.HasPrefix(err.Error(), "x store: put archive: ") {
		t.Errorf("an unsafe session: %v, want the session's error", err)
	}
	big := make([]byte, bounded.ArchiveBytes+1)
	if err := ArchiveData(ctx, "x store", "s", 0, 4, big, func() string { return "where" }); !errors.Is(err, compaction.ErrObjectTooLarge) || !strings.HasPrefix(err.Error(), "x store: put archive of session s: ") {
		t.Errorf("an archive too large: %v, want ErrObjectTooLarge naming the store and the session", err)
	}
	if err := ArchiveData(ctx, "x store", "s", 0, 4, []byte("{}\n"), func() string { return "where" }); err != nil {
		t.Errorf("a good archive: %v", err)
	}

	spans := []compaction.ArchiveSpan{{From: 0, To: 4}, {From: 4, To: 9}, {From: 9, To: 12}}
	var seen []compaction.ArchiveSpan
	stopAt := func(n int, err error) func(compaction.ArchiveSpan) error {
		return func(s compaction.ArchiveSpan) error {
			seen = append(seen, s)
			if len(seen) == n {
				return err
			}
			return nil
		}
	}
	if err := ListSpans(spans, stopAt(2, compaction.ErrStopListing)); err != nil || len(seen) != 2 {
		t.Errorf("ErrStopListing at the second: %v after %v, want nil after two", err, seen)
	}
	seen = nil
	boom := errors.New("boom")
	if err := ListSpans(spans, stopAt(1, boom)); err != boom || len(seen) != 1 {
		t.Errorf("an error at the first: %v after %v, want it unwrapped after one", err, seen)
	}
	seen = nil
	if err := ListSpans(spans, stopAt(0, nil)); err != nil || len(seen) != 3 {
		t.Errorf("all: %v after %v, want nil after three", err, seen)
	}
}
