package compactapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/harness9/compaction-operator/internal/compactapi/statusbatch"
)

// pendingCerts is a certificate source that has no certificate until it is given one.
type pendingCerts struct {
	ready chan struct{}
	cert  *tls.Certificate
}

func (p *pendingCerts) Ready() <-chan struct{} { return p.ready }

func (p *pendingCerts) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	select {
	case <-p.ready:
		return p.cert, nil
	default:
		return nil, errors.New("no certificate")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// Without a certificate source the server refuses to start unless plain HTTP is asked for.
func TestNoCertificateNoPlainHTTP(t *testing.T) {
	s := &Server{cfg: Config{BindAddress: freeAddr(t)}, log: logr.Discard(), status: statusbatch.New(statusbatch.Config{})}
	err := s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "plain HTTP not allowed") {
		t.Fatalf("Start without certificates: %v", err)
	}
}

// The API is not Ready, and does not listen, until its certificate source has a
// certificate; then it serves TLS 1.2 or later with it.
func TestNotReadyWithoutCertificate(t *testing.T) {
	srv := newTLSServerCert(t)
	src := &pendingCerts{ready: make(chan struct{}), cert: srv}
	addr := freeAddr(t)
	s := &Server{cfg: Config{BindAddress: addr, Certificates: src, ReadTimeout: time.Second, RequestTimeout: time.Second},
		log: logr.Discard(), status: statusbatch.New(statusbatch.Config{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	// Start is waiting for the certificate (the source's Ready has not been read from yet
	// or is being waited on); neither ready nor listening.
	if err := s.ReadyCheck(nil); err == nil {
		t.Fatal("Ready without a certificate")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Fatal("listening without a certificate")
	}
	close(src.ready)
	for s.ReadyCheck(nil) != nil {
		select {
		case err := <-done:
			t.Fatalf("Start returned: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}); err == nil { //nolint:gosec // checks that TLS 1.1 is refused
		t.Error("TLS 1.1 accepted")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // only which certificate is served matters here
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if got := conn.ConnectionState().PeerCertificates[0]; !got.Equal(srv.Leaf) {
		t.Errorf("served certificate %s, want the source's", got.Subject)
	}
}

// newTLSServerCert is a self-signed serving certificate.
func newTLSServerCert(t *testing.T) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "api"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}
