// Package s3 is a compaction.Store on any S3-compatible object store (AWS S3, MinIO, Ceph
// RGW, SeaweedFS, R2), using minio-go. Keys, under an optional prefix, follow the layout of
// the compaction package:
//
//	tool_results/{sessionID}/{SafeKey(toolCallID)}.txt
//	compaction_records/{sessionID}/{recordID}.jsonl   (one object per record)
//	state/{sessionID}.json
//	archive/{sessionID}/{from}-{to}.jsonl              (one object per compaction, compaction.ArchiveKey)
//	.probe/{random}                                   (ProbeConditionalWrites; deleted at once)
//
// A conversation of a session (compaction.ConversationSessionID) has the session ID
// "{sessionID}/conversations/{id}", so its keys are one level under the session's:
// tool_results/{sessionID}/conversations/{id}/..., compaction_records/{sessionID}/conversations/{id}/...,
// archive/{sessionID}/conversations/{id}/... and state/conversations/{sessionID}/{id}.json.
// DeleteSession of the session removes them.
//
// S3 has no append, and rewriting a growing object loses records when two replicas race, so
// every record is its own segment object. Record IDs are time-sortable and S3 lists keys in
// order, so listing the session's segment prefix yields the trail oldest first.
//
// The endpoint is whatever a policy names, so nothing it answers is read unbounded: an object
// is read up to the cap of its kind (a state 16 MiB, a tool result 32 MiB, a record 8 MiB,
// an archive 64 MiB),
// checked first against its declared length, any other answer up to 8 MiB, and one call
// lists at most 1,000 pages. Over a cap, the call fails with an error wrapping
// compaction.ErrObjectTooLarge or compaction.ErrTooManyPages.
package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
	"github.com/harness9/compaction-operator/compaction/storage/internal/storeargs"
)

// What went wrong, for callers that act on it (a condition reason, say) without knowing S3's
// error codes: the store's errors wrap these; test with errors.Is. An error answer of the
// endpoint is also a *ResponseError.
var (
	// ErrBucketNotFound: the bucket does not exist (Ping and EnsureBucket without create, or
	// any request answered NoSuchBucket).
	ErrBucketNotFound = errors.New("bucket does not exist")
	// ErrAccessDenied: the endpoint refused the credentials (unknown key, wrong secret,
	// expired or invalid token) or what they were used for.
	ErrAccessDenied = errors.New("access denied")
	// ErrConditionalWritesIgnored: ProbeConditionalWrites saw the endpoint accept a
	// create-only write (If-None-Match: *) over an object that existed, so the store's
	// create-only writes replace objects there instead of failing.
	ErrConditionalWritesIgnored = errors.New("the endpoint ignores If-None-Match: a create-only write replaced an existing object")
)

// Config says where the store lives and how to reach it.
type Config struct {
	// Endpoint is host[:port] of the S3 API, without a scheme, e.g. "s3.amazonaws.com" or
	// "minio.storage.svc:9000".
	Endpoint string
	Bucket   string
	// Prefix is prepended to every key, so several tenants or clusters can share a bucket.
	// Leading slashes are dropped and exactly one trailing slash is ensured.
	Prefix string
	// Region is the bucket's region; empty lets the client discover it.
	Region string
	// Insecure selects plain HTTP instead of HTTPS.
	Insecure  bool
	AccessKey string
	SecretKey string
	// MaxRetries bounds the attempts of one request (default 3). minio-go's own default (10,
	// with backoff) makes every call of a compaction wait seconds while storage is down,
	// where the engine should fail open quickly.
	MaxRetries int
}

// Store is an S3 compaction.Store. It is safe for concurrent use.
type Store struct {
	client *minio.Client
	bucket string
	region string // for MakeBucket; empty means the client's default
	prefix string // normalized: empty or ending in exactly one '/'
}

var (
	_ compaction.Store            = (*Store)(nil)
	_ compaction.StateRevalidator = (*Store)(nil)
	_ compaction.ArchiveStore     = (*Store)(nil)
)

// Option changes how New builds a store.
type Option func(*options)

type options struct{ transport http.RoundTripper }

// WithTransport makes the store send its requests with t (for example one whose dialer
// checks the addresses it connects to), instead of minio-go's default transport
// (DefaultTransport, which t may be built from).
func WithTransport(t http.RoundTripper) Option {
	return func(o *options) { o.transport = t }
}

