package s3

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
	"github.com/harness9/compaction-operator/compaction/storage/storetest"
)

// TestArchiveKeys: an archive's key is {prefix}archive/{session}/{from}-{to}.jsonl, a
// conversation's one level under its session's, and the ref is its s3:// URL; DeleteSession
// of the session removes both (the finalizer's GC by the session's prefixes).
func TestArchiveKeys(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	st := srv.store(t, bucket, "/tenant-a/")
	c := ctx(t)
	sid := storetest.SessionID(t)
	data := storetest.ArchiveJSONL(t, []compaction.Message{{Role: compaction.RoleUser, Content: "the task"}})
	ref, err := st.PutArchive(c, sid, 1, 40, data)
	if err != nil {
		t.Fatal(err)
	}
	key := "tenant-a/archive/" + sid + "/0000000001-0000000040.jsonl"
	if key != "tenant-a/"+compaction.ArchiveKey(sid, 1, 40) || ref != "s3://"+bucket+"/"+key {
		t.Fatalf("ref %q, want s3://%s/%s", ref, bucket, key)
	}
	conv := compaction.ConversationSessionID(sid, "sub-1")
	if _, err := st.PutArchive(c, conv, 0, 3, data); err != nil {
		t.Fatal(err)
	}
	convKey := "tenant-a/archive/" + sid + "/conversations/sub-1/0000000000-0000000003.jsonl"
	if got := srv.keys(t, bucket); !slices.Equal(got, []string{key, convKey}) {
		t.Fatalf("keys %q, want %q", got, []string{key, convKey})
	}
	if n, err := st.DeleteSession(c, sid); err != nil || n != 2 {
		t.Fatalf("DeleteSession = %d, %v; want the two archives", n, err)
	}
	if got := srv.keys(t, bucket); len(got) != 0 {
		t.Fatalf("left after DeleteSession: %q", got)
	}
}

// TestHostileArchive: an endpoint that serves an archive of 1 GiB, declared or not, costs a
// bounded read (the archive cap, or the scan's line cap) and fails with ErrObjectTooLarge; a
// listing of archives that never ends stops at the page cap with ErrTooManyPages.
func TestHostileArchive(t *testing.T) {
	for _, declare := range []bool{true, false} {
		h := &hostileS3{objectBytes: gib, declare: declare, listing: oneSegment}
		st := startHostileS3(t, h)
		err := checkBounded(t, "OpenArchive declared="+strconv.FormatBool(declare), 30*time.Second, 64<<20, func(ctx context.Context) error {
			rc, err := st.OpenArchive(ctx, "s1", 1, 40)
			if err != nil {
				return err
			}
			defer func() { _ = rc.Close() }()
			_, err = io.Copy(io.Discard, rc)
			return err
		})
		if !errors.Is(err, compaction.ErrObjectTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(bounded.ArchiveBytes)) {
			t.Errorf("reading a 1 GiB archive (declared %v): %v; want ErrObjectTooLarge naming the cap", declare, err)
		}
		if sent := h.sent.Load(); sent > bounded.ArchiveBytes+32<<20 {
			t.Errorf("the server got %d MiB out before the store stopped reading", sent>>20)
		}
	}
	// One message a line: a scan reads no more of a line than its cap.
	h := &hostileS3{objectBytes: gib, declare: false, listing: oneSegment}
	st := startHostileS3(t, h)
	err := checkBounded(t, "scan", 30*time.Second, 0, func(ctx context.Context) error {
		a := archiveAt{st, compaction.ArchiveSpan{From: 1, To: 40}}
		_, err := compaction.ScanArchive(ctx, a, "s1", compaction.HistoryQuery{MaxLineBytes: 1 << 20}, func(*compaction.ArchivedMessage) error { return nil })
		return err
	})
	if !errors.Is(err, compaction.ErrObjectTooLarge) {
		t.Errorf("scanning an archive of one 1 GiB line: %v; want ErrObjectTooLarge", err)
	}

	h = &hostileS3{} // endless continuation tokens
	st = startHostileS3(t, h)
	err = checkBounded(t, "ListArchives", 60*time.Second, 0, func(ctx context.Context) error {
		return st.ListArchives(ctx, "s1", func(compaction.ArchiveSpan) error { return nil })
	})
	if !errors.Is(err, compaction.ErrTooManyPages) {
		t.Errorf("ListArchives against an endless listing: %v; want ErrTooManyPages", err)
	}
	if pages := h.listPages.Load(); pages != bounded.ListPages {
		t.Errorf("the endpoint served %d list pages; want the cap, %d", pages, bounded.ListPages)
	}
}

// archiveAt is the store with its listing replaced by one archive (the hostile endpoint
// lists other keys).
type archiveAt struct {
	*Store
	span compaction.ArchiveSpan
}

func (a archiveAt) ListArchives(_ context.Context, _ string, fn func(compaction.ArchiveSpan) error) error {
	if err := fn(a.span); err != nil && !errors.Is(err, compaction.ErrStopListing) {
		return err
	}
	return nil
}
