// Package storeargs checks the arguments of a compaction.Store call the same way in every
// backend (fs, mem, s3), so each refuses the same bad input with the same message, prefixed
// by the backend's name ("fs store", "memory store", "s3 store"). ListSpans likewise keeps
// the one contract of a ListArchives callback.
package storeargs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
)

// Session validates the session ID and refuses to start work under a finished context.
func Session(ctx context.Context, backend, op, sessionID string) error {
	if err := compaction.ValidateSessionID(sessionID); err != nil {
		return fmt.Errorf("%s: %s: %w", backend, op, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %s of session %s: %w", backend, op, sessionID, err)
	}
	return nil
}

// Archive checks the arguments of a call on one archive (put, open): the session as Session
// does, and the span.
func Archive(ctx context.Context, backend, op, sessionID string, from, to int) error {
	if err := Session(ctx, backend, op, sessionID); err != nil {
		return err
	}
	if err := compaction.ValidateArchiveSpan(from, to); err != nil {
		return fmt.Errorf("%s: %s of session %s: %w", backend, op, sessionID, err)
	}
	return nil
}

// ArchiveData checks a PutArchive call: its arguments as Archive does, and data no larger
// than a read accepts (where names the archive in that error). An archive too large is never
// written, as it could not be read back.
func ArchiveData(ctx context.Context, backend, sessionID string, from, to int, data []byte, where func() string) error {
	if err := Archive(ctx, backend, "put archive", sessionID, from, to); err != nil {
		return err
	}
	if len(data) > bounded.ArchiveBytes {
		return fmt.Errorf("%s: put archive of session %s: %w", backend, sessionID,
			bounded.TooLarge("archive", where(), int64(len(data)), bounded.ArchiveBytes))
	}
	return nil
}

// ListSpans calls fn for each span in order, as ListArchives promises its callback:
// compaction.ErrStopListing from fn ends the listing without an error, any other error ends
// it with that error, unwrapped.
func ListSpans(spans []compaction.ArchiveSpan, fn func(compaction.ArchiveSpan) error) error {
	for _, span := range spans {
		if err := fn(span); err != nil {
			if errors.Is(err, compaction.ErrStopListing) {
				return nil
			}
			return err
		}
	}
	return nil
}

// Record checks an AppendRecord argument: a record, of a valid session, with an ID.
func Record(ctx context.Context, backend string, rec *compaction.CompactionRecord) error {
	if rec == nil {
		return errors.New(backend + ": append record: nil record")
	}
	if err := Session(ctx, backend, "append record", rec.SessionID); err != nil {
		return err
	}
	if rec.ID == "" {
		return fmt.Errorf("%s: append record to session %s: record has no ID", backend, rec.SessionID)
	}
	return nil
}

// State checks a SaveState argument and returns its encoding: a state, of a valid session,
// no larger than a load accepts (where names the object in that error). A state too large is
// never written, as it could not be loaded again: the stored one stays as it was.
func State(ctx context.Context, backend, sessionID string, st *compaction.State, where func() string) ([]byte, error) {
	if st == nil {
		return nil, fmt.Errorf("%s: save state of session %q: nil state", backend, sessionID)
	}
	if err := Session(ctx, backend, "save state", sessionID); err != nil {
		return nil, err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("%s: encode state of session %s: %w", backend, sessionID, err)
	}
	if len(data) > bounded.StateBytes {
		return nil, fmt.Errorf("%s: save state of session %s: %w", backend, sessionID,
			bounded.TooLarge("state", where(), int64(len(data)), bounded.StateBytes))
	}
	return data, nil
}