// DefaultTransport returns the HTTP transport a store for cfg sends its requests with when
// given none: minio-go's default for cfg's scheme (its timeouts and pool sizes, no
// transparent gzip decoding, TLS 1.2 and the roots SSL_CERT_FILE adds). Wrap or change it and
// pass it to WithTransport, and the store behaves as on the default otherwise.
func DefaultTransport(cfg Config) (*http.Transport, error) {
	t, err := minio.DefaultTransport(!cfg.Insecure)
	if err != nil {
		return nil, fmt.Errorf("s3 store: transport for %s: %w", cfg.Endpoint, err)
	}
	return t, nil
}

// New returns a store for cfg. It does not contact the server: call Ping or EnsureBucket
// for that. ctx is accepted for symmetry with the other constructors and is not retained.
func New(ctx context.Context, cfg Config, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return newStore(ctx, cfg, o.transport)
}

// newStore is New with an optional HTTP transport, which tests use to observe requests.
func newStore(_ context.Context, cfg Config, transport http.RoundTripper) (*Store, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("s3 store: empty endpoint")
	}
	if strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("s3 store: endpoint %q must be host[:port] without a scheme (set Insecure for plain HTTP)", cfg.Endpoint)
	}
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("s3 store: bucket %q: %w", cfg.Bucket, err)
	}
	prefix, err := normalizePrefix(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	if transport == nil {
		if transport, err = DefaultTransport(cfg); err != nil {
			return nil, err
		}
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     !cfg.Insecure,
		Region:     cfg.Region,
		Transport:  guardTransport{base: transport},
		MaxRetries: orDefault(cfg.MaxRetries, defaultMaxRetries),
	})
	if err != nil {
		return nil, fmt.Errorf("s3 store: client for %s: %w", cfg.Endpoint, err)
	}
	return &Store{client: client, bucket: cfg.Bucket, region: cfg.Region, prefix: prefix}, nil
}

const defaultMaxRetries = 3

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// normalizePrefix drops leading slashes and ensures one trailing slash, so "a", "/a" and
// "a/" all name the same directory-like prefix and keys never hold an empty segment there.
func normalizePrefix(p string) (string, error) {
	p = strings.TrimLeft(p, "/")
	p = strings.TrimRight(p, "/")
	if p == "" {
		return "", nil
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("prefix %q holds an empty, '.' or '..' segment", p)
		}
	}
	return p + "/", nil
}

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Prefix returns the normalized key prefix (empty, or ending in '/').
func (s *Store) Prefix() string { return s.prefix }

// Ping checks that the server answers, the credentials work and the bucket exists, with one
// cheap HEAD request. It backs the StorageReady condition.
func (s *Store) Ping(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("s3 store: ping bucket %s at %s: %w", s.bucket, s.client.EndpointURL().Host, mapErr(err))
	}
	if !ok {
		return fmt.Errorf("s3 store: ping bucket %s at %s: %w", s.bucket, s.client.EndpointURL().Host, ErrBucketNotFound)
	}
	return nil
}

// EnsureBucket checks the bucket exists and, when create is true, creates it if it does not.
// Losing a creation race to another replica counts as success.
func (s *Store) EnsureBucket(ctx context.Context, create bool) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("s3 store: check bucket %s: %w", s.bucket, mapErr(err))
	}
	if ok {
		return nil
	}
	if !create {
		return fmt.Errorf("s3 store: bucket %s: %w", s.bucket, ErrBucketNotFound)
	}
	if mkErr := s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: s.region}); mkErr != nil {
		// Someone may have created it since the check (another replica, or the bucket is
		// already ours): if it is there and reachable now, the goal is met.
		if ok, err := s.client.BucketExists(ctx, s.bucket); err == nil && ok {
			return nil
		}
		return fmt.Errorf("s3 store: create bucket %s: %w", s.bucket, mapErr(mkErr))
	}
	return nil
}

// probeKeyPrefix is where ProbeConditionalWrites writes, under the store's prefix: no
// session's key starts with it (see the package documentation).
const probeKeyPrefix = ".probe/"

