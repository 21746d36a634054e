package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// Issue 28, item 6: a store whose backend ignores If-None-Match overwrites silently, so the
// operator probes for it once per policy.

// TestProbeConditionalWrites: on MinIO, which honours If-None-Match, the probe passes; behind
// a proxy that drops the header (a backend that ignores it), it reports
// ErrConditionalWritesIgnored, and that backend does replace an offloaded tool result under a
// reused ID, which is what the probe warns about. Neither probe leaves an object behind.
func TestProbeConditionalWrites(t *testing.T) {
	srv := startServer(t)
	for _, prefix := range []string{"", "clusters/prod"} {
		t.Run(fmt.Sprintf("prefix=%q", prefix), func(t *testing.T) {
			bucket := srv.newBucket(t)
			if err := srv.store(t, bucket, prefix).ProbeConditionalWrites(ctx(t)); err != nil {
				t.Fatalf("MinIO: %v, want nil", err)
			}
			if keys := srv.keys(t, bucket); len(keys) != 0 {
				t.Errorf("the probe left %q", keys)
			}

			proxy := testenv.StartIgnoringS3(t, srv.m)
			cfg := srv.config(bucket, prefix)
			cfg.Endpoint = proxy.Endpoint()
			st, err := New(ctx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = st.ProbeConditionalWrites(ctx(t))
			if !errors.Is(err, ErrConditionalWritesIgnored) {
				t.Fatalf("a backend ignoring If-None-Match: %v, want ErrConditionalWritesIgnored", err)
			}
			if !strings.Contains(err.Error(), proxy.Endpoint()) {
				t.Errorf("the error does not name the endpoint: %v", err)
			}
			if n := proxy.Stripped.Load(); n != 2 {
				t.Errorf("the proxy dropped If-None-Match from %d requests, want the probe's 2 writes", n)
			}
			if keys := srv.keys(t, bucket); len(keys) != 0 {
				t.Errorf("the probe left %q", keys)
			}

			// The hazard: there a reused tool-call ID replaces the original without an error.
			if _, err := st.PutToolResult(ctx(t), "s1", "call_0", "first result"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.PutToolResult(ctx(t), "s1", "call_0", "other result"); err != nil {
				t.Fatalf("second put through the proxy: %v (the proxy does not model an ignoring backend)", err)
			}
			if got, err := srv.store(t, bucket, prefix).GetToolResult(ctx(t), "s1", "call_0"); err != nil || string(got) != "other result" {
				t.Errorf("stored %q, %v; want the original replaced", got, err)
			}
			// Straight to MinIO the same write is refused: the proxy is what differs.
			_, err = srv.store(t, bucket, prefix).PutToolResult(ctx(t), "s1", "call_0", "third result")
			if !errors.Is(err, compaction.ErrToolResultExists) {
				t.Errorf("on MinIO: %v, want ErrToolResultExists", err)
			}
		})
	}
}

// TestProbeConditionalWritesFailures: a probe that cannot tell says so with another error, and
// deletes what it may have written.
func TestProbeConditionalWritesFailures(t *testing.T) {
	var (
		mu      sync.Mutex
		methods []string
		status  = http.StatusForbidden
	)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		methods = append(methods, r.Method)
		st := status
		if r.Method == http.MethodDelete {
			st = http.StatusNoContent
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(st)
		if st == http.StatusForbidden {
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>no</Message></Error>`)
		}
	}))
	t.Cleanup(fake.Close)
	st, err := New(context.Background(), Config{
		Endpoint: strings.TrimPrefix(fake.URL, "http://"), Bucket: "bucket", Region: "us-east-1",
		Insecure: true, AccessKey: "k", SecretKey: "s", MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := methods
		methods = nil
		return out
	}

	// Writes refused: not "ignored", and nothing to delete.
	err = st.ProbeConditionalWrites(context.Background())
	if err == nil || errors.Is(err, ErrConditionalWritesIgnored) || !errors.Is(err, ErrAccessDenied) {
		t.Errorf("writes refused: %v, want an AccessDenied error that is not ErrConditionalWritesIgnored", err)
	}
	if got := take(); strings.Join(got, " ") != "PUT" {
		t.Errorf("writes refused: requests %q, want one PUT and no DELETE", got)
	}

	// A context that ends during the probe: the probe object is still deleted.
	mu.Lock()
	status = http.StatusOK
	mu.Unlock()
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := st.ProbeConditionalWrites(cctx); err == nil || errors.Is(err, ErrConditionalWritesIgnored) {
		t.Errorf("ended context: %v, want the context's error", err)
	}
	if got := take(); len(got) == 0 || got[len(got)-1] != http.MethodDelete {
		t.Errorf("ended context: requests %q, want a DELETE of the probe object", got)
	}
}
