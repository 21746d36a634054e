package s3

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/harness9/compaction-operator/compaction"
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

			proxy := startIgnoringProxy(t, srv)
			cfg := srv.config(bucket, prefix)
			cfg.Endpoint = proxy.endpoint()
			st, err := New(ctx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = st.ProbeConditionalWrites(ctx(t))
			if !errors.Is(err, ErrConditionalWritesIgnored) {
				t.Fatalf("a backend ignoring If-None-Match: %v, want ErrConditionalWritesIgnored", err)
			}
			if !strings.Contains(err.Error(), proxy.endpoint()) {
				t.Errorf("the error does not name the endpoint: %v", err)
			}
			if n := proxy.stripped.Load(); n != 2 {
				t.Errorf("the proxy dropped If-None-Match from %d requests, want the probe's 2 writes", n)
			}
			if keys := srv.keys(t, bucket); len(keys) != 0 {
				t.Errorf("the probe left %q", keys)
			}

			// The hazard: there a reused tool-call ID replaces the original without an error.
			if _, err := st.PutToolResult(ctx(t), "s1", "call_0", []byte("first result")); err != nil {
				t.Fatal(err)
			}
			if _, err := st.PutToolResult(ctx(t), "s1", "call_0", []byte("other result")); err != nil {
				t.Fatalf("second put through the proxy: %v (the proxy does not model an ignoring backend)", err)
			}
			if got, err := srv.store(t, bucket, prefix).GetToolResult(ctx(t), "s1", "call_0"); err != nil || string(got) != "other result" {
				t.Errorf("stored %q, %v; want the original replaced", got, err)
			}
			// Straight to MinIO the same write is refused: the proxy is what differs.
			_, err = srv.store(t, bucket, prefix).PutToolResult(ctx(t), "s1", "call_0", []byte("third result"))
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

// ignoringProxy stands in for an S3-compatible store that ignores If-None-Match: it forwards
// every request to MinIO, and one carrying If-None-Match without that header. minio-go signs
// If-None-Match (SigV4 signs every header but Authorization, User-Agent and Accept-Encoding),
// so dropping it alone would make MinIO refuse the signature: the proxy signs such a request
// again with MinIO's key. Over plain HTTP minio-go sends a PUT's body aws-chunked, each chunk
// signed in a chain seeded by the header's signature, so the proxy decodes the body and sends
// it whole, signed by its SHA-256.
type ignoringProxy struct {
	srv                  *httptest.Server
	rp                   *httputil.ReverseProxy
	target               *url.URL
	accessKey, secretKey string
	stripped             atomic.Int64
}

func startIgnoringProxy(t *testing.T, srv *server) *ignoringProxy {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: srv.m.Endpoint}
	p := &ignoringProxy{rp: httputil.NewSingleHostReverseProxy(target), target: target,
		accessKey: srv.m.AccessKey, secretKey: srv.m.SecretKey}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *ignoringProxy) endpoint() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *ignoringProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("If-None-Match") == "" {
		p.rp.ServeHTTP(w, r) // keeps the Host header, which the client signed
		return
	}
	out, err := p.unconditional(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.stripped.Add(1)
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// unconditional is r to MinIO without If-None-Match, its body decoded and signed again.
func (p *ignoringProxy) unconditional(r *http.Request) (*http.Request, error) {
	var body []byte
	var err error
	if strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-") {
		body, err = decodeAWSChunked(r.Body)
	} else {
		body, err = io.ReadAll(r.Body)
	}
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	// The region is the one the client signed for: Credential=key/date/region/s3/aws4_request.
	_, cred, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	scope := strings.Split(strings.SplitN(cred, ",", 2)[0], "/")
	if len(scope) < 3 {
		return nil, fmt.Errorf("no credential scope in %q", r.Header.Get("Authorization"))
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target.String()+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.Host = r.Host
	for k, v := range r.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Authorization", "If-None-Match", "Content-Length", "Content-Encoding", "X-Amz-Decoded-Content-Length", "X-Amz-Date", "X-Amz-Content-Sha256":
		default:
			out.Header[k] = v
		}
	}
	sum := sha256.Sum256(body)
	out.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	return signer.SignV4(*out, p.accessKey, p.secretKey, "", scope[2]), nil
}

// decodeAWSChunked reads an aws-chunked body ({hex size};chunk-signature=...\r\n{data}\r\n,
// ending with a chunk of size 0) and returns its data.
func decodeAWSChunked(r io.Reader) ([]byte, error) {
	br := bufio.NewReader(r)
	var out bytes.Buffer
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("chunk header %q: %w", line, err)
		}
		if n == 0 {
			return out.Bytes(), nil
		}
		if _, err := io.CopyN(&out, br, n); err != nil {
			return nil, err
		}
		if _, err := br.Discard(2); err != nil { // the chunk's \r\n
			return nil, err
		}
	}
}
