package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/storetest"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// server is one MinIO for a test plus a raw client to set up and inspect buckets.
type server struct {
	m   *testenv.MinIO
	raw *minio.Client
}

func startServer(t *testing.T) *server {
	t.Helper()
	m := testenv.StartMinIO(t)
	raw, err := minio.New(m.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""),
		Secure: false,
	})
	if err != nil {
		t.Fatalf("raw client: %v", err)
	}
	return &server{m: m, raw: raw}
}

func (s *server) config(bucket, prefix string) Config {
	return Config{
		Endpoint:  s.m.Endpoint,
		Bucket:    bucket,
		Prefix:    prefix,
		Insecure:  true,
		AccessKey: s.m.AccessKey,
		SecretKey: s.m.SecretKey,
	}
}

// newBucket creates a uniquely named empty bucket.
func (s *server) newBucket(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "test-" + hex.EncodeToString(b[:])
	if err := s.raw.MakeBucket(ctx(t), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
	return name
}

func (s *server) store(t *testing.T, bucket, prefix string) *Store {
	t.Helper()
	st, err := New(ctx(t), s.config(bucket, prefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return st
}

// keys lists every key in the bucket, in order.
func (s *server) keys(t *testing.T, bucket string) []string {
	t.Helper()
	var out []string
	for obj := range s.raw.ListObjects(ctx(t), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatalf("list %s: %v", bucket, obj.Err)
		}
		out = append(out, obj.Key)
	}
	return out
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestConformance(t *testing.T) {
	srv := startServer(t)
	for _, prefix := range []string{"", "clusters/prod"} {
		t.Run(fmt.Sprintf("prefix=%q", prefix), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) compaction.Store {
				return srv.store(t, srv.newBucket(t), prefix)
			})
		})
	}
}

func TestInvalidSessionIDsWriteNothing(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	storetest.WriteInvalid(t, srv.store(t, bucket, "p"))
	if keys := srv.keys(t, bucket); len(keys) != 0 {
		t.Fatalf("invalid session IDs wrote %v", keys)
	}
}

func TestNormalizePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"":         "",
		"/":        "",
		"a":        "a/",
		"a/":       "a/",
		"/a":       "a/",
		"//a/b///": "a/b/",
		"a.b/c-d":  "a.b/c-d/",
	} {
		got, err := normalizePrefix(in)
		if err != nil || got != want {
			t.Errorf("normalizePrefix(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"a//b", "a/../b", "./a", ".."} {
		if got, err := normalizePrefix(bad); err == nil {
			t.Errorf("normalizePrefix(%q) = %q, want an error", bad, got)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{Endpoint: "127.0.0.1:9000", Bucket: "bucket", Insecure: true}
	for name, mutate := range map[string]func(*Config){
		"empty endpoint":     func(c *Config) { c.Endpoint = "" },
		"endpoint w/ scheme": func(c *Config) { c.Endpoint = "http://127.0.0.1:9000" },
		"empty bucket":       func(c *Config) { c.Bucket = "" },
		"short bucket":       func(c *Config) { c.Bucket = "b" },
		"bad bucket":         func(c *Config) { c.Bucket = "bad..bucket" },
		"bad prefix":         func(c *Config) { c.Prefix = "a/../b" },
	} {
		cfg := good
		mutate(&cfg)
		if _, err := New(context.Background(), cfg); err == nil {
			t.Errorf("%s: New(%+v) succeeded", name, cfg)
		}
	}
	if _, err := New(context.Background(), good); err != nil {
		t.Fatalf("New(%+v): %v", good, err)
	}
}

func TestPingAndEnsureBucket(t *testing.T) {
	srv := startServer(t)
	c := ctx(t)
	st := srv.store(t, "not-yet-there", "")
	if err := st.Ping(c); !errors.Is(err, ErrBucketNotFound) {
		t.Fatalf("Ping on a missing bucket: err = %v, want ErrBucketNotFound", err)
	}
	if err := st.EnsureBucket(c, false); !errors.Is(err, ErrBucketNotFound) {
		t.Fatalf("EnsureBucket(create=false) on a missing bucket: err = %v, want ErrBucketNotFound", err)
	}
	if err := st.EnsureBucket(c, true); err != nil {
		t.Fatalf("EnsureBucket(create=true): %v", err)
	}
	if err := st.EnsureBucket(c, true); err != nil {
		t.Fatalf("EnsureBucket(create=true) on an existing bucket: %v", err)
	}
	if err := st.EnsureBucket(c, false); err != nil {
		t.Fatalf("EnsureBucket(create=false) on an existing bucket: %v", err)
	}
	if err := st.Ping(c); err != nil {
		t.Fatalf("Ping: %v", err)
	}

	cfg := srv.config("not-yet-there", "")
	cfg.SecretKey = "wrong-secret-key"
	bad, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Ping(c); err == nil || errors.Is(err, ErrBucketNotFound) {
		t.Fatalf("Ping with a wrong secret: err = %v, want a credentials error", err)
	}
}

func TestRefAndKeys(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	st := srv.store(t, bucket, "/tenant-a/")
	c := ctx(t)
	sid := storetest.SessionID(t)
	ref, err := st.PutToolResult(c, sid, "call/1", "out")
	if err != nil {
		t.Fatal(err)
	}
	key := "tenant-a/" + compaction.ToolResultKey(sid, "call/1")
	if want := "s3://" + bucket + "/" + key; ref != want {
		t.Fatalf("ref = %q, want %q", ref, want)
	}
	rec := storetest.NewRecord(t, sid, time.Now().UTC(), 1)
	if err := st.AppendRecord(c, rec); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveState(c, sid, &compaction.State{LastSummary: "s"}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"tenant-a/" + compaction.RecordSegmentKey(sid, rec.ID),
		"tenant-a/" + compaction.StateKey(sid),
		key,
	}
	if got := srv.keys(t, bucket); !slices.Equal(got, want) {
		t.Fatalf("keys = %q, want %q", got, want)
	}
}

// TestOpenToolResult: a tool result opened for streaming reads back byte for byte with its
// size; a missing one, or one of another session, is ErrNotFound at open.
func TestOpenToolResult(t *testing.T) {
	srv := startServer(t)
	st := srv.store(t, srv.newBucket(t), "p")
	c := ctx(t)
	sid := storetest.SessionID(t)
	content := bytes.Repeat([]byte("a line of a long build log\n"), 100_000) // 2.7 MB
	if _, err := st.PutToolResult(c, sid, "call/1", string(content)); err != nil {
		t.Fatal(err)
	}
	rc, size, err := st.OpenToolResult(c, sid, "call/1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if size != int64(len(content)) || !bytes.Equal(got, content) {
		t.Fatalf("read %d bytes, size %d; want the %d bytes stored", len(got), size, len(content))
	}
	for _, c2 := range []struct{ sid, id string }{{sid, "call/2"}, {storetest.SessionID(t), "call/1"}} {
		if rc, _, err := st.OpenToolResult(c, c2.sid, c2.id); !errors.Is(err, compaction.ErrNotFound) {
			if rc != nil {
				_ = rc.Close()
			}
			t.Errorf("open %s of session %s: %v, want ErrNotFound", c2.id, c2.sid, err)
		}
	}
	if _, _, err := st.OpenToolResult(c, "../x", "call/1"); err == nil {
		t.Error("open with an invalid session ID: no error")
	}
}

// Two stores with different prefixes on one bucket are separate worlds.
func TestPrefixesIsolate(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	c := ctx(t)
	stores := map[string]*Store{
		"a":    srv.store(t, bucket, "tenant-a"),
		"a2":   srv.store(t, bucket, "tenant-a2"), // "tenant-a" is a string prefix of it
		"none": srv.store(t, bucket, ""),
	}
	sid := "same-session"
	now := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	for name, st := range stores {
		if _, err := st.PutToolResult(c, sid, "call_1", "from "+name); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			rec := storetest.NewRecord(t, sid, now.Add(time.Duration(i)*time.Second), i)
			rec.SummaryText = "from " + name
			if err := st.AppendRecord(c, rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.SaveState(c, sid, &compaction.State{LastSummary: "from " + name}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, st *Store) {
		t.Helper()
		got, err := st.GetToolResult(c, sid, "call_1")
		if err != nil || string(got) != "from "+name {
			t.Errorf("%s: GetToolResult = %q, %v", name, got, err)
		}
		recs := storetest.ReadRecords(t, st, sid)
		if len(recs) != 2 {
			t.Errorf("%s: %d records, want 2", name, len(recs))
		}
		for _, r := range recs {
			if r.SummaryText != "from "+name {
				t.Errorf("%s: sees a record %q", name, r.SummaryText)
			}
		}
		state, err := st.LoadState(c, sid)
		if err != nil || state.LastSummary != "from "+name {
			t.Errorf("%s: LoadState = %+v, %v", name, state, err)
		}
	}
	for name, st := range stores {
		check(name, st)
	}

	// The unprefixed store's session prefixes do not reach into "tenant-a/...", and
	// "tenant-a" does not reach into "tenant-a2/...".
	for _, name := range []string{"none", "a"} {
		n, err := stores[name].DeleteSession(c, sid)
		if err != nil || n != 4 {
			t.Fatalf("%s: DeleteSession = %d, %v; want 4, nil", name, n, err)
		}
	}
	check("a2", stores["a2"])
	keys := srv.keys(t, bucket)
	if len(keys) != 4 {
		t.Fatalf("after deleting two of three, keys = %q", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "tenant-a2/") {
			t.Errorf("unexpected survivor %q", k)
		}
	}
}

// recordingTransport remembers the method and query of every request.
type recordingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	reqs []string
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Method+" "+req.URL.Path+"?"+req.URL.RawQuery)
	r.mu.Unlock()
	return r.base.RoundTrip(req)
}

func (r *recordingTransport) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

func TestDeleteSessionUsesBatchDelete(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	base, err := minio.DefaultTransport(false)
	if err != nil {
		t.Fatal(err)
	}
	rt := &recordingTransport{base: base}
	st, err := newStore(ctx(t), srv.config(bucket, "p"), rt)
	if err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	now := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	for _, sid := range []string{"victim", "victim2", "victim.json"} {
		for i := range 3 {
			if _, err := st.PutToolResult(c, sid, fmt.Sprintf("call_%d", i), sid); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			if err := st.AppendRecord(c, storetest.NewRecord(t, sid, now.Add(time.Duration(i)*time.Second), i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.SaveState(c, sid, &compaction.State{LastSummary: sid}); err != nil {
			t.Fatal(err)
		}
	}
	before := len(srv.keys(t, bucket))
	rt.take()

	n, err := st.DeleteSession(c, "victim")
	if err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if n != 9 {
		t.Fatalf("DeleteSession removed %d, want 9 (3 results, 5 segments, 1 state)", n)
	}
	batches := 0
	for _, r := range rt.take() {
		if strings.HasPrefix(r, http.MethodDelete+" ") {
			t.Errorf("single-object delete %q: want only batch deletes", r)
		}
		if strings.HasPrefix(r, http.MethodPost+" ") && strings.Contains(r, "delete") {
			batches++
		}
	}
	if batches != 1 {
		t.Errorf("%d batch delete requests, want 1", batches)
	}
	keys := srv.keys(t, bucket)
	if len(keys) != before-9 {
		t.Fatalf("%d keys left, want %d", len(keys), before-9)
	}
	for _, k := range keys {
		if strings.Contains(k, "/victim/") || strings.HasSuffix(k, "/victim.json") {
			t.Errorf("key %q of the deleted session survived", k)
		}
	}
	for _, sid := range []string{"victim2", "victim.json"} {
		if got := storetest.ReadRecords(t, st, sid); len(got) != 5 {
			t.Errorf("%s has %d records, want 5", sid, len(got))
		}
		if _, err := st.LoadState(c, sid); err != nil {
			t.Errorf("%s lost its state: %v", sid, err)
		}
	}
}

func TestFiftySegmentsInOrder(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	st := srv.store(t, bucket, "")
	c := ctx(t)
	sid := storetest.SessionID(t)
	// Spacing crosses several powers of ten in nanoseconds, which the zero-padded IDs must
	// still sort correctly.
	base := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	const n = 50
	ids := make([]string, 0, n)
	for i := range n {
		ts := base.Add(time.Duration(i*i*i) * time.Millisecond)
		rec := storetest.NewRecord(t, sid, ts, i)
		if err := st.AppendRecord(c, rec); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	keys := srv.keys(t, bucket)
	if len(keys) != 50 {
		t.Fatalf("%d segment objects, want 50", len(keys))
	}
	got := storetest.ReadRecords(t, st, sid)
	if len(got) != 50 {
		t.Fatalf("ReadRecords returned %d records, want 50", len(got))
	}
	for i, r := range got {
		if r.ID != ids[i] || r.Summarized != i {
			t.Fatalf("record %d is %s (seq %d), want %s", i, r.ID, r.Summarized, ids[i])
		}
	}
}

// A segment written by another tool without a trailing newline still yields valid JSONL.
func TestReadRecordsTerminatesForeignSegments(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	st := srv.store(t, bucket, "")
	c := ctx(t)
	sid := "sess"
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := storetest.NewRecord(t, sid, now, 0)
	if err := st.AppendRecord(c, first); err != nil {
		t.Fatal(err)
	}
	foreign := storetest.NewRecord(t, sid, now.Add(time.Second), 1)
	line, err := foreign.JSONLine()
	if err != nil {
		t.Fatal(err)
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	key := compaction.RecordSegmentKey(sid, foreign.ID)
	if _, err := srv.raw.PutObject(c, bucket, key, bytes.NewReader(line), int64(len(line)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendRecord(c, storetest.NewRecord(t, sid, now.Add(2*time.Second), 2)); err != nil {
		t.Fatal(err)
	}
	if got := storetest.ReadRecords(t, st, sid); len(got) != 3 || got[1].ID != foreign.ID {
		t.Fatalf("got %d records", len(got))
	}
}

// ReadRecords stops at the first failing write and reports it.
func TestReadRecordsWriterError(t *testing.T) {
	srv := startServer(t)
	st := srv.store(t, srv.newBucket(t), "")
	c := ctx(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		if err := st.AppendRecord(c, storetest.NewRecord(t, "s", now.Add(time.Duration(i)*time.Second), i)); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("disk full")
	if err := st.ReadRecords(c, "s", failingWriter{boom}); !errors.Is(err, boom) {
		t.Fatalf("ReadRecords into a failing writer: err = %v, want %v", err, boom)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

// With the server down every method fails within its deadline (no hang, and never
// ErrNotFound, which would make a caller think the data is gone); after a restart on the
// same port and data directory the store works again and the data is still there.
func TestServerOutage(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	st := srv.store(t, bucket, "p")
	c := ctx(t)
	sid := storetest.SessionID(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := st.PutToolResult(c, sid, "call_1", "kept"); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendRecord(c, storetest.NewRecord(t, sid, now, 0)); err != nil {
		t.Fatal(err)
	}

	lost := storetest.NewRecord(t, sid, now.Add(time.Second), 1) // built here: t.Fatalf needs the test goroutine

	srv.m.Stop()
	const timeout = 1500 * time.Millisecond
	calls := map[string]func(context.Context) error{
		"Ping": st.Ping,
		"EnsureBucket": func(ctx context.Context) error {
			return st.EnsureBucket(ctx, true)
		},
		"PutToolResult": func(ctx context.Context) error {
			_, err := st.PutToolResult(ctx, sid, "call_2", "x")
			return err
		},
		"GetToolResult": func(ctx context.Context) error {
			_, err := st.GetToolResult(ctx, sid, "call_1")
			return err
		},
		"AppendRecord": func(ctx context.Context) error { return st.AppendRecord(ctx, lost) },
		"ReadRecords":  func(ctx context.Context) error { return st.ReadRecords(ctx, sid, io.Discard) },
		"LoadState": func(ctx context.Context) error {
			_, err := st.LoadState(ctx, sid)
			return err
		},
		"SaveState": func(ctx context.Context) error {
			return st.SaveState(ctx, sid, &compaction.State{LastSummary: "x"})
		},
		"DeleteSession": func(ctx context.Context) error {
			_, err := st.DeleteSession(ctx, sid)
			return err
		},
	}
	// The calls run in parallel (the store is safe for concurrent use) so the test costs one
	// deadline, not one per method.
	type outcome struct {
		err     error
		elapsed time.Duration
	}
	results := make(map[string]outcome, len(calls))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Go(func() {
			callCtx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			err := call(callCtx)
			mu.Lock()
			results[name] = outcome{err: err, elapsed: time.Since(start)}
			mu.Unlock()
		})
	}
	wg.Wait()
	for name, r := range results {
		t.Logf("%s during the outage (%s): %v", name, r.elapsed.Round(time.Millisecond), r.err)
		if r.err == nil {
			t.Errorf("%s succeeded with the server down", name)
		} else if errors.Is(r.err, compaction.ErrNotFound) || errors.Is(r.err, ErrBucketNotFound) {
			t.Errorf("%s with the server down: %v; an outage must not look like missing data", name, r.err)
		}
		if r.elapsed > timeout+5*time.Second {
			t.Errorf("%s took %s with a %s deadline", name, r.elapsed, timeout)
		}
	}

	srv.m.Restart()
	c = ctx(t)
	if err := st.Ping(c); err != nil {
		t.Fatalf("Ping after restart: %v", err)
	}
	got, err := st.GetToolResult(c, sid, "call_1")
	if err != nil || string(got) != "kept" {
		t.Fatalf("GetToolResult after restart = %q, %v", got, err)
	}
	if err := st.AppendRecord(c, storetest.NewRecord(t, sid, now.Add(time.Minute), 2)); err != nil {
		t.Fatalf("AppendRecord after restart: %v", err)
	}
	if recs := storetest.ReadRecords(t, st, sid); len(recs) != 2 {
		t.Fatalf("after restart %d records, want 2", len(recs))
	}
	if n, err := st.DeleteSession(c, sid); err != nil || n != 3 {
		t.Fatalf("DeleteSession after restart = %d, %v; want 3, nil", n, err)
	}
}

// TestConversationKeys: a session's conversations are stored under the session's keys
// (tool_results/{sid}/conversations/{id}/, compaction_records/{sid}/conversations/{id}/,
// state/conversations/{sid}/{id}.json), the session's own trail lists none of their
// records, and DeleteSession of the session leaves no key of the session or of any of its
// conversations, and every key of a session whose ID extends it.
func TestConversationKeys(t *testing.T) {
	srv := startServer(t)
	bucket := srv.newBucket(t)
	st := srv.store(t, bucket, "p")
	c := ctx(t)
	now := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	const victim = "0b8e5a7c-victim"
	populate := func(sid string) {
		t.Helper()
		if _, err := st.PutToolResult(c, sid, "call_1", sid); err != nil {
			t.Fatal(err)
		}
		if err := st.AppendRecord(c, storetest.NewRecord(t, sid, now, 1)); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveState(c, sid, &compaction.State{LastSummary: sid}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sid := range []string{victim, victim + ".json", victim + "2"} {
		for _, conv := range []string{"", "a", "b"} {
			populate(compaction.ConversationSessionID(sid, conv))
		}
	}
	for _, want := range []string{
		"p/tool_results/" + victim + "/conversations/a/call_1.txt",
		"p/state/conversations/" + victim + "/b.json",
		"p/state/conversations/" + victim + ".json/a.json",
		"p/state/" + victim + ".json",
	} {
		if !slices.Contains(srv.keys(t, bucket), want) {
			t.Errorf("no key %s in %q", want, srv.keys(t, bucket))
		}
	}
	if got := storetest.ReadRecords(t, st, victim); len(got) != 1 || got[0].SessionID != victim {
		t.Errorf("the session's own trail: %+v, want its one record", got)
	}
	if got := storetest.ReadRecords(t, st, compaction.ConversationSessionID(victim, "a")); len(got) != 1 || got[0].SessionID != victim+"/conversations/a" {
		t.Errorf("conversation a's trail: %+v, want its one record", got)
	}

	before := len(srv.keys(t, bucket))
	n, err := st.DeleteSession(c, victim)
	if err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if n != 9 {
		t.Errorf("DeleteSession removed %d, want 9 (3 conversations of a result, a record and a state)", n)
	}
	keys := srv.keys(t, bucket)
	if len(keys) != before-9 {
		t.Errorf("%d keys left of %d, want %d", len(keys), before, before-9)
	}
	for _, k := range keys {
		if strings.Contains(k, "/"+victim+"/") || strings.HasSuffix(k, "/"+victim+".json") {
			t.Errorf("key %q of the deleted session survived", k)
		}
	}
	for _, sid := range []string{victim + ".json", victim + "2"} {
		for _, conv := range []string{"", "a", "b"} {
			id := compaction.ConversationSessionID(sid, conv)
			if got, err := st.LoadState(c, id); err != nil || got.LastSummary != id {
				t.Errorf("%s lost its state: %+v, %v", id, got, err)
			}
		}
	}
	for _, sid := range []string{victim + ".json", victim + "2"} {
		for _, conv := range []string{"", "a", "b"} {
			id := compaction.ConversationSessionID(sid, conv)
			if got, err := st.GetToolResult(c, id, "call_1"); err != nil || string(got) != id {
				t.Errorf("%s lost its tool result: %q, %v", id, got, err)
			}
		}
	}
}
