// Command httpfloor measures the floor under the compaction API's CPU per request: what a
// bare Go HTTPS server (net/http over TLS 1.3, HTTP/1.1, a handler that reads the body and
// writes a small JSON answer) spends per request of the load test's traffic shape on this
// machine: -clients connections, each a request of -size bytes every -think (uniform in
// [0.5, 1.5] x think). The server runs in a child process, so its CPU (utime+stime from
// /proc) is its own. Compare with hack/loadtest's "manager CPU per API request".
package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/harness9/compaction-operator/internal/dev/proc"
)

func main() {
	server := flag.Bool("server", false, "serve (the child process); prints its address")
	clients := flag.Int("clients", 200, "concurrent clients, a connection each")
	requests := flag.Int("requests", 40, "requests per client")
	think := flag.Duration("think", 2*time.Second, "mean pause before each request")
	size := flag.Int("size", 6<<10, "request body bytes")
	flag.Parse()
	var err error
	if *server {
		err = serve()
	} else {
		err = run(*clients, *requests, *think, *size)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpfloor:", err)
		os.Exit(1)
	}
}

func run(clients, requests int, think time.Duration, size int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self, "-server")
	out, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the server's address: %w", err)
	}
	url := "https://" + strings.TrimSpace(addr) + "/v1/compact"
	body := bytes.Repeat([]byte("a"), size)
	cpu0, err := proc.CPUSeconds(child.Process.Pid)
	if err != nil {
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A client each, as each agent has its own connection. The server's certificate is
			// its own throwaway one, on loopback.
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, throwaway cert
			for range requests {
				time.Sleep(time.Duration(float64(think) * (0.5 + mrand.Float64())))
				resp, err := c.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	elapsed := time.Since(start)
	cpu1, err := proc.CPUSeconds(child.Process.Pid)
	if err != nil {
		return err
	}
	n := clients * requests
	fmt.Printf("%d requests of %d bytes in %s; server CPU %.2fs (%.3f cores): %.3f ms per request\n",
		n, size, elapsed.Round(time.Millisecond), cpu1-cpu0, (cpu1-cpu0)/elapsed.Seconds(), (cpu1-cpu0)*1000/float64(n))
	return nil
}

func serve() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "httpfloor"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	ln = tls.NewListener(ln, &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12, NextProtos: []string{"http/1.1"},
	})
	// The compaction API's server settings at their defaults (internal/compactapi: write
	// timeout = read 30 s + request 60 s + 30 s grace), its handler reduced to
	// reading the body and answering.
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 2 * time.Minute, IdleTimeout: 120 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"messages":[],"echoed":2,"tier":"None"}`)
		}),
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