// ProbeConditionalWrites checks that the endpoint honours If-None-Match: *, on which
// PutToolResult (a reused tool-call ID never replaces an original) and a session's first
// SaveState (two replicas cannot both write it) rely. It writes a small object under a
// random key below {prefix}.probe/, writes it again create-only, and expects the second
// write to fail with 412 Precondition Failed. It returns nil when it did, an error wrapping
// ErrConditionalWritesIgnored when the second write succeeded, and any other error when
// the probe could not tell. The probe object is deleted whenever it may have been written
// (unless the first write was answered with an error), with a deadline of its own so that a
// probe cut short still cleans up; a failure to delete it is part of the error.
func (s *Store) ProbeConditionalWrites(ctx context.Context) (err error) {
	var id [12]byte
	if _, rerr := rand.Read(id[:]); rerr != nil {
		return fmt.Errorf("s3 store: probe conditional writes: %w", rerr)
	}
	key := s.key(probeKeyPrefix + hex.EncodeToString(id[:]))
	body := []byte("compaction-operator conditional write probe\n")
	put := func() error {
		opts := minio.PutObjectOptions{ContentType: "text/plain; charset=utf-8"}
		opts.SetMatchETagExcept("*")
		_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(body), int64(len(body)), opts)
		return err
	}
	written := true // or possibly written: only an error answer says it was not
	defer func() {
		if !written {
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeDeleteTimeout)
		defer cancel()
		if derr := s.client.RemoveObject(dctx, s.bucket, key, minio.RemoveObjectOptions{}); derr != nil {
			err = errors.Join(err, fmt.Errorf("s3 store: delete probe object %s: %w", s.ref(key), mapErr(derr)))
		}
	}()
	if perr := put(); perr != nil {
		var resp minio.ErrorResponse
		written = !errors.As(perr, &resp)
		return fmt.Errorf("s3 store: probe conditional writes: put %s: %w", s.ref(key), mapErr(perr))
	}
	err = put()
	var resp minio.ErrorResponse
	switch {
	case err == nil:
		return fmt.Errorf("s3 store: probe conditional writes at %s: %w", s.client.EndpointURL().Host, ErrConditionalWritesIgnored)
	case errors.As(err, &resp) && resp.Code == "PreconditionFailed":
		return nil
	default:
		return fmt.Errorf("s3 store: probe conditional writes: put %s again: %w", s.ref(key), mapErr(err))
	}
}

// probeDeleteTimeout bounds the deletion of the probe object, whose context is not the
// probe's: a probe cut short still cleans up.
const probeDeleteTimeout = 10 * time.Second

func (s *Store) key(rel string) string { return s.prefix + rel }

func (s *Store) ref(key string) string { return "s3://" + s.bucket + "/" + key }

// PutToolResult stores content and returns its s3:// URL.
func (s *Store) PutToolResult(ctx context.Context, sessionID, toolCallID, content string) (string, error) {
	if err := validate("put tool result", sessionID); err != nil {
		return "", err
	}
	key := s.key(compaction.ToolResultKey(sessionID, toolCallID))
	if len(content) > bounded.ToolResultBytes {
		// Never stored: it could not be read back.
		return "", fmt.Errorf("s3 store: put tool result %q of session %s: %w", toolCallID, sessionID,
			bounded.TooLarge("tool result", s.ref(key), int64(len(content)), bounded.ToolResultBytes))
	}
	// Create-only (If-None-Match: *): a reused tool call ID must not replace an original that
	// only this object holds. The same bytes again (a retry, another replica) are a success.
	opts := minio.PutObjectOptions{ContentType: "text/plain; charset=utf-8"}
	opts.SetMatchETagExcept("*")
	if _, err := s.client.PutObject(ctx, s.bucket, key, strings.NewReader(content), int64(len(content)), opts); err != nil {
		var resp minio.ErrorResponse
		if !errors.As(err, &resp) || resp.Code != "PreconditionFailed" {
			return "", fmt.Errorf("s3 store: put tool result %q of session %s: put %s: %w", toolCallID, sessionID, s.ref(key), mapErr(err))
		}
		// Read back no more than content's length: a longer one is different anyway.
		stored, gerr := s.get(ctx, key, int64(len(content)), "stored tool result")
		tooLong := errors.Is(gerr, compaction.ErrObjectTooLarge)
		if gerr != nil && !tooLong {
			return "", fmt.Errorf("s3 store: put tool result %q of session %s: exists, and reading it back failed: %w", toolCallID, sessionID, mapErr(gerr))
		}
		if tooLong || string(stored) != content {
			return "", fmt.Errorf("s3 store: put tool result %q of session %s: %w", toolCallID, sessionID, compaction.ErrToolResultExists)
		}
	}
	return s.ref(key), nil
}

