package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// MinIO is a real MinIO server owned by one test. It listens on 127.0.0.1 only and keeps its
// data in a t.TempDir(), so Stop and Start (or Restart) bring back the same endpoint with
// the same objects, which is what fault-injection tests need.
//
// Start, Stop and Restart call t.Fatalf on failure, so call them from the test goroutine.
type MinIO struct {
	// Endpoint is host:port of the S3 API, without a scheme (the server speaks plain HTTP).
	Endpoint string
	// AccessKey and SecretKey are the randomly generated root credentials.
	AccessKey string
	SecretKey string

	t           testing.TB
	bin         string
	dataDir     string
	certsDir    string
	consoleAddr string

	mu   sync.Mutex
	proc *minioProcess // nil while stopped
}

// minioProcess is one run of the server binary.
type minioProcess struct {
	cmd    *exec.Cmd
	output *tailBuffer
	done   chan struct{} // closed when cmd.Wait has returned
	err    error         // cmd.Wait's result, valid after done is closed
}

// StartMinIO starts bin/minio (or $MINIO_BIN) on free loopback ports with fresh random root
// credentials and an empty data directory, waits until it answers its liveness probe, and
// stops it when the test ends. A missing binary fails the test with a hint to run
// `make tools`.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin, err := minioBinary(t)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	base := t.TempDir()
	m := &MinIO{
		AccessKey: "test-" + randomHex(t, 8),
		SecretKey: randomHex(t, 20),
		t:         t,
		bin:       bin,
		dataDir:   filepath.Join(base, "data"),
		certsDir:  filepath.Join(base, "certs"),
	}
	for _, dir := range []string{m.dataDir, m.certsDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatalf("testenv: create minio dir: %v", err)
		}
	}
	// Registered before the first start so a failed start is cleaned up too.
	t.Cleanup(m.Stop)

	var lastErr error
	for attempt := 1; attempt <= minioStartAttempts; attempt++ {
		ports, err := freeLoopbackPorts(2)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		m.Endpoint, m.consoleAddr = ports[0], ports[1]
		if lastErr = m.start(); lastErr == nil {
			return m
		}
		if !strings.Contains(lastErr.Error(), "already in use") {
			break
		}
		t.Logf("testenv: minio start attempt %d lost its port, retrying: %v", attempt, lastErr)
	}
	t.Fatalf("testenv: %v", lastErr)
	return nil
}

// Start starts a stopped server again on the same ports and data directory. It is a no-op
// while the server runs.
func (m *MinIO) Start() {
	m.t.Helper()
	if err := m.start(); err != nil {
		m.t.Fatalf("testenv: %v", err)
	}
}

// Stop terminates the server (SIGTERM, then SIGKILL after a grace period) and waits for the
// process to exit. It is a no-op while the server is stopped.
func (m *MinIO) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return
	}
	m.proc.stop(minioStopGrace)
	m.proc = nil
}

// Restart stops the server and starts it again on the same ports and data directory.
func (m *MinIO) Restart() {
	m.t.Helper()
	m.Stop()
	m.Start()
}

// URL returns the base URL of the S3 API.
func (m *MinIO) URL() string { return "http://" + m.Endpoint }

// start launches the server and waits until it is live. On failure the process is gone.
func (m *MinIO) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		return nil
	}
	out := newTailBuffer(outputTailBytes)
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
	)
	cmd.Stdout = out
	cmd.Stderr = out
	// Bound Wait if the output pipes stay open after the process is gone.
	cmd.WaitDelay = 2 * time.Second
	setProcAttrs(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.bin, err)
	}
	p := &minioProcess{cmd: cmd, output: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	if err := waitLive(m.URL(), p, minioReadyTimeout); err != nil {
		p.stop(minioStopGrace)
		return fmt.Errorf("minio on %s did not become live: %w\n--- server output (tail) ---\n%s",
			m.Endpoint, err, out.String())
	}
	m.proc = p
	return nil
}

// waitLive polls the liveness endpoint until it answers 200 with the object layer up, the
// process exits, or the timeout passes.
func waitLive(baseURL string, p *minioProcess, timeout time.Duration) error {
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
		case <-p.done:
			return fmt.Errorf("server exited before becoming live: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not live after %s (last probe: %v)", timeout, lastErr)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM, kills after grace, and waits for the process to be reaped.
func (p *minioProcess) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = p.cmd.Process.Kill()
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// minioBinary returns the server binary: $MINIO_BIN when set, otherwise {repo}/bin/minio.
func minioBinary(t testing.TB) (string, error) {
	path := os.Getenv("MINIO_BIN")
	source := "MINIO_BIN"
	if path == "" {
		path = filepath.Join(RepoRoot(t), "bin", "minio")
		source = "bin/minio"
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("make minio path %q absolute: %w", path, err)
	}
	if err := checkExecutable(abs); err != nil {
		return "", fmt.Errorf("minio server binary (%s) unusable: %v; %s", source, err, makeToolsHint)
	}
	return abs, nil
}

// freeLoopbackPorts returns n distinct free 127.0.0.1 addresses. All listeners stay open
// until every port is chosen so the kernel cannot hand out the same port twice.
func freeLoopbackPorts(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		// Closing only hands the ports back for the server to bind; a failed Close of an
		// idle listener has nothing to undo.
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
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

func randomHex(t testing.TB, nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testenv: random credentials: %v", err)
	}
	return hex.EncodeToString(b)
}

// tailBuffer keeps the last max bytes written to it. exec copies stdout and stderr from
// separate goroutines, hence the mutex.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		// Compact in place rather than reslicing so the backing array does not grow forever.
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
