// Package localminio runs a real MinIO server binary on loopback, for tests and for the
// local development environment.
package localminio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harness9/compaction-operator/internal/dev/proc"
)

const (
	// minioReadyTimeout bounds the wait for /minio/health/live. A cold start on a loaded
	// two-core CI machine under -race takes a few seconds; 30 s only trips on a real fault.
	minioReadyTimeout = 30 * time.Second
	// minioStopGrace is how long a SIGTERM gets before the server is killed.
	minioStopGrace = 5 * time.Second
	// minioStartAttempts retries a start whose free port was taken by someone else between
	// our probe and the server's bind.
	minioStartAttempts = 3
	// outputTailBytes is how much of the server's output a failure message quotes.
	outputTailBytes = 8 << 10
)

// Server is a MinIO server process listening on 127.0.0.1 only. Its data lives in a
// directory it is given, so Stop and Start bring back the same endpoint with the same
// objects, which is what fault-injection tests need.
type Server struct {
	// Endpoint is host:port of the S3 API, without a scheme (the server speaks plain HTTP).
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey string
	SecretKey string

	bin         string
	dataDir     string
	certsDir    string
	consoleAddr string

	mu   sync.Mutex
	proc *proc.Process // nil while stopped
}

// Options says which binary to run, where its data lives and with which credentials.
type Options struct {
	// Bin is the minio server binary.
	Bin string
	// Dir holds the server's data and certs directories; it is created if missing.
	Dir string
	// AccessKey and SecretKey are the root credentials; empty ones are generated.
	AccessKey string
	SecretKey string
}

// Start runs the server on free loopback ports and waits until it answers its liveness
// probe.
func Start(opts Options) (*Server, error) {
	var err error
	if opts.AccessKey == "" {
		if opts.AccessKey, err = randomHex(8); err != nil {
			return nil, err
		}
		opts.AccessKey = "test-" + opts.AccessKey
	}
	if opts.SecretKey == "" {
		if opts.SecretKey, err = randomHex(20); err != nil {
			return nil, err
		}
	}
	m := &Server{
		AccessKey: opts.AccessKey,
		SecretKey: opts.SecretKey,
		bin:       opts.Bin,
		dataDir:   filepath.Join(opts.Dir, "data"),
		certsDir:  filepath.Join(opts.Dir, "certs"),
	}
	for _, dir := range []string{m.dataDir, m.certsDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create minio dir: %w", err)
		}
	}
	var lastErr error
	for attempt := 1; attempt <= minioStartAttempts; attempt++ {
		ports, err := proc.FreeLoopbackPorts(2)
		if err != nil {
			return nil, err
		}
		m.Endpoint, m.consoleAddr = ports[0], ports[1]
		if lastErr = m.Start(); lastErr == nil {
			return m, nil
		}
		if !strings.Contains(lastErr.Error(), "already in use") {
			break
		}
	}
	return nil, lastErr
}

// Start starts a stopped server again on the same ports and data directory. It is a no-op
// while the server runs.
func (m *Server) Start() error {
	return m.start()
}

// Stop terminates the server (SIGTERM, then SIGKILL after a grace period) and waits for the
// process to exit. It is a no-op while the server is stopped.
func (m *Server) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return
	}
	_ = m.proc.Stop(minioStopGrace)
	m.proc = nil
}

// Restart stops the server and starts it again on the same ports and data directory.
func (m *Server) Restart() error {
	m.Stop()
	return m.Start()
}

// URL returns the base URL of the S3 API.
func (m *Server) URL() string { return "http://" + m.Endpoint }

// start launches the server and waits until it is live. On failure the process is gone.
func (m *Server) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		return nil
	}
	cmd := exec.Command(m.bin, "server",
		"--address", m.Endpoint,
		"--console-address", m.consoleAddr,
		// Keep the server away from ~/.minio: tests must not touch the user's home.
		"--certs-dir", m.certsDir,
		m.dataDir)
	cmd.Env = append(environWithout("MINIO_"),
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		// CI mode caps the buffer pool at 256 MiB instead of half the machine's memory.
		"MINIO_CI_CD=1",
		// No web console (its port is still pinned to a free one in case it starts anyway)
		// and no update checks: neither is needed, both cost time and resources.
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		// Its Prometheus metrics without a token, so load tests can count S3 requests.
		"MINIO_PROMETHEUS_AUTH_TYPE=public",
	)
	p, err := proc.Start(cmd, outputTailBytes, nil)
	if err != nil {
		return err
	}
	if err := waitLive(m.URL(), p, minioReadyTimeout); err != nil {
		_ = p.Stop(minioStopGrace)
		return fmt.Errorf("minio on %s did not become live: %w\n--- server output (tail) ---\n%s",
			m.Endpoint, err, p.Output())
	}
	m.proc = p
	return nil
}

// waitLive polls the liveness endpoint until it answers 200 with the object layer up, the
// process exits, or the timeout passes.
func waitLive(baseURL string, p *proc.Process, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/minio/health/live", nil)
		if err != nil {
			return fmt.Errorf("build health request: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			// Only the status and headers matter; closing the unread body just frees the
			// connection.
			_ = resp.Body.Close()
			// The probe answers 200 as soon as HTTP is up, but flags a server whose object
			// layer is still initialising; S3 calls then fail with "Server not initialized
			// yet", so that is not ready for a test either.
			status := resp.Header.Get("X-Minio-Server-Status")
			if resp.StatusCode == http.StatusOK && status == "" {
				return nil
			}
			lastErr = fmt.Errorf("health/live answered %s (server status %q)", resp.Status, status)
		} else {
			lastErr = err
		}
		select {
		case <-p.Done():
			_, err := p.Exited()
			return fmt.Errorf("server exited before becoming live: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("not live after %s (last probe: %v)", timeout, lastErr)
		case <-tick.C:
		}
	}
}

// environWithout returns the environment minus variables starting with prefix, so a
// developer's MINIO_* settings cannot change the test server.
func environWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

func randomHex(nbytes int) (string, error) {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random credentials: %w", err)
	}
	return hex.EncodeToString(b), nil
}
