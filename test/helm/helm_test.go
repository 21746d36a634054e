// Package helm tests the Helm chart charts/compaction-operator: helm lint, the rendered
// manifests validated by kubeconform against the CRD and Kubernetes schemas, helm install,
// upgrade and uninstall against a real kube-apiserver (envtest), and that the parts of the
// chart generated from config/ (make helm) are up to date.
//
// helm and kubeconform come from bin/ (make tools); a missing binary fails the tests.
package helm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	v1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
)

const (
	chartRel  = "charts/compaction-operator"
	release   = "compaction-operator"
	namespace = "compaction-system"
	// With the release name compaction-operator the chart names its objects like
	// config/default does.
	prefix = "compaction-operator-"
)

// mapAPI is what `helm template` needs to be told the cluster serves for the chart to render
// the proxy injection policy (helm install finds it in the cluster's discovery).
var mapAPI = []string{"--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}

// allOptions turns on every optional part of the chart.
var allOptions = []string{"--set", "serviceMonitor.enabled=true,networkPolicy.enabled=true,defaultPolicy.enabled=true,grafanaDashboard.enabled=true"}

// tool returns bin/NAME, failing the test when it has not been built.
func tool(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(testenv.RepoRoot(t), "bin", name)
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		t.Fatalf("%s: %v; run `make tools` from the repository root to build it", name, err)
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		t.Fatalf("%s is not an executable file; run `make tools` from the repository root to build it", p)
	}
	return p
}

// helmCLI runs bin/helm with its cache, config and data directories in a temporary
// directory, so the tests neither read nor write the user's Helm setup.
type helmCLI struct {
	bin, chart string
	env        []string
}

func newHelm(t *testing.T) *helmCLI {
	t.Helper()
	home := t.TempDir()
	return &helmCLI{
		bin:   tool(t, "helm"),
		chart: filepath.Join(testenv.RepoRoot(t), chartRel),
		env: append(os.Environ(),
			"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
			"HELM_DATA_HOME="+filepath.Join(home, "data"),
			"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"), // only --kubeconfig reaches a cluster
		),
	}
}

// try runs helm with args and returns its standard output and, on failure, an error with
// its standard error.
func (h *helmCLI) try(args ...string) (string, error) {
	cmd := exec.Command(h.bin, args...)
	cmd.Env = h.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func (h *helmCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := h.try(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// offline is what rendering without a cluster (helm template, lint, --dry-run=client) must
// be told: the API server's address, which an install looks up. A later --set-json of the
// same value wins.
var offline = []string{"--set-json", `networkPolicy.egress.apiServer.cidrs=["192.0.2.10/32"]`}

// template renders the chart as the release compaction-operator in compaction-system.
func (h *helmCLI) template(t *testing.T, args ...string) []byte {
	t.Helper()
	return []byte(h.run(t, append(append([]string{"template", release, h.chart, "-n", namespace}, offline...), args...)...))
}

// decode splits a multi-document YAML stream into objects, skipping empty documents.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// find returns the object of the given kind and name, failing the test when there is none.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %q among the rendered objects: %v", kind, name, names(objs))
	return nil
}

func names(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

// typed converts u into out (a pointer to a typed API object).
func typed(t *testing.T, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("convert %s/%s: %v", u.GetKind(), u.GetName(), err)
	}
}

// readObject decodes the first document of kind in the YAML file path (relative to the
// repository root) into out.
func readObject(t *testing.T, path, kind string, out any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), path))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range decode(t, data) {
		if o.GetKind() == kind {
			typed(t, o, out)
			return
		}
	}
	t.Fatalf("no %s in %s", kind, path)
}

func TestLint(t *testing.T) {
	h := newHelm(t)
	lint := append([]string{"lint", "--strict", h.chart}, offline...)
	h.run(t, lint...)
	h.run(t, append(lint, allOptions...)...)
	h.run(t, append(lint, "--set", "replicaCount=3,api.tls.mode=Secret,api.tls.secretName=api-tls,metrics.secure=false,crds.install=false,rbac.create=false")...)
	h.run(t, append(lint, "--set", "api.tls.insecureServeHTTP=true,serviceMonitor.enabled=true")...)
}

