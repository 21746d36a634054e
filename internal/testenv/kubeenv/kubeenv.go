// Package kubeenv starts a real control plane for tests: the kube-apiserver and etcd that
// `make tools` builds into bin/, through controller-runtime's envtest.
package kubeenv

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/harness9/compaction-operator/internal/testenv"
)

// Options adjusts the control plane a test starts.
type Options struct {
	// CRDDirectoryPaths are installed before Start returns.
	CRDDirectoryPaths []string
	// AdmissionPlugins are enabled on top of the defaults, for checks that production
	// clusters run and envtest does not (OwnerReferencesPermissionEnforcement, for one).
	AdmissionPlugins []string
}

// Start runs kube-apiserver and etcd from bin/ (or $KUBEBUILDER_ASSETS) and stops them when
// the test ends. A missing binary fails the test with a message naming `make tools`.
func Start(t testing.TB, opts Options) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env := &envtest.Environment{
		BinaryAssetsDirectory: testenv.KubebuilderAssets(t),
		CRDDirectoryPaths:     opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing: len(opts.CRDDirectoryPaths) > 0,
	}
	if len(opts.AdmissionPlugins) > 0 {
		env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", opts.AdmissionPlugins...)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("kubeenv: start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("kubeenv: stop control plane: %v", err)
		}
	})
	return env, cfg
}
