package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a program a test runs in the background, with the tail of its output kept for
// failure messages. It is stopped when the test ends.
type Process struct {
	cmd    *exec.Cmd
	output *tailBuffer
	done   chan struct{}
	once   sync.Once
	err    error
}

// processOutputTail is how much of a process's output is kept.
const processOutputTail = 1 << 20

// StartProcess runs bin with args and the current environment plus env, and stops it
// (SIGTERM, then SIGKILL after 10 s) when the test ends.
func StartProcess(t testing.TB, bin string, args []string, env ...string) *Process {
	t.Helper()
	out := newTailBuffer(processOutputTail)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 2 * time.Second
	setProcAttrs(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", bin, err)
	}
	p := &Process{cmd: cmd, output: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

// Output is the tail of everything the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.output.String() }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, waits up to grace, then kills; it returns the exit error.
func (p *Process) Stop(grace time.Duration) error {
	p.once.Do(func() {
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
	})
	<-p.done
	return p.err
}

// BuildManager builds cmd/manager into a temporary directory and returns its path; the Go
// build cache makes this quick after the first time.
func BuildManager(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("testenv: the go command is needed to build the manager: %v", err)
	}
	out := filepath.Join(t.TempDir(), "manager")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/manager")
	cmd.Dir = RepoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build ./cmd/manager: %v\n%s", err, b)
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
	ports, err := freeLoopbackPorts(n)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return ports
}

