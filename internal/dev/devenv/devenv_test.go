package devenv_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/devenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// TestWalkthrough is the kubectl walkthrough of docs/development.md: the samples apply to the local
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
	if strings.Join(header, " ") != "NAME POLICY TIER USAGE RATIO READY PROXY AGE" {
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
	// The agent's token reaches the compaction API: an empty trail before any compaction.
	token, err := os.ReadFile(e.AgentTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := compactclient.New(e.APIURL, compactclient.WithToken(string(token)), compactclient.WithCAFile(e.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cc.Compact(context.Background(), "default", "swe-agent-1", compactclient.CompactRequest{
		Messages: []compaction.Message{{Role: compaction.RoleUser, Content: "fix the failing test"}}})
	if err != nil || resp.Record.Tier != compaction.TierNone {
		t.Fatalf("compact as the agent: %+v, %v", resp, err)
	}
	if explain := k("explain", "compactionpolicy.spec.thresholds.warnPercent"); !strings.Contains(explain, "Warn") {
		t.Errorf("kubectl explain lacks the field's documentation:\n%s", explain)
	}
	for field, want := range map[string]string{"targetPercent": "fewer summarizer", "minSavingPercent": "prompt-cache rewrites"} {
		if explain := k("explain", "clustercompactionpolicy.spec.thresholds."+field); !strings.Contains(strings.Join(strings.Fields(explain), " "), want) {
			t.Errorf("kubectl explain %s lacks %q:\n%s", field, want, explain)
		}
	}
	if explain := k("explain", "clustercompactionpolicy.spec.namespaceSelector"); !strings.Contains(strings.Join(strings.Fields(explain), " "), "NamespaceNotAllowed") {
		t.Errorf("kubectl explain clustercompactionpolicy.spec.namespaceSelector lacks its documentation:\n%s", explain)
	}
	if resp.Usage <= 0 || resp.NextTier != compaction.TierWarn || resp.TokensToNextTier <= 0 {
		t.Errorf("compact answer usage %v, next tier %s in %d tokens; want a positive usage and Warn ahead", resp.Usage, resp.NextTier, resp.TokensToNextTier)
	}
}
