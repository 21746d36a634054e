package compactclient

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// An agent's client keeps its connection: each new one costs the server a TLS handshake.
// The answer is chunked and ends with the encoder's newline, as the compaction API writes
// it, so the JSON decoder stops before the body's end.
func TestReusesConnection(t *testing.T) {
	var conns atomic.Int32
	big := strings.Repeat("x", 16<<10)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"messages":[{"role":"user","content":"` + big + `"}]}`))
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte("\n"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c, err := New(srv.URL, WithToken("t"), WithCAPool(pool))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		resp, err := c.Compact(context.Background(), "ns", "s", CompactRequest{})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if len(resp.Messages) != 1 || len(resp.Messages[0].Content) != len(big) {
			t.Fatalf("request %d: got %d messages", i, len(resp.Messages))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 sequential requests opened %d connections, want 1", n)
	}
}
