// Package kubeenv starts a real control plane for tests: the kube-apiserver and etcd that
// `make tools` builds into bin/, through controller-runtime's envtest.
package kubeenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/harness9/compaction-operator/internal/dev/testenv"
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
	// A directory of our own keeps the serving certificates and the ServiceAccount signing
	// key across RestartAPIServer: clients and issued tokens stay valid, as in a real restart.
	env.ControlPlane.GetAPIServer().CertDir = t.TempDir()
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

// AdminKubeconfig adds a user of system:masters to env and writes its kubeconfig into a
// temporary file of the test, for kubectl and helm.
func AdminKubeconfig(t testing.TB, env *envtest.Environment) string {
	t.Helper()
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("kubeenv: add the admin user: %v", err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		t.Fatalf("kubeenv: admin kubeconfig: %v", err)
	}
	p := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(p, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// RestartAPIServer kills kube-apiserver (SIGKILL, as in a crash or a node loss: a graceful
// stop of it takes longer than envtest waits), keeps it down for down, and starts it again on
// the same address with the same certificates and keys. etcd keeps running, so no object is
// lost. It returns once the new kube-apiserver is healthy, with how long the start took.
func RestartAPIServer(env *envtest.Environment, down time.Duration) (time.Duration, error) {
	api := env.ControlPlane.GetAPIServer()
	pid, err := findProcess("kube-apiserver", "--cert-dir="+api.CertDir)
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kubeenv: kill kube-apiserver: %w", err)
	}
	// envtest reaps the process; Stop returns once it has.
	if err := api.Stop(); err != nil {
		return 0, fmt.Errorf("kubeenv: stop kube-apiserver: %w", err)
	}
	time.Sleep(down)
	start := time.Now()
	if err := api.Start(); err != nil {
		return 0, fmt.Errorf("kubeenv: start kube-apiserver again: %w", err)
	}
	return time.Since(start), nil
}

// findProcess returns the PID of the process running binary with arg on its command line.
func findProcess(binary, arg string) (int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("kubeenv: list processes: %w", err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) == binary && slices.Contains(args, arg) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("kubeenv: no %s process with %s", binary, arg)
}