// GetToolResult reads a tool result back; a missing one is ErrNotFound.
func (s *Store) GetToolResult(ctx context.Context, sessionID, toolCallID string) ([]byte, error) {
	if err := validate("get tool result", sessionID); err != nil {
		return nil, err
	}
	data, err := s.get(ctx, s.key(compaction.ToolResultKey(sessionID, toolCallID)), bounded.ToolResultBytes, "tool result")
	if err != nil {
		return nil, fmt.Errorf("s3 store: get tool result %q of session %s: %w", toolCallID, sessionID, mapErr(err))
	}
	return data, nil
}

// OpenToolResult opens a tool result for reading and returns its size, without reading it
// into memory: a server copies it to its client as it arrives from the store. A missing one
// is ErrNotFound. The caller closes the reader.
func (s *Store) OpenToolResult(ctx context.Context, sessionID, toolCallID string) (io.ReadCloser, int64, error) {
	if err := validate("open tool result", sessionID); err != nil {
		return nil, 0, err
	}
	key := s.key(compaction.ToolResultKey(sessionID, toolCallID))
	body, info, err := s.openObject(ctx, key, minio.GetObjectOptions{}, bounded.ToolResultBytes, "tool result")
	if err != nil {
		return nil, 0, fmt.Errorf("s3 store: open tool result %q of session %s: %w", toolCallID, sessionID, err)
	}
	return body, info.Size, nil
}

// AppendRecord writes the record as a new one-line segment named after its ID. Nothing is
// ever read back or rewritten, so concurrent writers (any number of replicas) cannot lose
// each other's records.
func (s *Store) AppendRecord(ctx context.Context, rec *compaction.CompactionRecord) error {
	if err := storeargs.Record(ctx, backend, rec); err != nil {
		return err
	}
	line, err := rec.JSONLine()
	if err != nil {
		return fmt.Errorf("s3 store: encode record %s: %w", rec.ID, err)
	}
	key := s.key(compaction.RecordSegmentKey(rec.SessionID, rec.ID))
	if len(line) > bounded.RecordBytes {
		return fmt.Errorf("s3 store: append record %s of session %s: %w", rec.ID, rec.SessionID,
			bounded.TooLarge("record", s.ref(key), int64(len(line)), bounded.RecordBytes))
	}
	if err := s.put(ctx, key, line, "application/x-ndjson"); err != nil {
		return fmt.Errorf("s3 store: append record %s of session %s: %w", rec.ID, rec.SessionID, mapErr(err))
	}
	return nil
}

// ReadRecords streams the session's segments to w in key (= time) order, one object at a
// time, so a long trail never sits in memory. A session without records writes nothing.
func (s *Store) ReadRecords(ctx context.Context, sessionID string, w io.Writer) error {
	if err := validate("read records", sessionID); err != nil {
		return err
	}
	prefix := s.key(compaction.SessionPrefixes(sessionID)[1])
	ctx = withPageBudget(ctx)
	lw := &lineWriter{w: w}
	// Only the segments right under the prefix: the session's conversations keep theirs
	// one level down ({prefix}conversations/{id}/), and they are not this trail. Listed
	// with a delimiter, S3 names each such level once instead of listing its segments.
	err := s.listLevel(ctx, prefix, func(obj minio.ObjectInfo) error {
		if strings.Contains(obj.Key[len(prefix):], "/") {
			return nil
		}
		return s.copyObject(ctx, obj.Key, lw)
	})
	if err != nil {
		return fmt.Errorf("s3 store: read records of session %s: %w", sessionID, mapErr(err))
	}
	return nil
}

