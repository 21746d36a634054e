// Package operator installs the operator into a test control plane the way a user does
// (kubectl apply -k config/default) and runs the manager binary as its ServiceAccount.
package operator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/proc"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
)

// Names config/default creates.
const (
	SystemNamespace = "compaction-system"
	ManagerSA       = "compaction-operator-controller-manager"
	MetricsReader   = "compaction-operator-metrics-reader"
	AgentRole       = "compaction-operator-compaction-agent"
)

// Cluster is a control plane with the operator's config/default installed.
type Cluster struct {
	Config          *rest.Config
	Client          client.Client
	Clientset       kubernetes.Interface
	AdminKubeconfig string
	Kubectl         string
	env             *envtest.Environment
	root            string
	t               testing.TB
}

// Install starts a control plane (with OwnerReferencesPermissionEnforcement, which many
// clusters run) and applies config/default with kubectl.
func Install(t testing.TB) *Cluster {
	t.Helper()
	root := testenv.RepoRoot(t)
	env, cfg := kubeenv.Start(t, kubeenv.Options{
		CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")},
		AdmissionPlugins:  []string{"OwnerReferencesPermissionEnforcement"},
	})
	c := &Cluster{Config: cfg, AdminKubeconfig: kubeenv.AdminKubeconfig(t, env), Kubectl: testenv.Kubectl(t), env: env, root: root, t: t}
	c.Run("apply", "--server-side", "-k", filepath.Join(root, "config", "default"))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := compactionv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var err error
	if c.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if c.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// RestartAPIServer kills kube-apiserver, keeps it down for down and starts it again (same address,
// certificates and keys; etcd keeps the objects), returning when it is healthy.
func (c *Cluster) RestartAPIServer(down time.Duration) {
	c.t.Helper()
	started, err := kubeenv.RestartAPIServer(c.env, down)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("kube-apiserver killed, down %s, started again in %s", down, started.Round(time.Millisecond))
}

// LeaseName is the manager's default leader election Lease (in SystemNamespace).
const LeaseName = "compaction-operator.harness9.io"

// ExpireLease deletes the leader election Lease, as its expiry would after the leader was
// killed: the next manager leads at once instead of after the lease duration.
func (c *Cluster) ExpireLease() {
	c.t.Helper()
	err := c.Clientset.CoordinationV1().Leases(SystemNamespace).Delete(context.Background(), LeaseName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatalf("delete the leader election Lease: %v", err)
	}
}

// Run runs kubectl as the admin and returns its output; a failure fails the test.
func (c *Cluster) Run(args ...string) string {
	c.t.Helper()
	out, err := exec.Command(c.Kubectl, append([]string{"--kubeconfig", c.AdminKubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Token returns a one-hour token of the ServiceAccount namespace/name (TokenRequest) for the
// Kubernetes API's own audience: for kubeconfigs and /metrics, not the compaction API.
func (c *Cluster) Token(namespace, name string) string {
	c.t.Helper()
	return c.requestToken(namespace, name, authenticationv1.TokenRequestSpec{})
}

// AgentToken returns a one-hour token of the ServiceAccount namespace/name for the
// compaction API's audience, as an agent's projected token is.
func (c *Cluster) AgentToken(namespace, name string) string {
	c.t.Helper()
	return c.requestToken(namespace, name, authenticationv1.TokenRequestSpec{Audiences: []string{compactclient.DefaultTokenAudience}})
}

// PodToken returns a one-hour token for the compaction API's audience of the ServiceAccount
// the pod namespace/pod runs as, bound to that pod as the kubelet's projected token is: its
// user info carries the pod's name and UID, and it stops working when the pod is deleted.
// Binding needs only the Pod object, not a running pod.
func (c *Cluster) PodToken(namespace, pod string) string {
	c.t.Helper()
	p, err := c.Clientset.CoreV1().Pods(namespace).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		c.t.Fatalf("get pod %s/%s: %v", namespace, pod, err)
	}
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return c.requestToken(namespace, sa, authenticationv1.TokenRequestSpec{
		Audiences:      []string{compactclient.DefaultTokenAudience},
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	})
}

func (c *Cluster) requestToken(namespace, name string, spec authenticationv1.TokenRequestSpec) string {
	c.t.Helper()
	spec.ExpirationSeconds = ptr.To[int64](3600)
	tr, err := c.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("TokenRequest for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// TokenKubeconfig is a kubeconfig for the control plane that authenticates with token.
func (c *Cluster) TokenKubeconfig(token string) string {
	c.t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "sa"}
	kc.CurrentContext = "sa"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		c.t.Fatal(err)
	}
	return WriteFile(c.t, "sa.kubeconfig", b)
}

// Manager is the manager binary running as the ServiceAccount config/default creates.
type Manager struct {
	*proc.Process
	MetricsAddr, ProbeAddr, APIAddr string
	// URL is the compaction API's base URL: https unless api.tls.insecureServeHTTP.
	URL string
	// CAFile and CAPool hold the CA bundle the manager published (ConfigMap CAConfigMap),
	// when it issued its own certificate (no api.tls.certDir, no plain HTTP).
	CAFile string
	CAPool *x509.CertPool
}

// CAConfigMap is the ConfigMap in SystemNamespace where the manager publishes its CA bundle.
const CAConfigMap = "compaction-operator-api-ca"

// HTTPClient is an HTTP client that verifies the API with the published CA.
func (m *Manager) HTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: m.CAPool, MinVersion: tls.VersionTLS12}
	return &http.Client{Timeout: 2 * time.Minute, Transport: tr}
}

// APIClient is a compaction API client with token that verifies the API with the published CA.
func (m *Manager) APIClient(t testing.TB, token string, opts ...compactclient.Option) *compactclient.Client {
	t.Helper()
	opts = append([]compactclient.Option{compactclient.WithToken(token)}, opts...)
	if m.CAPool != nil {
		opts = append(opts, compactclient.WithCAPool(m.CAPool))
	}
	c, err := compactclient.New(m.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NamespacedEndpointsUnset, among StartManager's configure functions, starts the manager
// without egress.namespacedPolicyEndpoints (which StartManager otherwise sets to loopback).
func NamespacedEndpointsUnset(c *configv1alpha1.Configuration) {
	c.Egress.NamespacedPolicyEndpoints = nil
}

// Duration is d for a configuration field.
func Duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// StartManager starts the manager binary bin with a configuration file written from a
// Configuration with leader election on (its Lease in SystemNamespace) and namespaced
// policies allowed the loopback endpoints of the tests' MinIO and traps (the manager's
// default is no endpoint at all), changed by configure; it waits until the manager is ready.
func (c *Cluster) StartManager(bin string, configure ...func(*configv1alpha1.Configuration)) *Manager {
	c.t.Helper()
	cfg := &configv1alpha1.Configuration{TypeMeta: metav1.TypeMeta{APIVersion: configv1alpha1.GroupVersion.String(), Kind: configv1alpha1.Kind}}
	cfg.LeaderElection.LeaderElect = true
	cfg.LeaderElection.ResourceNamespace = SystemNamespace
	cfg.Egress.NamespacedPolicyEndpoints = []string{"127.0.0.1", "::1", "localhost"}
	for _, f := range configure {
		f(cfg)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.StartManagerFile(bin, WriteFile(c.t, "config.yaml", data))
}

// StartManagerFile starts the manager binary bin with the configuration file config, as
// the ServiceAccount config/default creates, and waits until it is ready.
func (c *Cluster) StartManagerFile(bin, config string) *Manager {
	c.t.Helper()
	cfg, err := configv1alpha1.Load(config)
	if err != nil {
		c.t.Fatalf("the manager's configuration: %v", err)
	}
	kubeconfig := c.TokenKubeconfig(c.Token(SystemNamespace, ManagerSA))
	ports := testenv.FreePorts(c.t, 3)
	m := &Manager{MetricsAddr: ports[0], ProbeAddr: ports[1], APIAddr: ports[2]}
	args := []string{
		"--config", config,
		"--kubeconfig", kubeconfig,
		"--metrics-bind-address", m.MetricsAddr,
		"--health-probe-bind-address", m.ProbeAddr,
		"--api-bind-address", m.APIAddr,
	}
	m.Process = testenv.StartProcess(c.t, bin, args, "POD_NAMESPACE="+SystemNamespace)
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("manager output:\n%s", m.Output())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if exited, err := m.Exited(); exited {
			c.t.Fatalf("manager exited (%v):\n%s", err, m.Output())
		}
		resp, err := http.Get("http://" + m.ProbeAddr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.apiTrust(m, &cfg.API.TLS)
				return m
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("manager not ready after 60s:\n%s", m.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// apiTrust sets the manager's URL and, when it issued its own certificate, reads the CA
// bundle it published (a Ready manager has published it).
func (c *Cluster) apiTrust(m *Manager, tls *configv1alpha1.TLS) {
	c.t.Helper()
	m.URL = "https://" + m.APIAddr
	if tls.InsecureServeHTTP {
		m.URL = "http://" + m.APIAddr
		return
	}
	if tls.CertDir != "" {
		return
	}
	cm, err := c.Clientset.CoreV1().ConfigMaps(SystemNamespace).Get(context.Background(), CAConfigMap, metav1.GetOptions{})
	if err != nil {
		c.t.Fatalf("read the published CA bundle: %v", err)
	}
	m.CAPool = x509.NewCertPool()
	if !m.CAPool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"])) {
		c.t.Fatalf("ConfigMap %s holds no CA: %v", CAConfigMap, cm.Data)
	}
	m.CAFile = WriteFile(c.t, "ca.crt", []byte(cm.Data["ca.crt"]))
}

// WriteFile writes data to a new file in a temporary directory and returns its path.
func WriteFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// BindAgent creates the ServiceAccount namespace/name, binds it to the compaction-agent
// ClusterRole in its namespace and returns a token of it for the compaction API.
func (c *Cluster) BindAgent(namespace, name string) string {
	c.t.Helper()
	ctx := context.Background()
	if err := c.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}); err != nil {
		c.t.Fatal(err)
	}
	if err := c.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-compaction"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AgentRole},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: namespace, Name: name}},
	}); err != nil {
		c.t.Fatal(err)
	}
	return c.AgentToken(namespace, name)
}

// CreateMinIOPolicy creates a CompactionPolicy storing in m (bucket "agent-context", the
// given prefix) with its credentials Secret; mutate, when set, adjusts the spec.
func (c *Cluster) CreateMinIOPolicy(namespace, name, prefix string, m *testenv.MinIO, window int32, mutate func(*compactionv1alpha1.CompactionPolicySpec)) {
	c.t.Helper()
	ctx := context.Background()
	secret := builder.MinIOSecret(namespace, name+"-minio", m.AccessKey, m.SecretKey)
	if err := c.Client.Create(ctx, secret); err != nil {
		c.t.Fatal(err)
	}
	p := builder.Policy(namespace, name).Window(window).Storage(builder.MinIOStorage(m.Endpoint, "agent-context", prefix, secret.Name)).Spec(mutate).Build()
	if err := c.Client.Create(ctx, p); err != nil {
		c.t.Fatal(err)
	}
}

// CreateReadySession creates an AgentSession of the policy and waits until it is Ready.
func (c *Cluster) CreateReadySession(namespace, name, policyName string) *compactionv1alpha1.AgentSession {
	c.t.Helper()
	ctx := context.Background()
	s := builder.Session(namespace, name, policyName).Build()
	if err := c.Client.Create(ctx, s); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err == nil &&
			meta.IsStatusConditionTrue(s.Status.Conditions, compactionv1alpha1.ConditionReady) {
			return s
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("AgentSession %s/%s not Ready: %+v", namespace, name, s.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
