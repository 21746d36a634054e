package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// TestChartConfiguration starts the manager binary with the configuration file the Helm
// chart renders from its default values, unchanged (release compaction-operator in
// compaction-system, the names config/default gives): it becomes Ready (leader election,
// its self-signed certificate and CA bundle), a ClusterCompactionPolicy on MinIO becomes
// Ready, and an agent compacts a session of it.
func TestChartConfiguration(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	root := testenv.RepoRoot(t)
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "bin", "helm"), "template", "compaction-operator", filepath.Join(root, "charts", "compaction-operator"),
		"-n", operator.SystemNamespace, "--show-only", "templates/manager-config.yaml",
		// Rendered without a cluster, the chart needs the API server's address (issue 28).
		"--set-json", `networkPolicy.egress.apiServer.cidrs=["192.0.2.10/32"]`)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "KUBECONFIG="+filepath.Join(home, "none"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template (run `make tools` for bin/helm): %v", err)
	}
	var cm corev1.ConfigMap
	testenv.Must(t, yaml.Unmarshal(out, &cm))
	mgr := cl.StartManagerFile(testenv.BuildManager(t), operator.WriteFile(t, "config.yaml", []byte(cm.Data["config.yaml"])))
	if mgr.CAPool == nil {
		t.Fatal("the manager published no CA bundle")
	}

	c, ctx := cl.Client, context.Background()
	// The chart's default lets cluster policies name any endpoint; their Secrets are in the
	// cluster resource namespace, the manager's own.
	secret := builder.MinIOSecret(operator.SystemNamespace, "chart-minio", m.AccessKey, m.SecretKey)
	testenv.Must(t, c.Create(ctx, secret))
	spec := builder.Policy("", "chart").Window(window).Storage(builder.MinIOStorage(m.Endpoint, bucket, "chart", secret.Name)).Build().Spec
	testenv.Must(t, c.Create(ctx, &compactionv1alpha1.ClusterCompactionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "chart"}, Spec: compactionv1alpha1.ClusterCompactionPolicySpec{CompactionPolicySpec: spec}}))
	session := builder.Session(ns, "chart", "chart").Cluster().Build()
	testenv.Must(t, c.Create(ctx, session))
	testenv.Eventually(t, waitFor, "the session to be Ready", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(session), session); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(session.Status.Conditions, compactionv1alpha1.ConditionReady), "not Ready"
	})
	history := testenv.MustLoad(t, filepath.Join(root, "testdata", "long-session.jsonl"))
	agent := mgr.APIClient(t, cl.BindAgent(ns, "chart-agent"))
	if _, err := agent.Compact(ctx, ns, session.Name, compactclient.CompactRequest{Messages: history[:compaction.AssistantTurns(history)[2]]}); err != nil {
		t.Fatalf("compact through the manager run with the chart's configuration: %v", err)
	}
}
