package demo_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/internal/dev/demo"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// syncBuffer is written by the demo and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemo is `make demo` on the long sample transcript: every step narrated, the
// session's objects gone at the end, and no process left behind.
func TestDemo(t *testing.T) {
	root := testenv.RepoRoot(t)
	testenv.KubebuilderAssets(t) // fails naming `make tools` when the binaries are missing
	var out syncBuffer
	err := demo.Run(context.Background(), demo.Options{
		Root: root, Dir: t.TempDir(), Transcript: filepath.Join(root, "testdata", "long-session.jsonl"),
		Window: 8000, ManagerBin: testenv.BuildManager(t), ProxyBin: testenv.Build(t, "./cmd/compaction-proxy"), Out: &out,
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		// At 8,000 tokens this transcript's Soft compactions all escalate to Full (half the
		// head does not reach the 50% target), so Warn and Full are what the demo shows.
		"Context compressed [Warn]", "Context compressed [Full]",
		"summarizer calls", "identical to the original", "The JSONL audit trail", "left in s3://agent-context/demo: 0",
		"StorageDeleted", "== Shutting down",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// Issue 31: every status the demo prints shows the compactions made before it.
	if strings.Contains(text, "status has not caught up") {
		t.Errorf("the demo printed a status behind the replay:\n%s", text)
	}
	// Issue 13's economics: no compaction saves less than 15% of the view, and the
	// summarizer is called far less than every few turns (111 calls before, 44 after).
	m := regexp.MustCompile(`(\d+) turns; compactions that changed the view: .*\(smallest saving (\d+)% of the view\); (\d+) summarizer calls`).FindStringSubmatch(text)
	if m == nil {
		t.Errorf("demo output lacks the replay's summary line")
	} else {
		turns, _ := strconv.Atoi(m[1])
		saving, _ := strconv.Atoi(m[2])
		calls, _ := strconv.Atoi(m[3])
		if saving < 15 || calls == 0 || calls > turns/3 {
			t.Errorf("replay of %d turns: smallest saving %d%% (want >= 15), %d summarizer calls (want 1..%d)", turns, saving, calls, turns/3)
		}
	}
	// Issue 16: the unmodified SDK loop through compaction-proxy gets compacted views, and its
	// key reaches the model.
	m = regexp.MustCompile(`(\d+) turns through compaction-proxy: (\d+) reached the model compacted; .* \((\d+)%\); the agent's own API key reached the model: (\w+)`).FindStringSubmatch(text)
	if m == nil {
		t.Errorf("demo output lacks the SDK agent's summary line")
	} else {
		turns, _ := strconv.Atoi(m[1])
		compacted, _ := strconv.Atoi(m[2])
		share, _ := strconv.Atoi(m[3])
		if turns < 100 || compacted < turns/2 || share > 50 || m[4] != "true" {
			t.Errorf("SDK agent: %d turns, %d compacted (want >= half), the model received %d%% of the bytes (want <= 50), key passed %s", turns, compacted, share, m[4])
		}
	}
	if !strings.Contains(text, "starts with the operator's summary") {
		t.Errorf("demo output never shows the model receiving the operator's summary")
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", text)
	}
	checkNoChildren(t)
}

// TestDemoKeepStopsOnInterrupt is DEMO_KEEP=1 then Ctrl-C: everything stops.
func TestDemoKeepStopsOnInterrupt(t *testing.T) {
	root := testenv.RepoRoot(t)
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(ctx, demo.Options{
			Root: root, Dir: t.TempDir(), Transcript: filepath.Join(root, "testdata", "coding-agent-small.jsonl"),
			Window: 8000, ManagerBin: testenv.BuildManager(t), ProxyBin: testenv.Build(t, "./cmd/compaction-proxy"), Keep: true, Out: &out,
		})
	}()
	deadline := time.After(3 * time.Minute)
	for !strings.Contains(out.String(), "Ctrl-C stops everything") {
		select {
		case err := <-done:
			t.Fatalf("demo ended before keeping the environment: %v\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("demo never reached the keep step:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !strings.Contains(out.String(), "export KUBECONFIG=") || !strings.Contains(out.String(), "MinIO: http://127.0.0.1:") {
		t.Errorf("keep mode does not print the KUBECONFIG export and the MinIO address:\n%s", out.String())
	}
	cancel() // Ctrl-C
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo after interrupt: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("demo did not stop within a minute of the interrupt")
	}
	checkNoChildren(t)
}

// checkNoChildren fails when this process still has child processes (servers the demo
// started and did not stop).
func checkNoChildren(t *testing.T) {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("cannot list child processes from /proc: %v", err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if pids := strings.TrimSpace(string(b)); pids != "" {
			t.Errorf("child processes left running: %s", pids)
		}
	}
}