// copyObject streams one segment to lw and ends it with a newline if it lacks one (a
// segment written by another tool), so the output stays valid JSONL.
func (s *Store) copyObject(ctx context.Context, key string, lw *lineWriter) error {
	obj, _, err := s.openObject(ctx, key, minio.GetObjectOptions{}, bounded.RecordBytes, "record")
	switch {
	case errors.Is(err, compaction.ErrNotFound):
		return nil // deleted between the listing and the read: see below
	case errors.Is(err, compaction.ErrObjectTooLarge):
		return err
	case err != nil:
		return fmt.Errorf("get %s: %w", s.ref(key), err)
	}
	// Closing a read stream only releases its connection: it cannot lose data, and the
	// copy's result is already known by then.
	defer func() { _ = obj.Close() }()
	if _, err := io.Copy(lw, obj); err != nil {
		if errors.Is(err, compaction.ErrObjectTooLarge) {
			return err
		}
		err = mapErr(err)
		if errors.Is(err, compaction.ErrNotFound) && lw.segmentBytes == 0 {
			// Deleted between the listing and the read (DeleteSession ran meanwhile): the
			// segment is gone, so it is not part of the trail any more.
			return nil
		}
		return fmt.Errorf("copy %s: %w", s.ref(key), mapErr(err))
	}
	return lw.endSegment()
}

// PutArchive writes one archive, replacing one of the same range, and returns its s3:// URL.
func (s *Store) PutArchive(ctx context.Context, sessionID string, from, to int, data []byte) (string, error) {
	if err := validate("put archive", sessionID); err != nil {
		return "", err
	}
	if err := compaction.ValidateArchiveSpan(from, to); err != nil {
		return "", fmt.Errorf("s3 store: put archive of session %s: %w", sessionID, err)
	}
	key := s.key(compaction.ArchiveKey(sessionID, from, to))
	if len(data) > bounded.ArchiveBytes {
		// Never stored: it could not be read back.
		return "", fmt.Errorf("s3 store: put archive of session %s: %w", sessionID,
			bounded.TooLarge("archive", s.ref(key), int64(len(data)), bounded.ArchiveBytes))
	}
	if err := s.put(ctx, key, data, "application/x-ndjson"); err != nil {
		return "", fmt.Errorf("s3 store: put archive of session %s: %w", sessionID, mapErr(err))
	}
	return s.ref(key), nil
}

// ListArchives lists the archives right under the session's archive prefix (its
// conversations' are one level down, and not listed), in key order: by From, then To.
// Objects there whose names are not archive names are skipped.
func (s *Store) ListArchives(ctx context.Context, sessionID string, fn func(compaction.ArchiveSpan) error) error {
	if err := validate("list archives", sessionID); err != nil {
		return err
	}
	prefix := s.key("archive/" + sessionID + "/")
	err := s.listLevel(withPageBudget(ctx), prefix, func(obj minio.ObjectInfo) error {
		span, ok := compaction.ParseArchiveName(obj.Key[len(prefix):])
		if !ok {
			return nil
		}
		return fn(span)
	})
	if errors.Is(err, compaction.ErrStopListing) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("s3 store: list archives of session %s: %w", sessionID, mapErr(err))
	}
	return nil
}

// OpenArchive opens one archive for reading, bounded by the archive cap; a missing one is
// ErrNotFound.
func (s *Store) OpenArchive(ctx context.Context, sessionID string, from, to int) (io.ReadCloser, error) {
	if err := validate("open archive", sessionID); err != nil {
		return nil, err
	}
	if err := compaction.ValidateArchiveSpan(from, to); err != nil {
		return nil, fmt.Errorf("s3 store: open archive of session %s: %w", sessionID, err)
	}
	key := s.key(compaction.ArchiveKey(sessionID, from, to))
	body, _, err := s.openObject(ctx, key, minio.GetObjectOptions{}, bounded.ArchiveBytes, "archive")
	if err != nil {
		return nil, fmt.Errorf("s3 store: open archive %d-%d of session %s: %w", from, to, sessionID, err)
	}
	return body, nil
}

// LoadState reads the session's state; a missing one is ErrNotFound.
func (s *Store) LoadState(ctx context.Context, sessionID string) (*compaction.State, error) {
	if err := validate("load state", sessionID); err != nil {
		return nil, err
	}
	key := s.key(compaction.StateKey(sessionID))
	data, info, err := s.getObject(ctx, key, minio.GetObjectOptions{}, bounded.StateBytes, "state")
	if err != nil {
		return nil, fmt.Errorf("s3 store: load state of session %s: %w", sessionID, err)
	}
	return s.decodeState(key, data, info)
}

