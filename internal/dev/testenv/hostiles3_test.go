package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
)

// TestHostileS3 checks each mode of the hostile endpoint through the operator's S3 store:
// the bucket passes the probe, and each read misbehaves the way its mode says (the store's
// caps turning it into an error), with the server counting what it sent.
func TestHostileS3(t *testing.T) {
	h := StartHostileS3(t, map[string]HostileMode{
		"none": HostileNone, "huge": HostileHugeState, "unsized": HostileHugeStateUnsized,
		"endless": HostileEndlessList, "trickle": HostileTrickle,
	})
	h.SetTrickleInterval(10 * time.Millisecond)
	ctx := context.Background()
	store := func(bucket string) *s3.Store {
		s, err := s3.New(ctx, s3.Config{Endpoint: h.Endpoint(), Bucket: bucket, Prefix: "p", Insecure: true, AccessKey: "k", SecretKey: "s"})
		Must(t, err)
		return s
	}
	const sid = "0b9a7c4e-1111-4222-8333-944455556666"

	for _, b := range []string{"none", "huge", "unsized", "endless", "trickle"} {
		if err := store(b).EnsureBucket(ctx, false); err != nil {
			t.Errorf("EnsureBucket(%s): %v", b, err)
		}
	}
	if err := store("missing").EnsureBucket(ctx, false); !errors.Is(err, s3.ErrBucketNotFound) {
		t.Errorf("EnsureBucket of a bucket the server does not have: %v, want ErrBucketNotFound", err)
	}

	t.Run("None", func(t *testing.T) {
		s := store("none")
		Must(t, s.SaveState(ctx, sid, &compaction.State{LastSummary: "x"}))
		// A second first save is create-only too (If-None-Match: *): refused, as S3 does.
		if err := s.SaveState(ctx, sid, &compaction.State{LastSummary: "y"}); !errors.Is(err, compaction.ErrConflict) {
			t.Errorf("second create-only SaveState: %v, want ErrConflict", err)
		}
		if _, err := s.PutToolResult(ctx, sid, "call_1", "out"); err != nil {
			t.Error(err)
		}
		if _, err := s.LoadState(ctx, sid); !errors.Is(err, compaction.ErrNotFound) {
			t.Errorf("LoadState: %v, want ErrNotFound", err)
		}
		if n, err := s.DeleteSession(ctx, sid); err != nil || n != 0 {
			t.Errorf("DeleteSession = %d, %v", n, err)
		}
		if st := h.Stats("none"); st.Puts != 2 {
			t.Errorf("stats %+v, want 2 puts", st)
		}
	})
	t.Run("HugeState", func(t *testing.T) {
		for _, b := range []string{"huge", "unsized"} {
			_, err := store(b).LoadState(ctx, sid)
			if !errors.Is(err, compaction.ErrObjectTooLarge) {
				t.Errorf("%s: LoadState: %v, want ErrObjectTooLarge", b, err)
			}
			st := h.Stats(b)
			t.Logf("%s: %v; server sent %d bytes", b, err, st.HugeBytes)
			if st.StateGets != 1 || st.HugeBodies != 1 || st.HugeBytes >= HugeStateBytes/4 {
				t.Errorf("%s: stats %+v: want one huge body, cut short", b, st)
			}
		}
		if st := h.Stats("unsized"); st.HugeBytes < 16<<20 {
			t.Errorf("unsized: only %d bytes sent: the store cannot have read up to its cap", st.HugeBytes)
		}
	})
	t.Run("EndlessList", func(t *testing.T) {
		_, err := store("endless").DeleteSession(ctx, sid)
		if !errors.Is(err, compaction.ErrTooManyPages) {
			t.Errorf("DeleteSession: %v, want ErrTooManyPages", err)
		}
		if st := h.Stats("endless"); st.ListPages < 100 {
			t.Errorf("stats %+v: want the endless listing's pages counted", st)
		}
	})
	t.Run("Trickle", func(t *testing.T) {
		s := store("trickle")
		for what, call := range map[string]func(context.Context) error{
			"LoadState":     func(ctx context.Context) error { _, err := s.LoadState(ctx, sid); return err },
			"DeleteSession": func(ctx context.Context) error { _, err := s.DeleteSession(ctx, sid); return err },
		} {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := call(cctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v, want the deadline", what, err)
			}
		}
		Eventually(t, 5*time.Second, "the trickled answers to end", func() (bool, string) {
			st := h.Stats("trickle")
			return st.Trickles == 2 && st.Trickling == 0 && st.TrickledBytes > 2, ""
		})
	})
}
