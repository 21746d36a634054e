// Package devenv runs the operator locally on loopback: a real kube-apiserver and etcd with
// the CRDs installed, a MinIO server, and the manager binary, all from bin/. `make
// dev-cluster` and the demo use it; nothing here needs Docker or a cluster.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/localminio"
	"github.com/harness9/compaction-operator/internal/dev/proc"
)

// MinIO root credentials of the local environment; config/samples' Secret holds the same.
const (
	MinIOAccessKey = "minioadmin"
	MinIOSecretKey = "minioadmin"
)

// Options says where the repository and the environment's files are.
type Options struct {
	// Root is the repository root (bin/ and config/ are read from it).
	Root string
	// Dir receives the kubeconfig, MinIO's data, the manager log and the samples overlay.
	Dir string
	// ManagerBin is the manager binary; default bin/manager.
	ManagerBin string
	// ManagerArgs are added to the manager's command line (its flags: addresses and logging).
	ManagerArgs []string
	// Config, when set, is the base of the manager's configuration file; Start sets the
	// namespaces to its own and, unless Config sets them, lets namespaced policies name
	// loopback endpoints.
	Config *configv1alpha1.Configuration
}

// Env is a running local environment.
type Env struct {
	// Kubeconfig is the path of an admin kubeconfig for kubectl.
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// MinIO is the S3 server.
	MinIO *localminio.Server
	// ManagerLog is the path of the manager's log file.
	ManagerLog string
	// Samples is a kustomization that applies config/samples pointed at the local MinIO.
	Samples string
	// ProbeAddr serves the manager's /healthz and /readyz.
	ProbeAddr string
	// APIAddr serves the compaction API (HTTPS, with the manager's self-signed certificate).
	APIAddr string
	// APIURL is the compaction API's base URL.
	APIURL string
	// CAFile holds the CA bundle the manager published (ConfigMap CAConfigMap in the
	// default namespace): what an agent verifies the API with.
	CAFile string
	// AgentTokenFile holds a token of the ServiceAccount default/agent, bound to the
	// compaction-agent ClusterRole: what an agent pod presents to the API.
	AgentTokenFile string

	control *envtest.Environment
	manager *proc.Process
	logFile *os.File
}

// Start brings everything up and waits until the manager is ready. On error, whatever
// started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	bin := filepath.Join(opts.Root, "bin")
	if opts.ManagerBin == "" {
		opts.ManagerBin = filepath.Join(bin, "manager")
	}
	for _, path := range []string{filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "etcd"),
		filepath.Join(bin, "kubectl"), filepath.Join(bin, "minio"), opts.ManagerBin} {
		if _, statErr := os.Stat(path); statErr != nil {
			return nil, fmt.Errorf("%s is missing: run `make tools build`", path)
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", opts.Dir, err)
	}
	e := &Env{}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()

	e.control = &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(opts.Root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	if _, err := e.control.Start(); err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	admin, err := e.control.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("create admin user: %w", err)
	}
	e.Config = admin.Config()
	kc, err := admin.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	e.Kubeconfig = filepath.Join(opts.Dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, kc, 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}

	e.AgentTokenFile = filepath.Join(opts.Dir, "agent.token")
	if err := createAgent(ctx, opts.Root, e.Config, e.AgentTokenFile); err != nil {
		return nil, err
	}

	minioDir := filepath.Join(opts.Dir, "minio")
	if err := os.RemoveAll(minioDir); err != nil {
		return nil, fmt.Errorf("clear %s: %w", minioDir, err)
	}
	e.MinIO, err = localminio.Start(localminio.Options{
		Bin: filepath.Join(bin, "minio"), Dir: minioDir, AccessKey: MinIOAccessKey, SecretKey: MinIOSecretKey,
	})
	if err != nil {
		return nil, err
	}

	e.Samples = filepath.Join(opts.Dir, "samples")
	if err := writeSamplesOverlay(opts.Root, e.Samples, e.MinIO.Endpoint); err != nil {
		return nil, err
	}

	ports, err := proc.FreeLoopbackPorts(2)
	if err != nil {
		return nil, err
	}
	e.ProbeAddr, e.APIAddr = ports[0], ports[1]
	e.ManagerLog = filepath.Join(opts.Dir, "manager.log")
	if e.logFile, err = os.Create(e.ManagerLog); err != nil {
		return nil, fmt.Errorf("create manager log: %w", err)
	}
	cfg := &configv1alpha1.Configuration{}
	if opts.Config != nil {
		cfg = opts.Config.DeepCopy()
	}
	cfg.APIVersion, cfg.Kind = configv1alpha1.GroupVersion.String(), configv1alpha1.Kind
	// The cluster policies' Secrets and pinned locations, the self-signed certificate's
	// Secret and the CA bundle's ConfigMap.
	cfg.ClusterResourceNamespace, cfg.API.TLS.Namespace = operatorNamespace, operatorNamespace
	// MinIO and the scripted summarizers listen on loopback: namespaced policies may name it
	// (the manager's default is no endpoint at all), unless the caller says otherwise.
	if cfg.Egress.NamespacedPolicyEndpoints == nil {
		cfg.Egress.NamespacedPolicyEndpoints = []string{"127.0.0.1", "::1", "localhost"}
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	configFile := filepath.Join(opts.Dir, "manager-config.yaml")
	if err := os.WriteFile(configFile, data, 0o600); err != nil {
		return nil, err
	}
	args := append([]string{
		"--config", configFile,
		"--kubeconfig", e.Kubeconfig,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", e.ProbeAddr,
		"--api-bind-address", e.APIAddr,
	}, opts.ManagerArgs...)
	cmd := exec.Command(opts.ManagerBin, args...)
	if e.manager, err = proc.Start(cmd, 64<<10, e.logFile); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, "http://"+e.ProbeAddr+"/readyz", e.manager); err != nil {
		return nil, fmt.Errorf("manager: %w (log: %s)", err, e.ManagerLog)
	}
	e.APIURL = "https://" + e.APIAddr
	if cfg.API.TLS.InsecureServeHTTP {
		e.APIURL = "http://" + e.APIAddr
		return e, nil
	}
	// A Ready manager has published its CA bundle.
	e.CAFile = filepath.Join(opts.Dir, "ca.crt")
	if err := writeCA(ctx, e.Config, e.CAFile); err != nil {
		return nil, err
	}
	return e, nil
}

