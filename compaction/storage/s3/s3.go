// Package s3 is a compaction.Store on any S3-compatible object store (AWS S3, MinIO, Ceph
// RGW, SeaweedFS, R2), using minio-go. Keys, under an optional prefix, follow the layout of
// the compaction package:
//
//	tool_results/{sessionID}/{SafeKey(toolCallID)}.txt
//	compaction_records/{sessionID}/{recordID}.jsonl   (one object per record)
//	state/{sessionID}.json
//
// A conversation of a session (compaction.ConversationSessionID) has the session ID
// "{sessionID}/conversations/{id}", so its keys are one level under the session's:
// tool_results/{sessionID}/conversations/{id}/..., compaction_records/{sessionID}/conversations/{id}/...
// and state/conversations/{sessionID}/{id}.json. DeleteSession of the session removes them.
//
// S3 has no append, and rewriting a growing object loses records when two replicas race, so
// every record is its own segment object. Record IDs are time-sortable and S3 lists keys in
// order, so listing the session's segment prefix yields the trail oldest first.
package s3

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/harness9/compaction-operator/compaction"
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
)

// Option changes how New builds a store.
type Option func(*options)

type options struct{ transport http.RoundTripper }

// WithTransport makes the store send its requests with t (for example one whose dialer
// checks the addresses it connects to), instead of minio-go's default transport.
func WithTransport(t http.RoundTripper) Option {
	return func(o *options) { o.transport = t }
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
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     !cfg.Insecure,
		Region:     cfg.Region,
		Transport:  transport,
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

func (s *Store) key(rel string) string { return s.prefix + rel }

func (s *Store) ref(key string) string { return "s3://" + s.bucket + "/" + key }

// PutToolResult stores content and returns its s3:// URL.
func (s *Store) PutToolResult(ctx context.Context, sessionID, toolCallID string, content []byte) (string, error) {
	if err := validate("put tool result", sessionID); err != nil {
		return "", err
	}
	key := s.key(compaction.ToolResultKey(sessionID, toolCallID))
	// Create-only (If-None-Match: *): a reused tool call ID must not replace an original that
	// only this object holds. The same bytes again (a retry, another replica) are a success.
	opts := minio.PutObjectOptions{ContentType: "text/plain; charset=utf-8"}
	opts.SetMatchETagExcept("*")
	if _, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(content), int64(len(content)), opts); err != nil {
		var resp minio.ErrorResponse
		if !errors.As(err, &resp) || resp.Code != "PreconditionFailed" {
			return "", fmt.Errorf("s3 store: put tool result %q of session %s: put %s: %w", toolCallID, sessionID, s.ref(key), mapErr(err))
		}
		stored, gerr := s.get(ctx, key)
		if gerr != nil {
			return "", fmt.Errorf("s3 store: put tool result %q of session %s: exists, and reading it back failed: %w", toolCallID, sessionID, mapErr(gerr))
		}
		if !bytes.Equal(stored, content) {
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
	data, err := s.get(ctx, s.key(compaction.ToolResultKey(sessionID, toolCallID)))
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
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("s3 store: open tool result %q of session %s: %w", toolCallID, sessionID, mapErr(err))
	}
	// GetObject is lazy: Stat sends the request, so a missing key surfaces here, and the
	// reads that follow continue the same response.
	info, err := obj.Stat()
	if err != nil {
		_ = obj.Close() // read stream: see copyObject
		return nil, 0, fmt.Errorf("s3 store: open tool result %q of session %s: %w", toolCallID, sessionID, mapErr(err))
	}
	return obj, info.Size, nil
}

// AppendRecord writes the record as a new one-line segment named after its ID. Nothing is
// ever read back or rewritten, so concurrent writers (any number of replicas) cannot lose
// each other's records.
func (s *Store) AppendRecord(ctx context.Context, rec *compaction.CompactionRecord) error {
	if rec == nil {
		return errors.New("s3 store: append record: nil record")
	}
	if err := validate("append record", rec.SessionID); err != nil {
		return err
	}
	if rec.ID == "" {
		return fmt.Errorf("s3 store: append record to session %s: record has no ID", rec.SessionID)
	}
	line, err := rec.JSONLine()
	if err != nil {
		return fmt.Errorf("s3 store: encode record %s: %w", rec.ID, err)
	}
	key := s.key(compaction.RecordSegmentKey(rec.SessionID, rec.ID))
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
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return fmt.Errorf("get %s: %w", s.ref(key), mapErr(err))
	}
	// Closing a read stream only releases its connection: it cannot lose data, and the
	// copy's result is already known by then.
	defer func() { _ = obj.Close() }()
	if _, err := io.Copy(lw, obj); err != nil {
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

// LoadState reads the session's state; a missing one is ErrNotFound.
func (s *Store) LoadState(ctx context.Context, sessionID string) (*compaction.State, error) {
	if err := validate("load state", sessionID); err != nil {
		return nil, err
	}
	key := s.key(compaction.StateKey(sessionID))
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("s3 store: load state of session %s: %w", sessionID, mapErr(err))
	}
	defer func() { _ = obj.Close() }() // read stream: see copyObject
	data, err := io.ReadAll(obj)
	if err != nil {
		return nil, fmt.Errorf("s3 store: load state of session %s: %w", sessionID, mapErr(err))
	}
	info, err := obj.Stat()
	if err != nil {
		return nil, fmt.Errorf("s3 store: load state of session %s: %w", sessionID, mapErr(err))
	}
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
	// Core's GetObject sends the request now and returns the answer's status as an error.
	body, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		var resp minio.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusNotModified {
			return nil, nil
		}
		return nil, fmt.Errorf("s3 store: load state of session %s: %w", sessionID, mapErr(err))
	}
	defer func() { _ = body.Close() }() // read stream: see copyObject
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("s3 store: load state of session %s: %w", sessionID, mapErr(err))
	}
	var st compaction.State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("s3 store: decode state %s: %w", s.ref(key), err)
	}
	st.Version = info.ETag
	return &st, nil
}