// decodeState is the state stored at key, as read with its object info.
func (s *Store) decodeState(key string, data []byte, info minio.ObjectInfo) (*compaction.State, error) {
	var st compaction.State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("s3 store: decode state %s: %w", s.ref(key), err)
	}
	st.Version = info.ETag
	return &st, nil
}

// LoadStateIfChanged reads the session's state unless it is still version: one GET with
// If-None-Match, which S3 answers 304, without a body, while it is. A missing state is
// ErrNotFound.
func (s *Store) LoadStateIfChanged(ctx context.Context, sessionID, version string) (*compaction.State, error) {
	if err := validate("load state", sessionID); err != nil {
		return nil, err
	}
	key := s.key(compaction.StateKey(sessionID))
	var opts minio.GetObjectOptions
	if err := opts.SetMatchETagExcept(version); err != nil {
		return nil, fmt.Errorf("s3 store: load state of session %s: %w", sessionID, err)
	}
	data, info, err := s.getObject(ctx, key, opts, bounded.StateBytes, "state")
	if err != nil {
		var resp minio.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusNotModified {
			return nil, nil
		}
		return nil, fmt.Errorf("s3 store: load state of session %s: %w", sessionID, err)
	}
	return s.decodeState(key, data, info)
}

// SaveState replaces the session's state if it is still the version st was loaded from
// (else ErrConflict). A PUT replaces an object atomically, so readers see the old or the new
// state, never a mix.
func (s *Store) SaveState(ctx context.Context, sessionID string, st *compaction.State) error {
	key := s.key(compaction.StateKey(sessionID))
	data, err := storeargs.State(ctx, backend, sessionID, st, func() string { return s.ref(key) })
	if err != nil {
		return err
	}
	// A conditional write: only over the version that was loaded (If-Match), or only when
	// there is none yet (If-None-Match), so two compactions of one session on different
	// replicas cannot overwrite each other's merge.
	opts := minio.PutObjectOptions{ContentType: "application/json"}
	if st.Version != "" {
		opts.SetMatchETag(st.Version)
	} else {
		opts.SetMatchETagExcept("*")
	}
	info, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		var resp minio.ErrorResponse
		if errors.As(err, &resp) && resp.Code == "PreconditionFailed" {
			return fmt.Errorf("s3 store: save state %s: %w", s.ref(key), compaction.ErrConflict)
		}
		return fmt.Errorf("s3 store: save state of session %s: put %s: %w", sessionID, s.ref(key), mapErr(err))
	}
	st.Version = info.ETag
	return nil
}

// put writes one object whole.
func (s *Store) put(ctx context.Context, key string, data []byte, contentType string) error {
	_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: contentType})
	if err != nil {
		return fmt.Errorf("put %s: %w", s.ref(key), mapErr(err))
	}
	return nil
}

// get reads one object whole if it is at most limit bytes (else an error wrapping
// compaction.ErrObjectTooLarge that names it, what it is, its size and the cap); a missing
// key is ErrNotFound.
func (s *Store) get(ctx context.Context, key string, limit int64, what string) ([]byte, error) {
	data, _, err := s.getObject(ctx, key, minio.GetObjectOptions{}, limit, what)
	return data, err
}

// getObject is get with the GET's options and the object's info (that answer's headers).
func (s *Store) getObject(ctx context.Context, key string, opts minio.GetObjectOptions, limit int64, what string) ([]byte, minio.ObjectInfo, error) {
	body, info, err := s.openObject(ctx, key, opts, limit, what)
	if err != nil {
		if errors.Is(err, compaction.ErrObjectTooLarge) {
			return nil, minio.ObjectInfo{}, err // names the object already
		}
		return nil, minio.ObjectInfo{}, fmt.Errorf("get %s: %w", s.ref(key), err)
	}
	defer func() { _ = body.Close() }() // read stream: see copyObject
	data, err := bounded.ReadAll(body, info.Size, limit, what, s.ref(key))
	switch {
	case errors.Is(err, compaction.ErrObjectTooLarge):
		return nil, minio.ObjectInfo{}, err
	case err != nil:
		return nil, minio.ObjectInfo{}, fmt.Errorf("get %s: %w", s.ref(key), mapErr(err))
	}
	return data, info, nil
}

