package compactclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync"
)

// rootCAs is the pool an https server is verified with: a fixed pool, or a CA file read
// again when its content changes (a mounted ConfigMap is updated in place on rotation).
type rootCAs struct {
	file string
	pool *x509.CertPool

	mu   sync.Mutex
	data []byte
}

func (r *rootCAs) get() (*x509.CertPool, error) {
	if r.file == "" {
		return r.pool, nil
	}
	data, err := os.ReadFile(r.file)
	if err != nil {
		return nil, fmt.Errorf("compaction client: read CA file: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool != nil && bytes.Equal(data, r.data) {
		return r.pool, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("compaction client: CA file %s holds no PEM certificate", r.file)
	}
	r.pool, r.data = pool, data
	return pool, nil
}

// dialTLS opens a TLS connection verified against the current pool.
func (r *rootCAs) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	pool, err := r.get()
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("compaction client: address %q: %w", addr, err)
	}
	d := &tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}}
	return d.DialContext(ctx, network, addr)
}