// SaveState replaces the session's state if it is still the version st was loaded from
// (else ErrConflict). A PUT replaces an object atomically, so readers see the old or the new
// state, never a mix.
func (s *Store) SaveState(ctx context.Context, sessionID string, st *compaction.State) error {
	if st == nil {
		return fmt.Errorf("s3 store: save state of session %q: nil state", sessionID)
	}
	if err := validate("save state", sessionID); err != nil {
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("s3 store: encode state of session %s: %w", sessionID, err)
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
	key := s.key(compaction.StateKey(sessionID))
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

// DeleteSession removes every object of the session, its conversations' included, with
// batched multi-object deletes and returns how many it removed. It lists only under the
// session's prefixes, which end in '/' (the conversations' objects are under them), plus the
// exact state key, so a session whose ID extends this one is never touched.
// Per-object failures are all reported, joined.
func (s *Store) DeleteSession(ctx context.Context, sessionID string) (int, error) {
	if err := validate("delete session", sessionID); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The feeder lists and hands keys to the batch delete as it goes, so a huge session is
	// never held in memory; RemoveObjectsWithResult groups them into requests of 1000.
	objects := make(chan minio.ObjectInfo)
	feedDone := make(chan error, 1)
	go func() {
		defer close(objects)
		feedDone <- s.feedSessionObjects(ctx, sessionID, objects)
	}()

	removed := 0
	var errs []error
	for res := range s.client.RemoveObjectsWithResult(ctx, s.bucket, objects, minio.RemoveObjectsOptions{}) {
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", s.ref(res.ObjectName), mapErr(res.Err)))
			continue
		}
		removed++
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: recursive})
	var err error
	for obj := range ch {
		if err != nil {
			continue // draining after a failure
		}
		if obj.Err != nil {
			err = fmt.Errorf("list s3://%s/%s: %w", s.bucket, prefix, mapErr(obj.Err))
		} else {
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

// put writes one object whole.
func (s *Store) put(ctx context.Context, key string, data []byte, contentType string) error {
	_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: contentType})
	if err != nil {
		return fmt.Errorf("put %s: %w", s.ref(key), mapErr(err))
	}
	return nil
}

// get reads one object whole; a missing key is ErrNotFound. Callers use it only for objects
// whose size is bounded by design (one tool result, one state).
func (s *Store) get(ctx context.Context, key string) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", s.ref(key), mapErr(err))
	}
	defer func() { _ = obj.Close() }() // read stream: see copyObject
	// GetObject is lazy: the request, and so a missing key, surfaces on the first read.
	data, err := io.ReadAll(obj)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", s.ref(key), mapErr(err))
	}
	return data, nil
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
		return fmt.Errorf("s3 store: %s: %w", op, err)
	}
	return nil
}

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
