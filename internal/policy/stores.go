package policy

import (
	"context"
	"io"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/egress"
)

// SessionStore is a session's store as the compaction API serves it: the engine's store
// (with the conditional state reads of compaction.WithStateRevalidation), the archive of what
// summaries replaced, and offloaded results streamed instead of read whole.
type SessionStore interface {
	compaction.Store
	compaction.StateRevalidator
	compaction.ArchiveStore
	// OpenToolResult opens an offloaded result; size is -1 when unknown.
	OpenToolResult(ctx context.Context, sessionID, toolCallID string) (rc io.ReadCloser, size int64, err error)
}

// StoreOpener opens the store at a pinned location. It is an interface so that the
// compaction API, which only serves stores, does not link the S3 client: the manager hands
// it backends.Stores, shared with the controllers.
type StoreOpener interface {
	// Open is the store at loc, its credentials read through secrets, whose every
	// connection allowed checks (nil checks nothing).
	Open(ctx context.Context, secrets SecretReader, loc *compactionv1alpha1.RecordsLocation, allowed *egress.Allowlist) (SessionStore, error)
}
