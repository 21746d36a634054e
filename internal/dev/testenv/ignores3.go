package testenv

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7/pkg/signer"
)

// IgnoringS3 stands in for an S3-compatible store that ignores If-None-Match: it forwards
// every request to MinIO, and one carrying If-None-Match without that header. minio-go signs
// If-None-Match (SigV4 signs every header but Authorization, User-Agent and Accept-Encoding),
// so dropping it alone would make MinIO refuse the signature: the proxy signs such a request
// again with MinIO's key. Over plain HTTP minio-go sends a PUT's body aws-chunked, each chunk
// signed in a chain seeded by the header's signature, so the proxy decodes the body and sends
// it whole, signed by its SHA-256.
type IgnoringS3 struct {
	srv                  *httptest.Server
	rp                   *httputil.ReverseProxy
	target               *url.URL
	accessKey, secretKey string
	// Stripped counts the requests sent on without If-None-Match, Passed the others.
	Stripped, Passed atomic.Int64
}

// StartIgnoringS3 starts an IgnoringS3 in front of m and stops it when the test ends.
func StartIgnoringS3(t testing.TB, m *MinIO) *IgnoringS3 {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: m.Endpoint}
	p := &IgnoringS3{rp: httputil.NewSingleHostReverseProxy(target), target: target, accessKey: m.AccessKey, secretKey: m.SecretKey}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// Endpoint is its host:port.
func (p *IgnoringS3) Endpoint() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *IgnoringS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("If-None-Match") == "" {
		p.Passed.Add(1)
		p.rp.ServeHTTP(w, r) // keeps the Host header, which the client signed
		return
	}
	out, err := p.unconditional(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.Stripped.Add(1)
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
func (p *IgnoringS3) unconditional(r *http.Request) (*http.Request, error) {
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
