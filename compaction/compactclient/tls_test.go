package compactclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func tlsServer(t *testing.T) (*httptest.Server, []byte) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}\n"))
	}))
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// otherCA is a self-signed CA certificate unrelated to the test server's.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestVerifiesServer(t *testing.T) {
	srv, caPEM := tlsServer(t)
	ctx := context.Background()

	// Without the CA: refused, and the error says how to give it.
	c, err := New(srv.URL, WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Compact(ctx, "ns", "s", CompactRequest{})
	if err == nil || !strings.Contains(err.Error(), "--ca-file") || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("unknown CA: %v, want a verification error naming --ca-file", err)
	}

	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = New(srv.URL, WithToken("t"), WithCAFile(caFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, "ns", "s", CompactRequest{}); err != nil {
		t.Errorf("with the CA file: %v", err)
	}

	// The file is read again when it changes: with another CA in it, new connections fail;
	// with the server's back, they verify again.
	if err := os.WriteFile(caFile, otherCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	c.hc.CloseIdleConnections()
	if _, err := c.Compact(ctx, "ns", "s", CompactRequest{}); err == nil {
		t.Errorf("the server still verifies after its CA left the file")
	}
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, "ns", "s", CompactRequest{}); err != nil {
		t.Errorf("after the CA came back to the file: %v", err)
	}

	if _, err := New(srv.URL, WithCAFile(filepath.Join(t.TempDir(), "missing"))); err == nil {
		t.Errorf("a missing CA file was accepted")
	}
	if _, err := New(srv.URL, WithCAPool(srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs), WithHTTPClient(http.DefaultClient)); err == nil {
		t.Errorf("WithCAPool with WithHTTPClient was accepted")
	}
}
