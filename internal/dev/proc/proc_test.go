package proc

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestTailBufferKeepsTail(t *testing.T) {
	b := NewTailBuffer(8)
	for _, s := range []string{"abc", "defgh", "ijklmnop", "qr"} {
		if _, err := b.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.String(); got != "klmnopqr" {
		t.Fatalf("tail = %q, want %q", got, "klmnopqr")
	}
}

func TestFreeLoopbackPortsDistinct(t *testing.T) {
	addrs, err := FreeLoopbackPorts(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q is not on 127.0.0.1 (err %v)", a, err)
		}
		if seen[a] {
			t.Fatalf("address %q handed out twice", a)
		}
		seen[a] = true
	}
}

func TestStopTerminatesAndReportsExit(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", "echo started; exec sleep 60"), 1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Output(), "started") {
		if time.Now().After(deadline) {
			t.Fatalf("no output from the process: %q", p.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if exited, _ := p.Exited(); exited {
		t.Fatal("process reported exited while running")
	}
	err = p.Stop(5 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("Stop of a SIGTERMed sleep: err = %v, want a signal exit", err)
	}
	if exited, _ := p.Exited(); !exited {
		t.Fatal("process not reported exited after Stop")
	}
	if err2 := p.Stop(time.Second); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("second Stop = %v, want the first result %v", err2, err)
	}
}

func TestCPUSecondsOfABusyProcess(t *testing.T) {
	// A shell loop that burns CPU for a while: its CPU time must rise from (about) 0.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var used float64
	deadline := time.Now().Add(30 * time.Second)
	for used < 0.05 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		got, err := CPUSeconds(pid)
		if err != nil {
			t.Fatal(err)
		}
		used = got
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if used < 0.05 {
		t.Fatalf("CPUSeconds of a busy process stayed at %.2fs", used)
	}
	if _, err := CPUSeconds(pid); err == nil || !strings.Contains(err.Error(), "CPU time of process") {
		t.Fatalf("CPUSeconds of an ended process: err %v, want one naming the process", err)
	}
}