// openObject sends one GET for key and returns its body, which fails once it goes past
// limit bytes (a body without a length, or longer than it said), and the object's info
// from the answer's headers. A declared length over limit fails at once, with an error
// wrapping compaction.ErrObjectTooLarge that names the object, its size and the cap; an
// error answer is mapped (mapErr), a missing key wrapping compaction.ErrNotFound. (Not
// Client.GetObject: its Stat sends a HEAD, whose length the GET's body need not keep to.)
func (s *Store) openObject(ctx context.Context, key string, opts minio.GetObjectOptions, limit int64, what string) (io.ReadCloser, minio.ObjectInfo, error) {
	body, info, _, err := minio.Core{Client: s.client}.GetObject(objectRead(ctx), s.bucket, key, opts)
	if err != nil {
		return nil, minio.ObjectInfo{}, mapErr(err)
	}
	if info.Size > limit {
		_ = body.Close() // read stream: see copyObject
		return nil, minio.ObjectInfo{}, bounded.TooLarge(what, s.ref(key), info.Size, limit)
	}
	return readCloser{bounded.Reader(body, limit, what, s.ref(key)), body}, info, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// mapErr replaces an error answer of the endpoint by a ResponseError, which does not carry
// the answer's text, and adds compaction.ErrNotFound to a missing-key error (keeping the
// original, so callers can test for both).
func mapErr(err error) error {
	var resp minio.ErrorResponse
	var clean *ResponseError
	if err == nil || errors.As(err, &clean) || !errors.As(err, &resp) {
		return err
	}
	clean = &ResponseError{StatusCode: resp.StatusCode, Code: resp.Code}
	if !s3Code.MatchString(clean.Code) {
		clean.Code = "" // minio-go puts the status line there for a body that is not S3 XML
	}
	resp.Message, resp.Key, resp.Resource, resp.Server = "", "", "", ""
	clean.resp = resp
	if resp.Code == minio.NoSuchKey {
		return fmt.Errorf("%w: %w", compaction.ErrNotFound, clean)
	}
	return clean
}

// s3Code is what an S3 error code looks like (AccessDenied, NoSuchBucket, XMinioAdminNoSuchUser).
var s3Code = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9.]{0,63}$`)

// ResponseError is an error answer of the S3 endpoint, without the text of its body: the
// endpoint is whatever a policy names, and these errors reach conditions, events, records
// and API answers. A body could be anything that endpoint, or an internal service a policy
// points at, returns; only the status and a well-formed S3 error code are kept. errors.As
// still finds the minio.ErrorResponse (with its Code and StatusCode; its Message cleared).
type ResponseError struct {
	StatusCode int
	// Code is the S3 error code, or empty when the answer carried none.
	Code string
	resp minio.ErrorResponse
}

func (e *ResponseError) Error() string {
	code := e.Code
	if code == "" {
		code = "error"
	}
	return fmt.Sprintf("S3 %s (HTTP %d %s)", code, e.StatusCode, http.StatusText(e.StatusCode))
}

// Unwrap returns the minio.ErrorResponse, Message cleared.
func (e *ResponseError) Unwrap() error { return e.resp }

// Is reports whether the answer's S3 error code means target (ErrAccessDenied,
// ErrBucketNotFound).
func (e *ResponseError) Is(target error) bool {
	switch target {
	case ErrAccessDenied:
		switch e.Code {
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
			return true
		}
	case ErrBucketNotFound:
		return e.Code == minio.NoSuchBucket
	}
	return false
}

func validate(op, sessionID string) error {
	if err := compaction.ValidateSessionID(sessionID); err != nil {
		return fmt.Errorf("%s: %s: %w", backend, op, err)
	}
	return nil
}

// backend starts this store's errors.
const backend = "s3 store"

// lineWriter forwards segments to w and remembers the last byte of each, so a segment
// without a trailing newline can be terminated before the next one starts.
type lineWriter struct {
	w            io.Writer
	segmentBytes int64
	last         byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.segmentBytes += int64(n)
		l.last = p[n-1]
	}
	return n, err
}

func (l *lineWriter) endSegment() error {
	defer func() { l.segmentBytes = 0 }()
	if l.segmentBytes > 0 && l.last != '\n' {
		if _, err := l.w.Write([]byte{'\n'}); err != nil {
			return err
		}
	}
	return nil
}