// TestValuesDocumented checks that values.yaml documents every value: each key has a
// comment right above it; a comment starting with "# --" documents a value (a scalar, or a
// block such as resources whose keys are the value itself), any other comment a section of
// values, whose keys are documented one by one.
func TestValuesDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), chartRel, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keyRE := regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9_]*):(.*)$`)
	type frame struct {
		indent int
		value  bool // inside a documented value: nested keys need no comment of their own
	}
	var stack []frame
	var prev, comment string // the previous non-blank line; the first line of the comment above
	keys := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			prev = "" // a blank line ends a comment
			continue
		}
		if strings.HasPrefix(trimmed, "#") && !strings.HasPrefix(prev, "#") {
			comment = trimmed
		}
		if m := keyRE.FindStringSubmatch(line); m != nil {
			keys++
			indent := len(m[1])
			for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
				stack = stack[:len(stack)-1]
			}
			inValue := len(stack) > 0 && stack[len(stack)-1].value
			documented := strings.HasPrefix(prev, "#")
			isValue := documented && strings.HasPrefix(comment, "# --")
			scalar := strings.TrimSpace(m[3]) != ""
			switch {
			case inValue:
			case !documented:
				t.Errorf("values.yaml:%d: %s has no comment above it", i+1, m[2])
			case scalar && !isValue:
				t.Errorf("values.yaml:%d: the comment above %s must start with \"# --\"", i+1, m[2])
			}
			stack = append(stack, frame{indent: indent, value: inValue || isValue})
		}
		prev = trimmed
	}
	if keys < 50 {
		t.Errorf("only %d keys found in values.yaml", keys)
	}
}

// TestSyncUpToDate runs hack/helm-sync.sh into a temporary directory and compares what it
// writes with the committed chart: every generated file must be committed as it is, and
// every committed file that says it is generated must still be generated.
func TestSyncUpToDate(t *testing.T) {
	root := testenv.RepoRoot(t)
	out := t.TempDir()
	sync := func() {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join(root, "hack", "helm-sync.sh"), out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/helm-sync.sh: %v\n%s", err, b)
		}
	}
	sync()
	first := readTree(t, out)
	if len(first) == 0 {
		t.Fatal("hack/helm-sync.sh wrote nothing")
	}
	// A second run gives the same files and removes CRDs that config/ no longer has.
	stale := filepath.Join(out, "templates", "crd", "stale.yaml")
	if err := os.WriteFile(stale, []byte("kind: Stale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sync()
	if second := readTree(t, out); !equality.Semantic.DeepEqual(first, second) {
		t.Errorf("a second run of hack/helm-sync.sh changed its output")
	}

	chart := filepath.Join(root, chartRel)
	for rel, want := range first {
		got, err := os.ReadFile(filepath.Join(chart, rel))
		if err != nil {
			t.Errorf("%s/%s: %v; run `make helm` and commit the result", chartRel, rel, err)
			continue
		}
		if string(got) != want {
			t.Errorf("%s/%s is stale: run `make helm` (hack/helm-sync.sh) and commit the result", chartRel, rel)
		}
	}
	for rel, content := range readTree(t, chart) {
		if _, ok := first[rel]; ok {
			continue
		}
		// templates/crd belongs to hack/helm-sync.sh, which empties it before each run.
		if strings.HasPrefix(rel, "templates/crd/") || strings.Contains(content, "Generated by hack/helm-sync.sh") {
			t.Errorf("%s/%s is not written by hack/helm-sync.sh (any more): run `make helm` or delete it", chartRel, rel)
		}
	}
}

// readTree returns the contents of the regular files under dir by relative path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDeploymentMatchesConfig checks that the chart's default Deployment runs the manager
// exactly as config/manager/manager.yaml does: security settings, command and flags, env,
// ports, probes and resources.
func TestDeploymentMatchesConfig(t *testing.T) {
	h := newHelm(t)
	var got, want appsv1.Deployment
	typed(t, find(t, decode(t, h.template(t)), "Deployment", prefix+"controller-manager"), &got)
	readObject(t, "config/manager/manager.yaml", "Deployment", &want)

	gp, wp := got.Spec.Template.Spec, want.Spec.Template.Spec
	if len(gp.Containers) != 1 || len(wp.Containers) != 1 {
		t.Fatalf("want one container in each; chart %d, config %d", len(gp.Containers), len(wp.Containers))
	}
	gc, wc := gp.Containers[0], wp.Containers[0]
	checks := []struct {
		what      string
		got, want any
	}{
		{"pod securityContext", gp.SecurityContext, wp.SecurityContext},
		{"terminationGracePeriodSeconds", gp.TerminationGracePeriodSeconds, wp.TerminationGracePeriodSeconds},
		{"container name", gc.Name, wc.Name},
		{"container securityContext", gc.SecurityContext, wc.SecurityContext},
		{"command", gc.Command, wc.Command},
		{"args", gc.Args, wc.Args},
		{"env", gc.Env, wc.Env},
		{"ports", gc.Ports, wc.Ports},
		{"livenessProbe", gc.LivenessProbe, wc.LivenessProbe},
		{"readinessProbe", gc.ReadinessProbe, wc.ReadinessProbe},
		{"resources", gc.Resources, wc.Resources},
		{"default-container annotation", got.Spec.Template.Annotations["kubectl.kubernetes.io/default-container"], "manager"},
		{"image", gc.Image, "ghcr.io/harness9/compaction-operator:" + chartAppVersion(t)},
	}
	for _, c := range checks {
		if !equality.Semantic.DeepEqual(c.got, c.want) {
			t.Errorf("%s: chart renders %+v, config/manager/manager.yaml has %+v", c.what, c.got, c.want)
		}
	}
	if gp.ServiceAccountName != prefix+"controller-manager" {
		t.Errorf("serviceAccountName %q", gp.ServiceAccountName)
	}
	if !equality.Semantic.DeepEqual(gc.VolumeMounts, wc.VolumeMounts) {
		t.Errorf("volumeMounts: chart %+v, config/manager/manager.yaml %+v", gc.VolumeMounts, wc.VolumeMounts)
	}

	// The configuration files are the same, but for the Lease's namespace: the chart names the
	// release's, config/manager leaves it to the manager (the namespace the pod runs in).
	_, gotCfg := managerConfig(t, h)
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "config", "manager", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wantCfg, err := configv1alpha1.Decode(data)
	if err != nil {
		t.Fatalf("config/manager/config.yaml: %v", err)
	}
	wantCfg.LeaderElection.ResourceNamespace = namespace
	if !equality.Semantic.DeepEqual(gotCfg, wantCfg) {
		t.Errorf("configuration: chart renders %+v, config/manager/config.yaml has %+v", gotCfg, wantCfg)
	}
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), chartRel, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion %q: %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// managerDeployment renders the chart with args and returns the manager's Deployment.
func managerDeployment(t *testing.T, h *helmCLI, args ...string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	typed(t, find(t, decode(t, h.template(t, args...)), "Deployment", prefix+"controller-manager"), &d)
	return &d
}

// managerConfig renders the chart with args and returns the manager's configuration file
// as the manager reads it (strictly, defaulted and validated), and the Deployment, which
// must mount it where its --config points.
func managerConfig(t *testing.T, h *helmCLI, args ...string) (*appsv1.Deployment, *configv1alpha1.Configuration) {
	t.Helper()
	objs := decode(t, h.template(t, args...))
	var d appsv1.Deployment
	var cm corev1.ConfigMap
	typed(t, find(t, objs, "Deployment", prefix+"controller-manager"), &d)
	typed(t, find(t, objs, "ConfigMap", prefix+"manager-config"), &cm)
	c, err := configv1alpha1.Decode([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the manager rejects the rendered configuration: %v\n%s", err, cm.Data["config.yaml"])
	}
	pod := d.Spec.Template.Spec
	if !slices.Contains(pod.Containers[0].Args, "--config="+configPath) || !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
		return v.Name == "config" && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name
	}) || !slices.ContainsFunc(pod.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "config" && m.MountPath == filepath.Dir(configPath) && m.ReadOnly
	}) {
		t.Errorf("the Deployment does not mount %s at %s: args %q, volumes %+v", cm.Name, configPath, pod.Containers[0].Args, pod.Volumes)
	}
	return &d, c
}

// configPath is where the Deployment mounts the manager's configuration file.
const configPath = "/etc/compaction-operator/config/config.yaml"

// TestValues checks what the main values change in the rendered manifests.
func TestValues(t *testing.T) {
	h := newHelm(t)
	t.Run("LeaderElection", func(t *testing.T) { testLeaderElection(t, h) })
	t.Run("APITLS", func(t *testing.T) { testAPITLS(t, h) })
	t.Run("ManagerFlags", func(t *testing.T) { testManagerFlags(t, h) })
	t.Run("MemoryLimit", func(t *testing.T) { testMemoryLimit(t, h) })
	t.Run("Image", func(t *testing.T) { testImage(t, h) })
	t.Run("CRDs", func(t *testing.T) { testCRDs(t, h) })
	t.Run("RBACOff", func(t *testing.T) { testRBACOff(t, h) })
	t.Run("ServiceMonitor", func(t *testing.T) { testServiceMonitor(t, h) })
	t.Run("NetworkPolicy", func(t *testing.T) { testNetworkPolicy(t, h) })
	t.Run("GrafanaDashboard", func(t *testing.T) { testDashboard(t, h) })
	t.Run("LongReleaseName", func(t *testing.T) { testLongReleaseName(t, h) })
	t.Run("AdmissionPolicy", func(t *testing.T) { testAdmissionPolicy(t, h) })
	t.Run("ProxyInjection", func(t *testing.T) { testProxyInjection(t, h) })
	t.Run("SessionLocationRole", func(t *testing.T) { testSessionLocationRole(t, h) })
}

// testLongReleaseName checks that every name and label value stays within 63 characters
// (the limit of Service names and label values) whatever the release is called, and that
// the objects still find each other.
func testLongReleaseName(t *testing.T, h *helmCLI) {
	name := "platform-team-ai-agents-context-compaction-production" // 53, the longest Helm allows
	objs := decode(t, []byte(h.run(t, append(append([]string{"template", name, h.chart, "-n", namespace}, offline...), allOptions...)...)))
	var deployment appsv1.Deployment
	for _, o := range objs {
		if n := o.GetName(); len(n) > 63 {
			t.Errorf("%s name %q is %d characters long", o.GetKind(), n, len(n))
		}
		for k, v := range o.GetLabels() {
			if len(v) > 63 {
				t.Errorf("%s %s label %s=%q is %d characters long", o.GetKind(), o.GetName(), k, v, len(v))
			}
		}
		if o.GetKind() == "Deployment" {
			typed(t, o, &deployment)
		}
	}
	sa := deployment.Spec.Template.Spec.ServiceAccountName
	var crb rbacv1.ClusterRoleBinding
	for _, o := range objs {
		if o.GetKind() == "ClusterRoleBinding" {
			typed(t, o, &crb)
		}
	}
	if len(crb.Subjects) != 1 || crb.Subjects[0].Name != sa || sa == "" {
		t.Errorf("ClusterRoleBinding subjects %+v, Deployment's ServiceAccount %q", crb.Subjects, sa)
	}
	find(t, objs, "ClusterRole", crb.RoleRef.Name)
	find(t, objs, "ServiceAccount", sa)
}

// testAdmissionPolicy checks that the chart's ValidatingAdmissionPolicy on AgentSession status
// is config/default's (kustomize, as kubectl applies it) with the release's ServiceAccount,
// that it follows serviceAccount.name, and that admissionPolicy.enabled=false leaves it out.
func testAdmissionPolicy(t *testing.T, h *helmCLI) {
	out, err := exec.Command(tool(t, "kubectl"), "kustomize", filepath.Join(testenv.RepoRoot(t), "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	config := decode(t, out)
	chart := decode(t, h.template(t))
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		want := find(t, config, kind, prefix+"agentsession-status")
		got := find(t, chart, kind, prefix+"agentsession-status")
		if got.GetNamespace() != "" || want.GetNamespace() != "" {
			t.Errorf("%s is cluster-scoped; chart namespace %q, config/default %q", kind, got.GetNamespace(), want.GetNamespace())
		}
		if !equality.Semantic.DeepEqual(got.Object["spec"], want.Object["spec"]) {
			t.Errorf("%s spec: chart renders\n%v\nconfig/default has\n%v", kind, got.Object["spec"], want.Object["spec"])
		}
	}
	vap := find(t, chart, "ValidatingAdmissionPolicy", prefix+"agentsession-status")
	vars, _, _ := unstructured.NestedSlice(vap.Object, "spec", "variables")
	if len(vars) != 1 || !strings.Contains(fmt.Sprint(vars[0]), "'"+namespace+"' + ':' + '"+prefix+"controller-manager'") {
		t.Errorf("the policy's operator is %v, want the ServiceAccount %s/%scontroller-manager", vars, namespace, prefix)
	}

	custom := find(t, decode(t, h.template(t, "--set", "serviceAccount.create=false,serviceAccount.name=platform-operator")),
		"ValidatingAdmissionPolicy", prefix+"agentsession-status")
	vars, _, _ = unstructured.NestedSlice(custom.Object, "spec", "variables")
	if len(vars) != 1 || !strings.Contains(fmt.Sprint(vars[0]), "':' + 'platform-operator'") {
		t.Errorf("serviceAccount.name=platform-operator: the policy's operator is %v", vars)
	}
	for _, o := range decode(t, h.template(t, "--set", "admissionPolicy.enabled=false")) {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			t.Errorf("admissionPolicy.enabled=false renders %s/%s", o.GetKind(), o.GetName())
		}
	}
}

// testProxyInjection checks that the chart's proxy injection policy is config/default's
// (kustomize, as kubectl applies it) when the image is the same, that it follows the values
// it names, and that it is left out where the cluster has no MutatingAdmissionPolicy API,
// with proxyInjection.enabled=false and with a plain HTTP API.
func testProxyInjection(t *testing.T, h *helmCLI) {
	out, err := exec.Command(tool(t, "kubectl"), "kustomize", filepath.Join(testenv.RepoRoot(t), "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	config := decode(t, out)
	chart := decode(t, h.template(t, append(mapAPI, "--set", "image.tag=latest")...))
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		want := find(t, config, kind, prefix+"proxy-injection")
		got := find(t, chart, kind, prefix+"proxy-injection")
		if got.GetNamespace() != "" || want.GetNamespace() != "" {
			t.Errorf("%s is cluster-scoped; chart namespace %q, config/default %q", kind, got.GetNamespace(), want.GetNamespace())
		}
		if !equality.Semantic.DeepEqual(got.Object["spec"], want.Object["spec"]) {
			t.Errorf("%s spec: chart renders\n%v\nconfig/default has\n%v", kind, got.Object["spec"], want.Object["spec"])
		}
	}

	variables := func(objs []*unstructured.Unstructured, fullname string) map[string]string {
		t.Helper()
		m := find(t, objs, "MutatingAdmissionPolicy", fullname+"-proxy-injection")
		vars, _, _ := unstructured.NestedSlice(m.Object, "spec", "variables")
		out := map[string]string{}
		for _, v := range vars {
			v := v.(map[string]any)
			out[v["name"].(string)] = v["expression"].(string)
		}
		return out
	}
	def := variables(decode(t, h.template(t, mapAPI...)), release)
	if got, want := def["image"], "'ghcr.io/harness9/compaction-operator:"+chartAppVersion(t)+"'"; got != want {
		t.Errorf("default image %s, want the manager's %s", got, want)
	}
	custom := variables(decode(t, h.template(t, append(mapAPI, "--set",
		"proxyInjection.image=registry.example/proxy:1,api.tokenAudience=agents.example,service.apiPort=9443,fullnameOverride=co",
		"--set-json", `proxyInjection.resources={"requests":{"memory":"64Mi","cpu":"50m"},"limits":{"memory":null}}`)...)), "co")
	for name, want := range map[string]string{
		"image":       "'registry.example/proxy:1'",
		"server":      "'https://' + 'co-api' + '.' + '" + namespace + "' + '.svc:9443'",
		"audience":    "'agents.example'",
		"caConfigMap": "'co-api-ca'",
		"requests":    "{'cpu': '50m', 'memory': '64Mi'}",
		"limits":      "{}",
	} {
		if custom[name] != want {
			t.Errorf("variable %s: %s, want %s", name, custom[name], want)
		}
	}

	for what, args := range map[string][]string{
		"no MutatingAdmissionPolicy API": nil,
		"proxyInjection.enabled=false":   append(mapAPI, "--set", "proxyInjection.enabled=false"),
		"api.tls.insecureServeHTTP=true": append(mapAPI, "--set", "api.tls.insecureServeHTTP=true"),
	} {
		for _, o := range decode(t, h.template(t, args...)) {
			if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") {
				t.Errorf("%s: the chart renders %s/%s", what, o.GetKind(), o.GetName())
			}
		}
	}
}

// testSessionLocationRole checks that the Role for the pinned session locations and its
// binding go into the cluster resource namespace, which manager.clusterResourceNamespace
// moves, and bind the manager's ServiceAccount.
func testSessionLocationRole(t *testing.T, h *helmCLI) {
	for _, c := range []struct{ set, want string }{{"", namespace}, {"manager.clusterResourceNamespace=vault", "vault"}} {
		args := []string{}
		if c.set != "" {
			args = []string{"--set", c.set}
		}
		objs := decode(t, h.template(t, args...))
		role := find(t, objs, "Role", prefix+"session-location-role")
		var rb rbacv1.RoleBinding
		typed(t, find(t, objs, "RoleBinding", prefix+"session-location-rolebinding"), &rb)
		if role.GetNamespace() != c.want || rb.Namespace != c.want {
			t.Errorf("%q: Role in %q, RoleBinding in %q, want both in %q", c.set, role.GetNamespace(), rb.Namespace, c.want)
		}
		if rb.RoleRef.Name != role.GetName() || len(rb.Subjects) != 1 ||
			rb.Subjects[0].Name != prefix+"controller-manager" || rb.Subjects[0].Namespace != namespace {
			t.Errorf("%q: RoleBinding %+v %+v", c.set, rb.RoleRef, rb.Subjects)
		}
	}
}

func testLeaderElection(t *testing.T, h *helmCLI) {
	for _, c := range []struct {
		replicas int32
		enabled  bool
		want     bool
	}{
		{1, true, true},
		{1, false, false},
		{2, false, true},
	} {
		set := fmt.Sprintf("replicaCount=%d,leaderElection.enabled=%v", c.replicas, c.enabled)
		d, cfg := managerConfig(t, h, "--set", set)
		if got := cfg.LeaderElection.LeaderElect; got != c.want || cfg.LeaderElection.ResourceNamespace != namespace {
			t.Errorf("%s: leaderElection %+v, want leaderElect %v in %s", set, cfg.LeaderElection, c.want, namespace)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != c.replicas {
			t.Errorf("%s: replicas %v", set, d.Spec.Replicas)
		}
	}
}

// certDir is api.tls.certDir in the CertManager and Secret modes.
const certDir = "/etc/compaction-operator/api-tls"

func testAPITLS(t *testing.T, h *helmCLI) {
	t.Run("SelfSigned", func(t *testing.T) { testTLSSelfSigned(t, h) })
	t.Run("Secret", func(t *testing.T) { testTLSSecret(t, h) })
	t.Run("CertManager", func(t *testing.T) { testTLSCertManager(t, h) })
	t.Run("InsecureServeHTTP", func(t *testing.T) {
		_, cfg := managerConfig(t, h, "--set", "api.tls.insecureServeHTTP=true")
		if !cfg.API.TLS.InsecureServeHTTP {
			t.Errorf("api.tls %+v, want insecureServeHTTP", cfg.API.TLS)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		for set, says := range map[string]string{
			"api.tls.enabled=true": "replaced by api.tls.mode",
			"api.tls.mode=Plain":   `api.tls.mode "Plain"`,
		} {
			if _, err := h.try(append(append([]string{"template", release, h.chart}, offline...), "--set", set)...); err == nil || !strings.Contains(err.Error(), says) {
				t.Errorf("%s: %v, want an error saying %q", set, err, says)
			}
		}
	})
}

// mountedTLS checks that the Deployment mounts secret at the cert dir.
func mountedTLS(t *testing.T, d *appsv1.Deployment, secret string) {
	t.Helper()
	pod := d.Spec.Template.Spec
	if len(pod.Volumes) != 2 || pod.Volumes[1].Secret == nil || pod.Volumes[1].Secret.SecretName != secret {
		t.Errorf("volumes %+v, want the configuration and Secret %s", pod.Volumes, secret)
	}
	m := pod.Containers[0].VolumeMounts
	if len(m) != 2 || m[1].MountPath != certDir || !m[1].ReadOnly {
		t.Errorf("volumeMounts %+v", m)
	}
}

func testTLSSelfSigned(t *testing.T, h *helmCLI) {
	objs := decode(t, h.template(t))
	d, cfg := managerConfig(t, h)
	tls := cfg.API.TLS
	if tls.SecretName != prefix+"api-cert" || tls.CAConfigMap != prefix+"api-ca" || tls.ServiceName != prefix+"api" ||
		cfg.Metrics.ServiceName != prefix+"controller-manager-metrics-service" || tls.Namespace != namespace {
		t.Errorf("api.tls %+v, metrics.serviceName %s: want the release's names", tls, cfg.Metrics.ServiceName)
	}
	if tls.CertDir != "" || tls.InsecureServeHTTP || len(d.Spec.Template.Spec.Volumes) != 1 {
		t.Errorf("SelfSigned mounts a certificate or serves HTTP: api.tls %+v, volumes %+v", tls, d.Spec.Template.Spec.Volumes)
	}
	// The manager may read and write only its Secret and ConfigMap; every ServiceAccount
	// may read the ConfigMap.
	var role, reader rbacv1.Role
	typed(t, find(t, objs, "Role", prefix+"api-cert-role"), &role)
	typed(t, find(t, objs, "Role", prefix+"api-ca-reader"), &reader)
	var want, wantReader rbacv1.Role
	readObject(t, "config/rbac/api_cert_role.yaml", "Role", &want)
	readObject(t, "config/rbac/api_ca_reader_role.yaml", "Role", &wantReader)
	if !equality.Semantic.DeepEqual(role.Rules, want.Rules) || !equality.Semantic.DeepEqual(reader.Rules, wantReader.Rules) {
		t.Errorf("roles %+v and %+v, config/rbac has %+v and %+v", role.Rules, reader.Rules, want.Rules, wantReader.Rules)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Verbs, "list") || slices.Contains(r.Verbs, "watch") || (slices.Contains(r.Resources, "secrets") && slices.Contains(r.Verbs, "get") && len(r.ResourceNames) == 0) {
			t.Errorf("the certificate Role grants more than its objects: %+v", r)
		}
	}
	var rb rbacv1.RoleBinding
	typed(t, find(t, objs, "RoleBinding", prefix+"api-ca-reader-rolebinding"), &rb)
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "Group" || rb.Subjects[0].Name != "system:serviceaccounts" {
		t.Errorf("CA reader binding subjects %+v", rb.Subjects)
	}
}

func testTLSSecret(t *testing.T, h *helmCLI) {
	d, cfg := managerConfig(t, h, "--set", "api.tls.mode=Secret,api.tls.secretName=api-tls")
	if cfg.API.TLS.CertDir != certDir || cfg.API.TLS.CAConfigMap != prefix+"api-ca" {
		t.Errorf("api.tls %+v, want certDir %s and the CA ConfigMap", cfg.API.TLS, certDir)
	}
	mountedTLS(t, d, "api-tls")
	if _, err := h.try(append(append([]string{"template", release, h.chart}, offline...), "--set", "api.tls.mode=Secret")...); err == nil ||
		!strings.Contains(err.Error(), "api.tls.secretName is required") {
		t.Errorf("Secret mode without secretName: %v", err)
	}
}

func testTLSCertManager(t *testing.T, h *helmCLI) {
	if _, err := h.try(append(append([]string{"template", release, h.chart}, offline...), "--set", "api.tls.mode=CertManager")...); err == nil ||
		!strings.Contains(err.Error(), "needs cert-manager") {
		t.Errorf("CertManager mode without cert-manager's API: %v, want a clear failure", err)
	}
	objs := decode(t, h.template(t, "--api-versions", "cert-manager.io/v1", "--set", "api.tls.mode=CertManager"))
	d, cfg := managerConfig(t, h, "--api-versions", "cert-manager.io/v1", "--set", "api.tls.mode=CertManager")
	if cfg.API.TLS.CertDir != certDir {
		t.Errorf("api.tls.certDir %q, want %s", cfg.API.TLS.CertDir, certDir)
	}
	mountedTLS(t, d, prefix+"api-tls")
	cert := find(t, objs, "Certificate", prefix+"api")
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
	if secret != prefix+"api-tls" || !slices.Contains(dns, prefix+"api."+namespace+".svc") ||
		!slices.Contains(dns, prefix+"controller-manager-metrics-service."+namespace+".svc") || issuer["name"] != prefix+"ca" {
		t.Errorf("Certificate secret %s, dnsNames %q, issuer %v", secret, dns, issuer)
	}
	find(t, objs, "Issuer", prefix+"ca")
	find(t, objs, "Issuer", prefix+"selfsigned")
	// An issuer of the user's replaces the chart's CA.
	objs = decode(t, h.template(t, "--api-versions", "cert-manager.io/v1", "--set", "api.tls.mode=CertManager",
		"--set-json", `api.tls.certManager.issuerRef={"kind":"ClusterIssuer","name":"corp-ca"}`))
	issuer, _, _ = unstructured.NestedStringMap(find(t, objs, "Certificate", prefix+"api").Object, "spec", "issuerRef")
	if issuer["kind"] != "ClusterIssuer" || issuer["name"] != "corp-ca" {
		t.Errorf("issuerRef %v, want the ClusterIssuer corp-ca", issuer)
	}
	for _, o := range objs {
		if o.GetKind() == "Issuer" {
			t.Errorf("Issuer %s rendered with an issuerRef given", o.GetName())
		}
	}
}

// TestNotes checks that NOTES.txt prints the scheme the API really serves and where agents
// find its CA. (helm install --dry-run cannot pretend cert-manager's API is there, so the
// CertManager mode's notes, which differ by one line, are not rendered here.)
func TestNotes(t *testing.T) {
	h := newHelm(t)
	notes := func(args ...string) string {
		t.Helper()
		out := h.run(t, append(append([]string{"install", release, h.chart, "-n", namespace, "--dry-run=client"}, offline...), args...)...)
		_, n, ok := strings.Cut(out, "NOTES:")
		if !ok {
			t.Fatalf("no NOTES in:\n%s", out)
		}
		return n
	}
	api := prefix + "api." + namespace + ".svc:8082"
	for name, c := range map[string]struct {
		args       []string
		want, lack []string
	}{
		"SelfSigned": {nil, []string{"https://" + api, "ConfigMap " + prefix + "api-ca", "--ca-file ca.crt", "ca\\.crt",
			"compaction-proxy is not injected into agent pods"}, []string{"http://" + api}},
		"Secret":      {[]string{"--set", "api.tls.mode=Secret,api.tls.secretName=mine"}, []string{"https://" + api, "Secret mine", "your Secret has a ca.crt"}, []string{"http://" + api}},
		"Insecure":    {[]string{"--set", "api.tls.insecureServeHTTP=true"}, []string{"http://" + api, "WARNING", "and the compaction API over HTTPS"}, []string{"https://" + api, "--ca-file"}},
		"NoInjection": {[]string{"--set", "proxyInjection.enabled=false"}, nil, []string{"compaction-proxy"}},
		// An egress rule that admits any address on the API server's ports: say so.
		"OpenEgress":     {[]string{"--set-json", `networkPolicy.egress.apiServer.cidrs=["0.0.0.0/0","::/0"]`}, []string{"WARNING: the manager's egress NetworkPolicy admits every address on ports\n443, 6443", "0.0.0.0/0, ::/0", "kubernetes.io/service-name=kubernetes"}, nil},
		"APIServerSet":   {[]string{"--set-json", `networkPolicy.egress.apiServer.cidrs=["10.0.0.1/32"]`}, nil, []string{"egress NetworkPolicy admits every address"}},
		"NoEgressPolicy": {[]string{"--set", "networkPolicy.egress.enabled=false"}, nil, []string{"egress NetworkPolicy admits every address"}},
	} {
		n := notes(c.args...)
		for _, w := range c.want {
			if !strings.Contains(n, w) {
				t.Errorf("%s: NOTES lack %q:\n%s", name, w, n)
			}
		}
		for _, l := range c.lack {
			if strings.Contains(n, l) {
				t.Errorf("%s: NOTES contain %q:\n%s", name, l, n)
			}
		}
	}
}

func testManagerFlags(t *testing.T, h *helmCLI) {
	set := []string{"--set", "metrics.secure=false,manager.logLevel=debug,manager.clusterResourceNamespace=secrets,api.tokenAudience=agents.example.com",
		"--set-json", `manager.extraArgs=["--zap-encoder=console"]`,
		"--set-json", `manager.config={"api":{"requestTimeout":"90s","summariesOffTurn":false},"controllers":{"sessionWorkers":8}}`,
		"--set-json", `manager.clusterPolicySecretNamespaces=["shared","vault"]`,
		"--set-json", `manager.allowedEndpoints=["minio.minio.svc:9000","*.amazonaws.com","10.0.0.0/8"]`,
		"--set-json", `manager.namespacedPolicyEndpoints=["minio.minio.svc:9000","10.1.0.0/16"]`}
	d, cfg := managerConfig(t, h, set...)
	args := d.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--zap-log-level=debug", "--zap-encoder=console"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"egress.namespacedPolicyEndpoints", cfg.Egress.NamespacedPolicyEndpoints, []string{"minio.minio.svc:9000", "10.1.0.0/16"}},
		{"egress.allowedEndpoints", cfg.Egress.AllowedEndpoints, []string{"minio.minio.svc:9000", "*.amazonaws.com", "10.0.0.0/8"}},
		{"secrets.clusterPolicyNamespaces", cfg.Secrets.ClusterPolicyNamespaces, []string{"shared", "vault"}},
		{"metrics.secure", *cfg.Metrics.Secure, false},
		{"clusterResourceNamespace", cfg.ClusterResourceNamespace, "secrets"},
		{"api.tokenAudience", cfg.API.TokenAudience, "agents.example.com"},
		{"api.requestTimeout (manager.config)", cfg.API.RequestTimeout.Duration, 90 * time.Second},
		{"api.summariesOffTurn (manager.config)", *cfg.API.SummariesOffTurn, false},
		{"controllers.sessionWorkers (manager.config)", cfg.Controllers.SessionWorkers, int32(8)},
	}
	for _, c := range checks {
		if !equality.Semantic.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// By default none is set: every endpoint for cluster policies, none for namespaced ones
	// (the manager's default), and only the operator's namespace's Secrets.
	_, cfg = managerConfig(t, h)
	if cfg.Egress.AllowedEndpoints != nil || cfg.Egress.NamespacedPolicyEndpoints != nil || cfg.Secrets.ClusterPolicyNamespaces != nil {
		t.Errorf("the defaults render egress %+v, secrets %+v", cfg.Egress, cfg.Secrets)
	}
	// A field the manager does not know stops the install at start: the test sees what the
	// manager would say.
	var cm corev1.ConfigMap
	typed(t, find(t, decode(t, h.template(t, "--set-json", `manager.config={"api":{"requestTimout":"90s"}}`)), "ConfigMap", prefix+"manager-config"), &cm)
	if _, err := configv1alpha1.Decode([]byte(cm.Data["config.yaml"])); err == nil || !strings.Contains(err.Error(), `unknown field "api.requestTimout"`) {
		t.Errorf("a misspelt manager.config field: %v, want the manager to name it", err)
	}
}

// testMemoryLimit checks GOMEMLIMIT, which the chart computes from the container's memory
// limit, and the API limits sized with it.
func testMemoryLimit(t *testing.T, h *helmCLI) {
	goMemLimit := func(args ...string) (string, bool) {
		t.Helper()
		d := managerDeployment(t, h, args...)
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "GOMEMLIMIT" {
				return e.Value, true
			}
		}
		return "", false
	}
	for _, c := range []struct {
		set  []string
		want string // "": no GOMEMLIMIT
	}{
		{nil, "483183820"}, // 90% of 512Mi
		{[]string{"--set", "resources.limits.memory=1Gi"}, "966367641"},
		{[]string{"--set", "resources.limits.memory=500M"}, "450000000"},
		{[]string{"--set", "resources.limits.memory=0.5Gi"}, "483183820"},
		{[]string{"--set-string", "resources.limits.memory=536870912"}, "483183820"},
		{[]string{"--set", "resources.limits.memory=2Gi,manager.memoryLimitPercent=75"}, "1610612736"},
		{[]string{"--set", "manager.memoryLimitPercent=0"}, ""},
		{[]string{"--set", "resources.limits=null"}, ""},
	} {
		got, ok := goMemLimit(c.set...)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%q: GOMEMLIMIT %q (set %v), want %q", c.set, got, ok, c.want)
		}
	}
	// Quantities GOMEMLIMIT cannot be computed from, or a percentage over 100, are refused.
	for _, set := range [][]string{{"--set", "resources.limits.memory=300m"}, {"--set-string", "resources.limits.memory=1e9"}, {"--set", "manager.memoryLimitPercent=101"}} {
		if _, err := h.try(append([]string{"template", release, h.chart}, set...)...); err == nil {
			t.Errorf("%q: rendered", set)
		}
	}
	// A GOMEMLIMIT of the user's wins, and is the only one.
	d := managerDeployment(t, h, "--set-json", `manager.extraEnv=[{"name":"GOMEMLIMIT","value":"300MiB"}]`)
	var values []string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "GOMEMLIMIT" {
			values = append(values, e.Value)
		}
	}
	if !slices.Equal(values, []string{"300MiB"}) {
		t.Errorf("GOMEMLIMIT in extraEnv: the container has GOMEMLIMIT %q, want only the user's", values)
	}

	_, cfg := managerConfig(t, h, "--set", "api.maxBodyBytes=16777216,api.maxInflightBytes=134217728")
	if cfg.API.MaxBodyBytes != 16777216 || cfg.API.MaxInflightBytes != 134217728 {
		t.Errorf("api.maxBodyBytes %d, api.maxInflightBytes %d", cfg.API.MaxBodyBytes, cfg.API.MaxInflightBytes)
	}
	if _, cfg := managerConfig(t, h); cfg.API.MaxBodyBytes != configv1alpha1.DefaultMaxBodyBytes || cfg.API.MaxInflightBytes != configv1alpha1.DefaultMaxInflightBytes {
		t.Errorf("the defaults render API limits: %d, %d", cfg.API.MaxBodyBytes, cfg.API.MaxInflightBytes)
	}
}

func testImage(t *testing.T, h *helmCLI) {
	d := managerDeployment(t, h, "--set", "image.tag=v9.9.9")
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/harness9/compaction-operator:v9.9.9" {
		t.Errorf("image %q", got)
	}
	d = managerDeployment(t, h, "--set", "image.digest=sha256:0123")
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/harness9/compaction-operator@sha256:0123" {
		t.Errorf("image %q", got)
	}
}

func testCRDs(t *testing.T, h *helmCLI) {
	count := func(objs []*unstructured.Unstructured, keep bool) int {
		n := 0
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			n++
			if got := o.GetAnnotations()["helm.sh/resource-policy"] == "keep"; got != keep {
				t.Errorf("%s: resource-policy keep %v, want %v", o.GetName(), got, keep)
			}
			if o.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
				t.Errorf("%s: labels %v", o.GetName(), o.GetLabels())
			}
		}
		return n
	}
	if n := count(decode(t, h.template(t)), true); n != 3 {
		t.Errorf("%d CRDs rendered, want 3", n)
	}
	if n := count(decode(t, h.template(t, "--set", "crds.keep=false")), false); n != 3 {
		t.Errorf("%d CRDs rendered, want 3", n)
	}
	if n := count(decode(t, h.template(t, "--set", "crds.install=false")), true); n != 0 {
		t.Errorf("crds.install=false: %d CRDs rendered", n)
	}
}

func testRBACOff(t *testing.T, h *helmCLI) {
	for _, o := range decode(t, h.template(t, "--set", "rbac.create=false")) {
		if o.GetAPIVersion() == rbacv1.SchemeGroupVersion.String() {
			t.Errorf("rbac.create=false renders %s/%s", o.GetKind(), o.GetName())
		}
	}
}

func testServiceMonitor(t *testing.T, h *helmCLI) {
	sm := find(t, decode(t, h.template(t, "--set", "serviceMonitor.enabled=true,metrics.secure=false")), "ServiceMonitor", prefix+"controller-manager-metrics-monitor")
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["scheme"] != "http" || eps[0].(map[string]any)["tlsConfig"] != nil {
		t.Errorf("metrics.secure=false: endpoints %v", eps)
	}
	// With HTTPS the scrape verifies the certificate: the published CA and the metrics
	// Service's name, never insecureSkipVerify (but with a plain HTTP API, whose metrics
	// certificate nothing signs).
	tlsConfig := func(args ...string) map[string]any {
		t.Helper()
		sm := find(t, decode(t, h.template(t, args...)), "ServiceMonitor", prefix+"controller-manager-metrics-monitor")
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Fatalf("endpoints %v", eps)
		}
		c, _ := eps[0].(map[string]any)["tlsConfig"].(map[string]any)
		return c
	}
	verified := map[string]any{
		"serverName": prefix + "controller-manager-metrics-service." + namespace + ".svc",
		"ca":         map[string]any{"configMap": map[string]any{"name": prefix + "api-ca", "key": "ca.crt"}},
	}
	for _, args := range [][]string{
		{"--set", "serviceMonitor.enabled=true"},
		{"--api-versions", "cert-manager.io/v1", "--set", "serviceMonitor.enabled=true,api.tls.mode=CertManager"},
		{"--set", "serviceMonitor.enabled=true,api.tls.mode=Secret,api.tls.secretName=mine"},
	} {
		if c := tlsConfig(args...); !equality.Semantic.DeepEqual(c, verified) {
			t.Errorf("%q: tlsConfig %v, want %v", args, c, verified)
		}
	}
	if c := tlsConfig("--set", "serviceMonitor.enabled=true,api.tls.insecureServeHTTP=true"); c["insecureSkipVerify"] != true {
		t.Errorf("insecureServeHTTP: tlsConfig %v", c)
	}
	override := tlsConfig("--set", "serviceMonitor.enabled=true", "--set-json", `serviceMonitor.tlsConfig={"serverName":"x","ca":{"secret":{"name":"s","key":"ca.crt"}}}`)
	if override["serverName"] != "x" || override["insecureSkipVerify"] != nil {
		t.Errorf("serviceMonitor.tlsConfig override: %v", override)
	}
	// The ServiceMonitor selects the metrics Service and no other.
	objs := decode(t, h.template(t, "--set", "serviceMonitor.enabled=true"))
	sm = find(t, objs, "ServiceMonitor", prefix+"controller-manager-metrics-monitor")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	var selected []string
	for _, o := range objs {
		if o.GetKind() == "Service" && matches(sel, o.GetLabels()) {
			selected = append(selected, o.GetName())
		}
	}
	if want := []string{prefix + "controller-manager-metrics-service"}; !slices.Equal(selected, want) {
		t.Errorf("ServiceMonitor selects Services %q, want %q", selected, want)
	}
}

// testNetworkPolicy: issue 14. By default the chart admits the compaction API only from
// namespaces labelled for agents, and lets the manager connect only to DNS, the API server
// and the destinations of networkPolicy.egress.to.
func testNetworkPolicy(t *testing.T, h *helmCLI) {
	t.Run("Defaults", func(t *testing.T) { testNetworkPolicyDefaults(t, h) })
	t.Run("Overrides", func(t *testing.T) { testNetworkPolicyOverrides(t, h) })
}

// networkPolicies renders the chart with args and returns its ingress and egress policies.
func networkPolicies(t *testing.T, h *helmCLI, args ...string) (ingress, egress *networkingv1.NetworkPolicy) {
	t.Helper()
	for _, o := range decode(t, h.template(t, args...)) {
		if o.GetKind() != "NetworkPolicy" {
			continue
		}
		var np networkingv1.NetworkPolicy
		typed(t, o, &np)
		switch np.Name {
		case prefix + "controller-manager":
			ingress = &np
		case prefix + "controller-manager-egress":
			egress = &np
		default:
			t.Errorf("unexpected NetworkPolicy %s", np.Name)
		}
	}
	return ingress, egress
}

func testNetworkPolicyDefaults(t *testing.T, h *helmCLI) {
	np, eg := networkPolicies(t, h)
	if np == nil || eg == nil {
		t.Fatalf("default values: ingress policy %v, egress policy %v; want both", np != nil, eg != nil)
	}
	ports := map[int32]networkingv1.NetworkPolicyIngressRule{}
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			ports[p.Port.IntVal] = r
		}
	}
	if len(ports) != 3 {
		t.Fatalf("ingress ports %v, want 8082, 8443 and 8081", ports)
	}
	if from := ports[8082].From; len(from) != 1 || from[0].NamespaceSelector == nil ||
		!equality.Semantic.DeepEqual(from[0].NamespaceSelector.MatchLabels, map[string]string{"compaction.harness9.io/agents": "true"}) {
		t.Errorf("8082 from %+v, want the namespaces labelled compaction.harness9.io/agents=true", from)
	}
	if from := ports[8443].From; len(from) != 1 || from[0].NamespaceSelector == nil ||
		from[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("8443 from %+v, want the monitoring namespace", from)
	}
	if _, ok := ports[8081]; !ok {
		t.Error("no rule for the probe port 8081")
	}

	// Egress: DNS and the API server, nothing else by default.
	if !slices.Equal(eg.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(eg.Spec.Egress) != 2 {
		t.Fatalf("egress policy types %v, %d rules; want Egress with DNS and the API server", eg.Spec.PolicyTypes, len(eg.Spec.Egress))
	}
	dns, apiServer := eg.Spec.Egress[0], eg.Spec.Egress[1]
	if len(dns.Ports) != 2 || dns.Ports[0].Port.IntVal != 53 || len(dns.To) != 1 || dns.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("DNS rule %+v", dns)
	}
	apiPorts := make([]int32, 0, len(apiServer.Ports))
	for _, p := range apiServer.Ports {
		apiPorts = append(apiPorts, p.Port.IntVal)
	}
	if !slices.Equal(apiPorts, []int32{443, 6443}) || len(apiServer.To) != 1 || apiServer.To[0].IPBlock == nil || apiServer.To[0].IPBlock.CIDR != "192.0.2.10/32" {
		t.Errorf("API server rule %+v", apiServer)
	}

	// Issue 28: no API server address and no cluster to look it up in is an error that says
	// what to set, never a rule admitting every address.
	for _, cmd := range [][]string{{"template", release, h.chart, "-n", namespace}, {"install", release, h.chart, "-n", namespace, "--dry-run=client"}} {
		out, err := h.try(cmd...)
		if err == nil || !strings.Contains(err.Error(), "networkPolicy.egress.apiServer.cidrs is empty") || !strings.Contains(err.Error(), "kubernetes.io/service-name=kubernetes") {
			t.Errorf("helm %s without the API server's address: %v\n%s", cmd[0], err, out)
		}
	}
	if _, err := h.try("template", release, h.chart, "-n", namespace, "--set", "networkPolicy.egress.enabled=false"); err != nil {
		t.Errorf("without the egress policy no address is needed: %v", err)
	}
}

func testNetworkPolicyOverrides(t *testing.T, h *helmCLI) {
	// Another agents' label, the API server's real address, S3 and an LLM.
	np, eg := networkPolicies(t, h, "--set-json", `networkPolicy.api.namespaceSelector={"matchLabels":{"team":"agents"}}`,
		"--set-json", `networkPolicy.egress.apiServer={"cidrs":["172.20.0.10/32"],"ports":[6443]}`,
		"--set-json", `networkPolicy.egress.to=[{"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"minio"}}}],"ports":[{"port":9000,"protocol":"TCP"}]},{"to":[{"ipBlock":{"cidr":"203.0.113.0/24"}}],"ports":[{"port":443}]}]`)
	if from := np.Spec.Ingress[0].From; from[0].NamespaceSelector.MatchLabels["team"] != "agents" {
		t.Errorf("API ingress from %+v, want team=agents", from)
	}
	if n := len(eg.Spec.Egress); n != 4 {
		t.Fatalf("%d egress rules, want DNS, the API server and two of egress.to", n)
	}
	if r := eg.Spec.Egress[1]; len(r.To) != 1 || r.To[0].IPBlock.CIDR != "172.20.0.10/32" || len(r.Ports) != 1 || r.Ports[0].Port.IntVal != 6443 {
		t.Errorf("API server rule %+v", r)
	}
	if r := eg.Spec.Egress[2]; r.Ports[0].Port.IntVal != 9000 || r.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "minio" {
		t.Errorf("egress.to[0] rendered as %+v", r)
	}
	if r := eg.Spec.Egress[3]; r.To[0].IPBlock == nil || r.To[0].IPBlock.CIDR != "203.0.113.0/24" {
		t.Errorf("egress.to[1] rendered as %+v", r)
	}

	// Each can be turned off.
	if np, eg = networkPolicies(t, h, "--set", "networkPolicy.egress.enabled=false"); np == nil || eg != nil {
		t.Errorf("egress.enabled=false: ingress %v, egress %v; want only the ingress policy", np != nil, eg != nil)
	}
	if np, eg = networkPolicies(t, h, "--set", "networkPolicy.enabled=false"); np != nil || eg != nil {
		t.Errorf("enabled=false: ingress %v, egress %v; want none", np != nil, eg != nil)
	}
}

// matches reports whether labels has every key and value of sel.
func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// dashboardMetrics are the metrics the dashboard must show.
var dashboardMetrics = []string{
	"compaction_compactions_total", "compaction_compression_ratio", "compaction_tokens_saved_total",
	"compaction_offload_bytes_total", "compaction_summarizer_errors_total", "compaction_summarizer_duration_seconds",
	"compaction_summarizer_calls_total", "compaction_summarizer_tokens_total",
	"compaction_api_requests_total", "compaction_api_request_duration_seconds", "compaction_sessions",
	"compaction_policy_ready", "compaction_gc_deleted_objects_total", "compaction_gc_failures_total",
	"compaction_api_throttled_requests_total", "compaction_api_inflight_bytes",
}

// testDashboard checks the dashboard ConfigMap: the sidecar label, the JSON of
// dashboards/compaction-operator.json, and that its queries use the metrics above and only
// metrics the manager registers.
func testDashboard(t *testing.T, h *helmCLI) {
	root := testenv.RepoRoot(t)
	var cm corev1.ConfigMap
	typed(t, find(t, decode(t, h.template(t, "--set", "grafanaDashboard.enabled=true")), "ConfigMap", prefix+"dashboard"), &cm)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("labels %v lack grafana_dashboard: \"1\"", cm.Labels)
	}
	file, err := os.ReadFile(filepath.Join(root, chartRel, "dashboards", "compaction-operator.json"))
	if err != nil {
		t.Fatal(err)
	}
	data := cm.Data["compaction-operator.json"]
	if strings.TrimSpace(data) != strings.TrimSpace(string(file)) {
		t.Error("the ConfigMap's dashboard differs from dashboards/compaction-operator.json")
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(data), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("dashboard title %q uid %q", dash.Title, dash.UID)
	}

	registered := registeredMetrics(t, root)
	metricRE := regexp.MustCompile(`\bcompaction_[a-z_]+`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricRE.FindAllString(tg.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && registered[b] {
						base = b
					}
				}
				if !registered[base] {
					t.Errorf("panel %q queries %s, which the manager does not register", p.Title, m)
				}
				used[base] = true
			}
		}
	}
	for _, m := range dashboardMetrics {
		if !used[m] {
			t.Errorf("no dashboard panel shows %s", m)
		}
	}
}

