package kubeenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"

	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// TestControlPlaneReportsPinnedVersion proves the tool build: envtest starts the
// kube-apiserver built from source, and discovery and kubectl report v1.37.2 (the version
// ldflags of hack/build-tools.sh).
func TestControlPlaneReportsPinnedVersion(t *testing.T) {
	_, cfg := Start(t, Options{})
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	if v.GitVersion != "v1.37.2" || v.Major != "1" || v.Minor != "37" {
		t.Fatalf("server version %+v, want v1.37.2", v)
	}
	out, err := exec.Command(filepath.Join(testenv.KubebuilderAssets(t), "kubectl"), "version", "--client").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Client Version: v1.37.2") {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
}
