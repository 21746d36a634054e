// Package proc runs helper server processes (MinIO, the manager, a control plane) for tests
// and local environments: output kept for error messages, SIGTERM then SIGKILL on Stop,
// and killed with the parent if it dies.
package proc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a running program.
type Process struct {
	cmd    *exec.Cmd
	output *TailBuffer
	done   chan struct{}
	once   sync.Once
	err    error
}

// Start runs cmd, sending its stdout and stderr to a TailBuffer of tail bytes (and to echo,
// when not nil).
func Start(cmd *exec.Cmd, tail int, echo *os.File) (*Process, error) {
	out := NewTailBuffer(tail)
	if echo != nil {
		cmd.Stdout, cmd.Stderr = multiWriter{out, echo}, multiWriter{out, echo}
	} else {
		cmd.Stdout, cmd.Stderr = out, out
	}
	// Bound Wait if the output pipes stay open after the process is gone.
	cmd.WaitDelay = 2 * time.Second
	setProcAttrs(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, output: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output is the tail of what the process wrote so far.
func (p *Process) Output() string { return p.output.String() }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, kills after grace, waits for the process to be reaped and returns its
// exit error. Calling it again returns the same result.
func (p *Process) Stop(grace time.Duration) error {
	p.once.Do(func() {
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
		}
	})
	<-p.done
	return p.err
}

type multiWriter struct {
	a *TailBuffer
	b *os.File
}

func (w multiWriter) Write(p []byte) (int, error) {
	_, _ = w.a.Write(p)
	return w.b.Write(p)
}

// TailBuffer keeps the last max bytes written to it. exec copies stdout and stderr from
// separate goroutines, hence the mutex.
type TailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// NewTailBuffer keeps at most max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{max: max} }

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		// Compact in place rather than reslicing so the backing array does not grow forever.
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// FreeLoopbackPorts returns n distinct free 127.0.0.1 addresses. All listeners stay open
// until every port is chosen so the kernel cannot hand out the same port twice.
func FreeLoopbackPorts(n int) ([]string, error) {
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