// registeredMetrics returns the metric names the manager's code registers.
func registeredMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`"(compaction_[a-z_]+)"`)
	out := map[string]bool{}
	for _, f := range []string{"internal/controller/metrics.go", "internal/compactapi/metrics.go"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
	}
	for _, m := range dashboardMetrics {
		if !out[m] {
			t.Fatalf("%s is not registered in internal/controller/ or internal/compactapi/ any more", m)
		}
	}
	return out
}

// TestInCluster starts one control plane, without the CRDs (the chart installs them), and
// runs the checks that need the API server in it.
func TestInCluster(t *testing.T) {
	h := newHelm(t)
	kubeconform := tool(t, "kubeconform")
	env, cfg := kubeenv.Start(t, kubeenv.Options{})
	kubeconfig := kubeenv.AdminKubeconfig(t, env)

	t.Run("Kubeconform", func(t *testing.T) { testKubeconform(t, h, kubeconform, cfg) })
	t.Run("InstallUpgradeUninstall", func(t *testing.T) { testInstall(t, h, cfg, kubeconfig) })
}

// testKubeconform validates the chart's manifests, every option on, with kubeconform
// -strict. There is no network here, so kubeconform's default schema location (GitHub) is
// out of reach: the schemas are written into a directory first, the CRDs' from
// config/crd/bases and the built-in kinds' from the test API server's OpenAPI v3 document,
// so no kind goes unchecked. The only kind skipped is the ServiceMonitor, whose CRD
// belongs to the Prometheus Operator.
func testKubeconform(t *testing.T, h *helmCLI, kubeconform string, cfg *rest.Config) {
	manifests := h.template(t, append(mapAPI, allOptions...)...)
	objs := decode(t, manifests)
	find(t, objs, "MutatingAdmissionPolicy", prefix+"proxy-injection")
	schemas := t.TempDir()
	writeCRDSchemas(t, testenv.RepoRoot(t), schemas)
	var gvs []string
	for _, o := range objs {
		if gv := o.GetAPIVersion(); gv != v1alpha1.GroupVersion.String() && gv != "monitoring.coreos.com/v1" && !slices.Contains(gvs, gv) {
			gvs = append(gvs, gv)
		}
	}
	writeBuiltinSchemas(t, cfg, schemas, gvs)

	validate := func(input []byte) (kubeconformResult, error) {
		cmd := exec.Command(kubeconform, "-strict", "-summary", "-verbose", "-output", "json",
			"-schema-location", filepath.Join(schemas, "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"),
			"-skip", "monitoring.coreos.com/v1/ServiceMonitor")
		cmd.Stdin = bytes.NewReader(input)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, runErr := cmd.Output()
		var res kubeconformResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("kubeconform output: %v\n%s\n%s", err, out, stderr.String())
		}
		return res, runErr
	}

	res, err := validate(manifests)
	if err != nil {
		t.Errorf("kubeconform: %v", err)
	}
	t.Logf("kubeconform summary: %+v", res.Summary)
	for _, r := range res.Resources {
		want := "statusValid"
		if r.Kind == "ServiceMonitor" {
			want = "statusSkipped"
		}
		if r.Status != want {
			t.Errorf("%s %s: %s, want %s: %s %+v", r.Kind, r.Name, r.Status, want, r.Msg, r.ValidationErrors)
		}
	}
	if s := res.Summary; s.Valid != len(objs)-1 || s.Skipped != 1 || s.Invalid != 0 || s.Errors != 0 {
		t.Errorf("summary %+v, want %d valid and the ServiceMonitor skipped", s, len(objs)-1)
	}

	// The defaults (NetworkPolicies on) and the network overrides are valid too.
	for name, args := range map[string][]string{
		"defaults": nil,
		"network overrides": {"--set-json", `networkPolicy.api.namespaceSelector={"matchLabels":{"team":"agents"}}`,
			"--set-json", `networkPolicy.egress.apiServer={"cidrs":["172.20.0.10/32"],"ports":[6443]}`,
			"--set-json", `networkPolicy.egress.to=[{"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"minio"}}}],"ports":[{"port":9000,"protocol":"TCP"}]},{"to":[{"ipBlock":{"cidr":"203.0.113.0/24"}}],"ports":[{"port":443}]}]`,
			"--set-json", `manager.allowedEndpoints=["minio.minio.svc:9000"]`, "--set-json", `manager.clusterPolicySecretNamespaces=["shared"]`},
	} {
		res, err := validate(h.template(t, args...))
		if s := res.Summary; err != nil || s.Invalid != 0 || s.Errors != 0 || s.Valid == 0 {
			t.Errorf("%s: kubeconform %v, summary %+v", name, err, s)
			for _, r := range res.Resources {
				if r.Status != "statusValid" {
					t.Errorf("%s: %s %s: %s: %s %+v", name, r.Kind, r.Name, r.Status, r.Msg, r.ValidationErrors)
				}
			}
		}
	}

	// The CertManager mode's manifests, but for cert-manager's own kinds (Issuer,
	// Certificate): their CRDs belong to cert-manager, which is not vendored here (the
	// render tests check their content).
	cmManifests := h.template(t, append([]string{"--api-versions", "cert-manager.io/v1", "--set", "api.tls.mode=CertManager"}, allOptions...)...)
	cmd := exec.Command(kubeconform, "-strict", "-summary", "-output", "json",
		"-schema-location", filepath.Join(schemas, "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"),
		"-skip", "monitoring.coreos.com/v1/ServiceMonitor,cert-manager.io/v1/Issuer,cert-manager.io/v1/Certificate")
	cmd.Stdin = bytes.NewReader(cmManifests)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("kubeconform, api.tls.mode=CertManager: %v\n%s", err, out)
	}

	// The schemas catch mistakes: unknown fields (-strict) and the CRDs' own rules.
	for name, bad := range map[string]string{
		"unknown Deployment field": `
apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
      - name: manager
        image: x
        readinesProbe: {httpGet: {path: /readyz, port: 8081}}
`,
		"wrong Service port type": `
apiVersion: v1
kind: Service
metadata: {name: x}
spec:
  ports: [{name: api, port: "eighty"}]
`,
		"ClusterCompactionPolicy bucket pattern": `
apiVersion: compaction.harness9.io/v1alpha1
kind: ClusterCompactionPolicy
metadata: {name: x}
spec:
  contextWindow: 200000
  storage: {s3: {endpoint: minio:9000, bucket: Not_A_Bucket}}
`,
		"unknown ClusterCompactionPolicy field": `
apiVersion: compaction.harness9.io/v1alpha1
kind: ClusterCompactionPolicy
metadata: {name: x}
spec:
  contextWindow: 200000
  contextWindw: 100
  storage: {s3: {endpoint: minio:9000, bucket: agent-context}}
`,
	} {
		res, err := validate([]byte(bad))
		if err == nil || res.Summary.Invalid != 1 {
			t.Errorf("%s: kubeconform accepted it (%v, %+v)", name, err, res)
		}
	}
}