// CAConfigMap is the ConfigMap (in the default namespace) holding the API's CA bundle.
const CAConfigMap = "compaction-operator-api-ca"

// operatorNamespace plays the operator's namespace here: cluster policies' Secrets, pinned
// locations, the API's certificate and CA bundle.
const operatorNamespace = "default"

func writeCA(ctx context.Context, cfg *rest.Config, path string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	cm, err := cs.CoreV1().ConfigMaps(operatorNamespace).Get(ctx, CAConfigMap, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the API's CA bundle: %w", err)
	}
	if err := os.WriteFile(path, []byte(cm.Data["ca.crt"]), 0o600); err != nil {
		return fmt.Errorf("write the API's CA bundle: %w", err)
	}
	return nil
}

// Stop stops the manager, MinIO and the control plane, in that order.
func (e *Env) Stop() {
	if e.manager != nil {
		_ = e.manager.Stop(10 * time.Second)
	}
	if e.logFile != nil {
		_ = e.logFile.Close()
	}
	if e.MinIO != nil {
		e.MinIO.Stop()
	}
	if e.control != nil {
		_ = e.control.Stop()
	}
}

// Manager is the manager process (its Done channel closes if it dies).
func (e *Env) Manager() *proc.Process { return e.manager }

// Client is a controller-runtime client of the API server at cfg (Config, or a copy the
// caller adjusted) that knows the core and the compaction types: what the dev tools create
// their objects with.
func Client(cfg *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register the core types: %w", err)
	}
	if err := compactionv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register the compaction types: %w", err)
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// CreateMinIOPolicy creates, in namespace ns, the Secret "minio" with the local MinIO's
// credentials and the CompactionPolicy name (context window window) that stores in its
// bucket agent-context with them.
func (e *Env) CreateMinIOPolicy(ctx context.Context, c client.Client, ns, name string, window int32) error {
	if err := c.Create(ctx, builder.MinIOSecret(ns, "minio", MinIOAccessKey, MinIOSecretKey)); err != nil {
		return fmt.Errorf("create the MinIO Secret: %w", err)
	}
	if err := c.Create(ctx, builder.Policy(ns, name).Window(window).
		Storage(builder.MinIOStorage(e.MinIO.Endpoint, "agent-context", "", "minio")).Build()); err != nil {
		return fmt.Errorf("create CompactionPolicy %s: %w", name, err)
	}
	return nil
}

func waitReady(ctx context.Context, url string, p *proc.Process) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.Done():
			_, err := p.Exited()
			return fmt.Errorf("exited before becoming ready: %v", err)
		case <-ctx.Done():
			return errors.New("not ready after 60s")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeSamplesOverlay copies config/samples into dir with a kustomization that points the
// storage endpoints at the local MinIO.
func writeSamplesOverlay(root, dir, endpoint string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no samples in config/samples (%v)", err)
	}
	var k strings.Builder
	k.WriteString("# Generated by internal/dev/devenv: config/samples with storage at the local MinIO.\n" +
		"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: default\nresources:\n")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read sample: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o600); err != nil {
			return fmt.Errorf("copy sample: %w", err)
		}
		fmt.Fprintf(&k, "- %s\n", filepath.Base(f))
	}
	k.WriteString("patches:\n")
	for _, target := range [][2]string{{"CompactionPolicy", "default"}, {"ClusterCompactionPolicy", "large-context"}} {
		fmt.Fprintf(&k, `- target: {group: compaction.harness9.io, kind: %s, name: %s}
  patch: |
    - op: replace
      path: /spec/storage/s3/endpoint
      value: %q
`, target[0], target[1], endpoint)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k.String()), 0o600); err != nil {
		return fmt.Errorf("write samples overlay: %w", err)
	}
	return nil
}

// createAgent installs the compaction-agent ClusterRole from config/rbac, binds it to the
// ServiceAccount default/agent and writes a token of that account to tokenFile.
func createAgent(ctx context.Context, root string, cfg *rest.Config, tokenFile string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "agent_role.yaml"))
	if err != nil {
		return fmt.Errorf("read the agent role: %w", err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil {
		return fmt.Errorf("decode config/rbac/agent_role.yaml: %w", err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ClusterRole %s: %w", role.Name, err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ServiceAccount default/agent: %w", err)
	}
	if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-compaction"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "agent"}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind %s: %w", role.Name, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "agent", &authenticationv1.TokenRequest{
		// For the compaction API's audience, as an agent's projected token: the API refuses
		// tokens for the Kubernetes API itself.
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600), Audiences: []string{compactclient.DefaultTokenAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for default/agent: %w", err)
	}
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		return fmt.Errorf("write agent token: %w", err)
	}
	return nil
}
