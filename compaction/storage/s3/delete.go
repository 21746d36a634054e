package s3

import (
	"context"
	"errors"
	"fmt"

	"github.com/minio/minio-go/v7"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
)

// DeleteSession removes every object of the session, its conversations' included, with
// batched multi-object deletes and returns how many it removed. It lists only under the
// session's prefixes, which end in '/' (the conversations' objects are under them), plus the
// exact state key, so a session whose ID extends this one is never touched.
// Per-object failures are reported joined, the first few by name. A listing that does not end
// within bounded.ListPages pages fails with an error wrapping compaction.ErrTooManyPages, once
// what it listed is deleted: call again.
func (s *Store) DeleteSession(ctx context.Context, sessionID string) (int, error) {
	if err := validate("delete session", sessionID); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(withPageBudget(ctx))
	defer cancel()

	// The feeder lists and hands keys to the batch delete as it goes, so a huge session is
	// never held in memory; RemoveObjectsWithResult groups them into requests of 1000.
	objects := make(chan minio.ObjectInfo)
	feedDone := make(chan error, 1)
	go func() {
		defer close(objects)
		feedDone <- s.feedSessionObjects(ctx, sessionID, objects)
	}()

	removed, failed := 0, 0
	var errs []error
	for res := range s.client.RemoveObjectsWithResult(ctx, s.bucket, objects, minio.RemoveObjectsOptions{}) {
		if res.Err != nil {
			// The first few, and how many more: a batch cut short by the context reports
			// each of its objects, and the error ends up in a condition's message.
			if failed++; failed <= maxDeleteErrors {
				errs = append(errs, fmt.Errorf("delete %s: %w", s.ref(res.ObjectName), mapErr(res.Err)))
			}
			continue
		}
		removed++
	}
	if failed > maxDeleteErrors {
		errs = append(errs, fmt.Errorf("and %d more objects not deleted", failed-maxDeleteErrors))
	}
	// The batch remover reads objects until the feeder closes the channel, but a remover
	// that stops early (context ended) must not leave the feeder blocked on a send.
	cancel()
	if err := <-feedDone; err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("s3 store: delete session %s (%d objects removed): %w", sessionID, removed, mapErr(err))
	}
	return removed, nil
}

// maxDeleteErrors bounds the per-object failures DeleteSession reports one by one.
const maxDeleteErrors = 5

// feedSessionObjects sends every object of the session to out.
func (s *Store) feedSessionObjects(ctx context.Context, sessionID string, out chan<- minio.ObjectInfo) error {
	send := func(obj minio.ObjectInfo) error {
		select {
		case out <- minio.ObjectInfo{Key: obj.Key}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, rel := range compaction.SessionPrefixes(sessionID) {
		if err := s.list(ctx, s.key(rel), send); err != nil {
			return err
		}
	}
	// The state is one exact key. It is not listed by prefix: "state/abc.json" is a prefix
	// of session "abc.json"'s "state/abc.json.json".
	key := s.key(compaction.StateKey(sessionID))
	if _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err != nil {
		if err = mapErr(err); errors.Is(err, compaction.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", s.ref(key), mapErr(err))
	}
	return send(minio.ObjectInfo{Key: key})
}

// list calls fn for every object under prefix, in key order. It always drains the listing
// so its goroutine ends, even when fn fails.
func (s *Store) list(ctx context.Context, prefix string, fn func(minio.ObjectInfo) error) error {
	return s.listObjects(ctx, prefix, true, fn)
}

// listLevel is list of the objects right under prefix (the delimiter '/'): each deeper level
// comes once, as an entry whose key is that level's prefix, ending in '/'.
func (s *Store) listLevel(ctx context.Context, prefix string, fn func(minio.ObjectInfo) error) error {
	return s.listObjects(ctx, prefix, false, fn)
}

func (s *Store) listObjects(ctx context.Context, prefix string, recursive bool, fn func(minio.ObjectInfo) error) error {
	ctx, cancel := context.WithCancel(withPageBudget(ctx))
	defer cancel()
	ch := s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: recursive})
	var err error
	for obj := range ch {
		if err != nil {
			continue // draining after a failure
		}
		switch {
		case errors.Is(obj.Err, compaction.ErrTooManyPages):
			// Not obj.Err itself: it quotes the request's URL, and so the endpoint's
			// continuation token.
			err = fmt.Errorf("list s3://%s/%s: %w (%d pages)", s.bucket, prefix, compaction.ErrTooManyPages, bounded.ListPages)
		case obj.Err != nil:
			err = fmt.Errorf("list s3://%s/%s: %w", s.bucket, prefix, mapErr(obj.Err))
		default:
			err = fn(obj)
		}
		if err != nil {
			cancel()
		}
	}
	if err == nil {
		// ListObjects reports a context that ended before it started as an entry, but one
		// that ends between pages just closes the channel: do not take that for the end.
		err = ctx.Err()
	}
	return err
}