type kubeconformResult struct {
	Resources []struct {
		Kind, Name, Status, Msg string
		ValidationErrors        []struct{ Path, Msg string } `json:"validationErrors"`
	} `json:"resources"`
	Summary struct {
		Valid, Invalid, Errors, Skipped int
	} `json:"summary"`
}

// schemaFile is where kubeconform looks for the schema of kind in apiVersion with
// -schema-location DIR/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json:
// Group is the part of apiVersion before the slash ("v1" for the core group), and
// ResourceKind is lowercase.
func schemaFile(dir, apiVersion, kind string) string {
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = apiVersion, apiVersion
	}
	return filepath.Join(dir, group, strings.ToLower(kind)+"_"+version+".json")
}

func writeSchema(t *testing.T, path string, schema map[string]any) {
	t.Helper()
	b, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeCRDSchemas writes the openAPIV3Schema of every version of the CRDs in
// config/crd/bases as a strict JSON schema.
func writeCRDSchemas(t *testing.T, root, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				t.Fatalf("%s: version %s has no schema", f, v.Name)
			}
			b, err := json.Marshal(v.Schema.OpenAPIV3Schema)
			if err != nil {
				t.Fatal(err)
			}
			var schema map[string]any
			if err := json.Unmarshal(b, &schema); err != nil {
				t.Fatal(err)
			}
			strict(schema, nil)
			writeSchema(t, schemaFile(dir, crd.Spec.Group+"/"+v.Name, crd.Spec.Names.Kind), schema)
		}
	}
}

