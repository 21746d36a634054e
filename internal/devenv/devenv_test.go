package devenv_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/internal/devenv"
	"github.com/harness9/compaction-operator/internal/testenv"
)

// TestWalkthrough is the README's kubectl walkthrough: the samples apply to the local
// environment and the sessions show up Ready with the printer columns.
func TestWalkthrough(t *testing.T) {
	root := testenv.RepoRoot(t)
	kubectl := testenv.Kubectl(t)
	e, err := devenv.Start(context.Background(), devenv.Options{Root: root, Dir: t.TempDir(), ManagerBin: testenv.BuildManager(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	k := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", e.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	k("apply", "-k", e.Samples)

	var out string
	deadline := time.Now().Add(60 * time.Second)
	for {
		out = k("get", "agentsessions")
		if strings.Count(out, " True ") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions not Ready:\n%s", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME POLICY TIER USAGE RATIO READY AGE" {
		t.Errorf("columns = %v", header)
	}
	for _, name := range []string{"swe-agent-1", "coding-agent"} {
		if !strings.Contains(out, name) {
			t.Errorf("session %s missing:\n%s", name, out)
		}
	}
	policies := k("get", "compactionpolicies")
	if !strings.Contains(policies, "default") || !strings.Contains(policies, "True") {
		t.Errorf("policy not Ready:\n%s", policies)
	}
	if explain := k("explain", "compactionpolicy.spec.thresholds.warnPercent"); !strings.Contains(explain, "Warn") {
		t.Errorf("kubectl explain lacks the field's documentation:\n%s", explain)
	}
}
