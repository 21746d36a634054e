package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/harness9/compaction-operator/internal/dev/localminio"
)

// MinIO is a real MinIO server owned by one test. It listens on 127.0.0.1 only and keeps its
// data in a t.TempDir(), so Stop and Start (or Restart) bring back the same endpoint with
// the same objects, which is what fault-injection tests need.
//
// Start and Restart call t.Fatalf on failure, so call them from the test goroutine.
type MinIO struct {
	*localminio.Server
	t testing.TB
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
	srv, err := localminio.Start(localminio.Options{Bin: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(srv.Stop)
	return &MinIO{Server: srv, t: t}
}

// Start starts a stopped server again on the same ports and data directory. It is a no-op
// while the server runs.
func (m *MinIO) Start() {
	m.t.Helper()
	if err := m.Server.Start(); err != nil {
		m.t.Fatalf("testenv: %v", err)
	}
}

// Restart stops the server and starts it again on the same ports and data directory.
func (m *MinIO) Restart() {
	m.t.Helper()
	if err := m.Server.Restart(); err != nil {
		m.t.Fatalf("testenv: %v", err)
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