// writeBuiltinSchemas writes a strict JSON schema for every kind of the group versions gvs
// (e.g. "v1", "apps/v1") from the API server's OpenAPI v3 document of each: the kind's
// schema as the root, with every component schema under "definitions".
func writeBuiltinSchemas(t *testing.T, cfg *rest.Config, dir string, gvs []string) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	paths, err := dc.OpenAPIV3WithContext(ctx).PathsWithContext(ctx)
	if err != nil {
		t.Fatalf("OpenAPI v3 paths: %v", err)
	}
	for _, gv := range gvs {
		path := "apis/" + gv
		if !strings.Contains(gv, "/") {
			path = "api/" + gv
		}
		p, ok := paths[path]
		if !ok {
			t.Fatalf("the API server has no OpenAPI v3 document for %s", gv)
		}
		raw, err := p.SchemaWithContext(ctx, "application/json")
		if err != nil {
			t.Fatalf("OpenAPI v3 of %s: %v", gv, err)
		}
		var doc struct {
			Components struct {
				Schemas map[string]map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("OpenAPI v3 of %s: %v", gv, err)
		}
		defs := map[string]any{}
		for name, s := range doc.Components.Schemas {
			strict(s, map[string]string{"#/components/schemas/": "#/definitions/"})
			defs[name] = s
		}
		group, version, ok := strings.Cut(gv, "/")
		if !ok {
			group, version = "", gv
		}
		n := 0
		for name, s := range doc.Components.Schemas {
			gvks, _ := s["x-kubernetes-group-version-kind"].([]any)
			for _, g := range gvks {
				m, _ := g.(map[string]any)
				if m["group"] == group && m["version"] == version {
					kind, _ := m["kind"].(string)
					writeSchema(t, schemaFile(dir, gv, kind), map[string]any{"$ref": "#/definitions/" + name, "definitions": defs})
					n++
				}
			}
		}
		if n == 0 {
			t.Fatalf("no kinds in the OpenAPI v3 document of %s", gv)
		}
	}
}

