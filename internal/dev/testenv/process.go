package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/internal/dev/proc"
)

// StartProcess runs bin with args and the current environment plus env, and stops it
// (SIGTERM, then SIGKILL after 10 s) when the test ends. The tail of its output is kept for
// failure messages.
func StartProcess(t testing.TB, bin string, args []string, env ...string) *proc.Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p, err := proc.Start(cmd, processOutputTail, nil)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
	return p
}

// processOutputTail is how much of a process's output is kept.
const processOutputTail = 1 << 20

// BuildManager builds cmd/manager into a temporary directory and returns its path; the Go
// build cache makes this quick after the first time.
func BuildManager(t testing.TB) string {
	t.Helper()
	return Build(t, "./cmd/manager")
}

// Build builds the main package pkg (relative to the repository root, e.g. "./cmd/compactctl")
// into a temporary directory and returns the binary's path. It builds with
// hack/build-static.sh, as the image does: the tests run the binary users get, and share one
// compile of the dependencies with test/image and `make vet`.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("testenv: the go command is needed to build %s: %v", pkg, err)
	}
	root := RepoRoot(t)
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command(filepath.Join(root, "hack", "build-static.sh"), out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: hack/build-static.sh %s: %v\n%s", pkg, err, b)
	}
	return out
}

// Kubectl returns the kubectl binary next to the envtest binaries (built by `make tools`).
func Kubectl(t testing.TB) string {
	t.Helper()
	return filepath.Join(KubebuilderAssets(t), "kubectl")
}

// FreePorts returns n distinct free loopback addresses (127.0.0.1:port).
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	ports, err := proc.FreeLoopbackPorts(n)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return ports
}