// strict walks a schema and makes it reject unknown fields: each object schema with
// properties that does not say otherwise (additionalProperties,
// x-kubernetes-preserve-unknown-fields) gets additionalProperties: false, as the API
// server prunes or rejects such fields. refs maps $ref prefixes to their replacements.
func strict(s map[string]any, refs map[string]string) {
	if ref, ok := s["$ref"].(string); ok {
		for from, to := range refs {
			if rest, ok := strings.CutPrefix(ref, from); ok {
				s["$ref"] = to + rest
			}
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				strict(m, refs)
			}
		}
		_, has := s["additionalProperties"]
		if preserve, _ := s["x-kubernetes-preserve-unknown-fields"].(bool); !has && !preserve {
			s["additionalProperties"] = false
		}
	}
	for _, key := range []string{"additionalProperties", "items", "not"} {
		if m, ok := s[key].(map[string]any); ok {
			strict(m, refs)
		}
	}
	for _, key := range []string{"allOf", "anyOf", "oneOf", "items"} {
		if list, ok := s[key].([]any); ok {
			for _, e := range list {
				if m, ok := e.(map[string]any); ok {
					strict(m, refs)
				}
			}
		}
	}
}

// checkAPIServerLookedUp checks issue 28: installed without
// networkPolicy.egress.apiServer.cidrs, the egress rule admits the API server's own
// addresses and ports, looked up in the cluster, and nothing wider.
func checkAPIServerLookedUp(ctx context.Context, t *testing.T, c client.Client, egress *networkingv1.NetworkPolicy) {
	t.Helper()
	var eps discoveryv1.EndpointSliceList
	if err := c.List(ctx, &eps, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	var wantCIDRs []string
	wantPorts := []int32{443, 6443}
	for _, sl := range eps.Items {
		for _, e := range sl.Endpoints {
			for _, a := range e.Addresses {
				wantCIDRs = append(wantCIDRs, a+"/32")
			}
		}
		for _, p := range sl.Ports {
			if p.Port != nil && !slices.Contains(wantPorts, *p.Port) {
				wantPorts = append(wantPorts, *p.Port)
			}
		}
	}
	if len(wantCIDRs) == 0 {
		t.Fatal("the test API server has no EndpointSlice of the kubernetes Service to look up")
	}
	if r := egress.Spec.Egress; len(r) < 2 {
		t.Errorf("egress rules %+v: no API server rule", r)
	} else {
		var cidrs []string
		ports := make([]int32, 0, len(r[1].Ports))
		for _, to := range r[1].To {
			if to.IPBlock != nil {
				cidrs = append(cidrs, to.IPBlock.CIDR)
			}
		}
		for _, p := range r[1].Ports {
			ports = append(ports, p.Port.IntVal)
		}
		if !equality.Semantic.DeepEqual(cidrs, wantCIDRs) || !equality.Semantic.DeepEqual(ports, wantPorts) {
			t.Errorf("API server rule admits %v on %v; the cluster's kubernetes EndpointSlices say %v on %v", cidrs, ports, wantCIDRs, wantPorts)
		}
	}
}

// testInstall installs the chart (every option on but the ServiceMonitor, whose CRD the
// test API server does not have), checks the objects it creates, upgrades it with a
// changed default policy and uninstalls it.
func testInstall(t *testing.T, h *helmCLI, cfg *rest.Config, kubeconfig string) {
	sets := "networkPolicy.enabled=true,defaultPolicy.enabled=true,grafanaDashboard.enabled=true"
	h.run(t, "install", release, h.chart, "-n", namespace, "--create-namespace", "--kubeconfig", kubeconfig, "--set", sets, "--timeout", "2m")

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	get := func(obj client.Object, ns, name string) bool {
		t.Helper()
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("get %T %s/%s: %v", obj, ns, name, err)
		}
		return err == nil
	}
	mustGet := func(obj client.Object, ns, name string) {
		t.Helper()
		if !get(obj, ns, name) {
			t.Errorf("%T %s/%s was not created", obj, ns, name)
		}
	}

	crds := []string{"agentsessions", "compactionpolicies", "clustercompactionpolicies"}
	for _, n := range crds {
		var crd apiextensionsv1.CustomResourceDefinition
		mustGet(&crd, "", n+"."+v1alpha1.GroupVersion.Group)
	}
	mustGet(&appsv1.Deployment{}, namespace, prefix+"controller-manager")
	mustGet(&corev1.ServiceAccount{}, namespace, prefix+"controller-manager")
	var api, metrics corev1.Service
	mustGet(&api, namespace, prefix+"api")
	mustGet(&metrics, namespace, prefix+"controller-manager-metrics-service")
	if p := api.Spec.Ports; len(p) != 1 || p[0].Name != "api" || p[0].Port != 8082 {
		t.Errorf("API Service ports %+v, want api 8082", p)
	}
	if p := metrics.Spec.Ports; len(p) != 1 || p[0].Name != "https" || p[0].Port != 8443 {
		t.Errorf("metrics Service ports %+v, want https 8443", p)
	}
	mustGet(&networkingv1.NetworkPolicy{}, namespace, prefix+"controller-manager")
	var egress networkingv1.NetworkPolicy
	mustGet(&egress, namespace, prefix+"controller-manager-egress")
	checkAPIServerLookedUp(ctx, t, c, &egress)
	mustGet(&corev1.ConfigMap{}, namespace, prefix+"dashboard")

	// The roles have exactly the rules of config/rbac, and every binding points at a role
	// and a ServiceAccount that exist.
	for file, name := range map[string]string{
		"config/rbac/role.yaml":                prefix + "manager-role",
		"config/rbac/agent_role.yaml":          prefix + "compaction-agent",
		"config/rbac/metrics_reader_role.yaml": prefix + "metrics-reader",
	} {
		var got, want rbacv1.ClusterRole
		readObject(t, file, "ClusterRole", &want)
		mustGet(&got, "", name)
		if !equality.Semantic.DeepEqual(got.Rules, want.Rules) {
			t.Errorf("ClusterRole %s rules %+v, %s has %+v", name, got.Rules, file, want.Rules)
		}
	}
	var leRole, leWant rbacv1.Role
	readObject(t, "config/rbac/leader_election_role.yaml", "Role", &leWant)
	mustGet(&leRole, namespace, prefix+"leader-election-role")
	if !equality.Semantic.DeepEqual(leRole.Rules, leWant.Rules) {
		t.Errorf("leader election Role rules %+v, want %+v", leRole.Rules, leWant.Rules)
	}
	var locRole, locWant rbacv1.Role
	readObject(t, "config/rbac/session_location_role.yaml", "Role", &locWant)
	mustGet(&locRole, namespace, prefix+"session-location-role")
	if !equality.Semantic.DeepEqual(locRole.Rules, locWant.Rules) {
		t.Errorf("session location Role rules %+v, want %+v", locRole.Rules, locWant.Rules)
	}
	for file, name := range map[string]string{
		"config/rbac/api_cert_role.yaml":      prefix + "api-cert-role",
		"config/rbac/api_ca_reader_role.yaml": prefix + "api-ca-reader",
	} {
		var got, want rbacv1.Role
		readObject(t, file, "Role", &want)
		mustGet(&got, namespace, name)
		if !equality.Semantic.DeepEqual(got.Rules, want.Rules) {
			t.Errorf("Role %s rules %+v, %s has %+v", name, got.Rules, file, want.Rules)
		}
	}
	var certRB rbacv1.RoleBinding
	mustGet(&certRB, namespace, prefix+"api-cert-rolebinding")
	checkBinding(t, get, certRB.RoleRef, certRB.Subjects, namespace)
	var crb rbacv1.ClusterRoleBinding
	mustGet(&crb, "", prefix+"manager-rolebinding")
	var rb, locRB rbacv1.RoleBinding
	mustGet(&rb, namespace, prefix+"leader-election-rolebinding")
	mustGet(&locRB, namespace, prefix+"session-location-rolebinding")
	checkBinding(t, get, crb.RoleRef, crb.Subjects, "")
	checkBinding(t, get, rb.RoleRef, rb.Subjects, namespace)
	checkBinding(t, get, locRB.RoleRef, locRB.Subjects, namespace)

	// The admission policy on AgentSession status is installed and enforced: not even the
	// cluster admin installing the chart may write an AgentSession's status.
	mustGet(&admissionregistrationv1.ValidatingAdmissionPolicy{}, "", prefix+"agentsession-status")
	mustGet(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, "", prefix+"agentsession-status")
	session := builder.Session(namespace, "status-probe", "default").Build()
	if err := c.Create(ctx, session); err != nil {
		t.Fatal(err)
	}
	var statusErr error
	for i, deadline := 0, time.Now().Add(30*time.Second); time.Now().Before(deadline); i++ {
		time.Sleep(200 * time.Millisecond) // the API server loads new policies asynchronously
		base := session.DeepCopy()
		session.Status.SessionID = fmt.Sprintf("not-the-uid-%d", i)
		statusErr = c.Status().Patch(ctx, session, client.MergeFrom(base))
		if statusErr != nil {
			break
		}
	}
	if !apierrors.IsForbidden(statusErr) || !strings.Contains(statusErr.Error(), "only the compaction operator ("+
		"system:serviceaccount:"+namespace+":"+prefix+"controller-manager)") {
		t.Errorf("status write by the cluster admin: %v, want 403 from the chart's admission policy", statusErr)
	}
	if err := c.Delete(ctx, session); err != nil {
		t.Fatal(err)
	}

	checkInstalledProxyInjection(t, c, mustGet)

	var policy v1alpha1.ClusterCompactionPolicy
	mustGet(&policy, "", "default")
	if policy.Spec.ContextWindow != 200000 || policy.Spec.Storage.S3.Bucket != "agent-context" {
		t.Errorf("default policy spec %+v", policy.Spec)
	}

	// An upgrade applies a changed policy in place (same object, no delete and re-create).
	h.run(t, "upgrade", release, h.chart, "-n", namespace, "--kubeconfig", kubeconfig, "--set", sets+",defaultPolicy.spec.contextWindow=300000", "--timeout", "2m")
	var upgraded v1alpha1.ClusterCompactionPolicy
	mustGet(&upgraded, "", "default")
	if upgraded.UID != policy.UID || upgraded.Spec.ContextWindow != 300000 {
		t.Errorf("after upgrade: uid %s (was %s), contextWindow %d, want the same object with 300000", upgraded.UID, policy.UID, upgraded.Spec.ContextWindow)
	}
	out := h.run(t, "list", "-n", namespace, "--kubeconfig", kubeconfig, "-o", "json")
	var releases []struct {
		Name     string `json:"name"`
		Revision string `json:"revision"`
		Status   string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &releases); err != nil {
		t.Fatalf("helm list: %v\n%s", err, out)
	}
	if len(releases) != 1 || releases[0].Status != "deployed" || releases[0].Revision != "2" {
		t.Errorf("helm list: %+v, want revision 2 deployed", releases)
	}

	// Uninstall removes the operator but keeps the CRDs (crds.keep) and so every object of
	// their kinds.
	h.run(t, "uninstall", release, "-n", namespace, "--kubeconfig", kubeconfig, "--timeout", "2m")
	if get(&appsv1.Deployment{}, namespace, prefix+"controller-manager") {
		t.Error("the Deployment is still there after helm uninstall")
	}
	if get(&rbacv1.ClusterRole{}, "", prefix+"compaction-agent") {
		t.Error("the compaction-agent ClusterRole is still there after helm uninstall")
	}
	for _, n := range crds {
		if !get(&apiextensionsv1.CustomResourceDefinition{}, "", n+"."+v1alpha1.GroupVersion.Group) {
			t.Errorf("CRD %s was deleted by helm uninstall despite crds.keep", n)
		}
	}
}

// checkInstalledProxyInjection checks that helm install created the proxy injection policy
// (helm finds the MutatingAdmissionPolicy API in the cluster) and that it injects the sidecar
// into an annotated pod (test/e2e checks the injection in detail).
func checkInstalledProxyInjection(t *testing.T, c client.Client, mustGet func(client.Object, string, string)) {
	t.Helper()
	ctx := context.Background()
	mustGet(&admissionregistrationv1.MutatingAdmissionPolicy{}, "", prefix+"proxy-injection")
	mustGet(&admissionregistrationv1.MutatingAdmissionPolicyBinding{}, "", prefix+"proxy-injection")
	var injected *corev1.Pod
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		injected = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "agent", Annotations: map[string]string{
				"compaction.harness9.io/policy": "default", "compaction.harness9.io/proxy": "true",
				"compaction.harness9.io/upstream": "https://llm.example/v1"}}, // a pod that names no upstream is not injected
			Spec: corev1.PodSpec{ServiceAccountName: prefix + "controller-manager", Containers: []corev1.Container{{Name: "agent", Image: "busybox:1.36"}}},
		}
		if err := c.Create(ctx, injected, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if len(injected.Spec.InitContainers) > 0 {
			break
		}
	}
	if ic := injected.Spec.InitContainers; len(ic) != 1 || ic[0].Name != "compaction-proxy" || ic[0].Image != "ghcr.io/harness9/compaction-operator:"+chartAppVersion(t) {
		t.Errorf("init containers of an annotated pod: %+v, want compaction-proxy with the manager's image", ic)
	}
}

// checkBinding checks that a binding's role and ServiceAccount subjects exist.
func checkBinding(t *testing.T, get func(client.Object, string, string) bool, ref rbacv1.RoleRef, subjects []rbacv1.Subject, ns string) {
	t.Helper()
	var role client.Object = &rbacv1.ClusterRole{}
	if ref.Kind == "Role" {
		role = &rbacv1.Role{}
	} else {
		ns = ""
	}
	if !get(role, ns, ref.Name) {
		t.Errorf("binding refers to the missing %s %s", ref.Kind, ref.Name)
	}
	if len(subjects) == 0 {
		t.Error("binding without subjects")
	}
	for _, s := range subjects {
		if s.Kind != "ServiceAccount" || !get(&corev1.ServiceAccount{}, s.Namespace, s.Name) {
			t.Errorf("binding subject %+v is not an existing ServiceAccount", s)
		}
	}
}
