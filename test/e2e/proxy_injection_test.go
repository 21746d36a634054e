package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/controller"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// What config/default's proxy injection policy writes into a pod.
const (
	injectNamespace = "agents"
	proxyImage      = "ghcr.io/harness9/compaction-operator:latest"
	proxyServer     = "https://compaction-operator-api." + operator.SystemNamespace + ".svc:8082"
)

// TestProxyInjection is issue 16: with config/default installed (kubectl apply -k, as a user
// does), a pod created with the annotations compaction.harness9.io/policy and
// compaction.harness9.io/proxy: "true" gets compaction-proxy as a native sidecar, its token
// and CA volumes, and its containers' base URLs (OpenAI, Anthropic and, issue 27, Gemini)
// pointing at it; every other pod is admitted as it was sent. Issue 28: the sidecar forwards
// only to upstreams the pod names (an annotation, or the one literal base URL its containers
// set), never to a public default; a pod it would have to guess for, or on the node's
// network, is admitted without it, and the manager's pod controller says why in an event.
func TestProxyInjection(t *testing.T) {
	cl := operator.Install(t)
	cl.StartManager(testenv.BuildManager(t)) // the pod controller's ProxyNotInjected events
	c, ctx := cl.Client, context.Background()
	// The policy admits a pod unchanged when its CEL fails (failurePolicy Ignore); here an
	// error refuses the pod instead, so the test shows the error rather than a missing field.
	cl.Run("patch", "mutatingadmissionpolicy", "compaction-operator-proxy-injection", "--type=merge", "-p", `{"spec":{"failurePolicy":"Fail"}}`)
	testenv.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: injectNamespace}}))
	testenv.Must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: injectNamespace, Name: "agent"}}))

	// The API server loads admission policies asynchronously: wait until a dry run is mutated.
	testenv.Eventually(t, waitFor, "the proxy injection policy mutates a dry-run pod", func() (bool, string) {
		p := injectPod("probe", true, true, corev1.Container{Name: "agent", Image: "busybox:1.36"})
		p.Annotations["compaction.harness9.io/upstream"] = "https://llm.example/v1"
		if err := c.Create(ctx, p, client.DryRunAll); err != nil {
			return false, err.Error()
		}
		return len(p.Spec.InitContainers) == 1, fmt.Sprintf("init containers %v", containerNames(p.Spec.InitContainers))
	})

	t.Run("UpstreamsFromTheAgentsEnv", func(t *testing.T) {
		// Two containers, one with the base URLs set (and a variable using one of them), one
		// with no env at all, which is left alone (its SDK's own endpoint is not the first
		// container's); an init container of the pod's own.
		p := injectPod("env-upstream", true, true,
			corev1.Container{Name: "agent", Image: "busybox:1.36", Env: []corev1.EnvVar{
				{Name: "OPENAI_API_KEY", Value: "sk-test"},
				{Name: "OPENAI_BASE_URL", Value: "https://llm.internal.example/v1"},
				{Name: "ANTHROPIC_BASE_URL", Value: "https://gateway.example/anthropic/"},
				{Name: "GEMINI_API_KEY", Value: "gm-test"},
				{Name: "GOOGLE_GEMINI_BASE_URL", Value: "https://gateway.example/gemini"},
				{Name: "MODEL_URL", Value: "$(OPENAI_BASE_URL)/models"},
			}},
			corev1.Container{Name: "helper", Image: "busybox:1.36"})
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox:1.36", Command: []string{"true"}}}
		testenv.Must(t, c.Create(ctx, p))

		if got := containerNames(p.Spec.InitContainers); !equality.Semantic.DeepEqual(got, []string{"setup", "compaction-proxy"}) {
			t.Fatalf("init containers %v, want the pod's own setup, then compaction-proxy", got)
		}
		checkSidecar(t, p.Spec.InitContainers[1], upstreams("https://llm.internal.example/v1", "https://gateway.example/anthropic/v1", "https://gateway.example/gemini"))
		checkVolumes(t, p, nil)
		checkEnv(t, p.Spec.Containers[0], []corev1.EnvVar{
			{Name: "OPENAI_API_KEY", Value: "sk-test"},
			{Name: "OPENAI_BASE_URL", Value: "http://127.0.0.1:4141/v1"},
			{Name: "ANTHROPIC_BASE_URL", Value: "http://127.0.0.1:4141"},
			{Name: "GEMINI_API_KEY", Value: "gm-test"},
			{Name: "GOOGLE_GEMINI_BASE_URL", Value: "http://127.0.0.1:4141"},
			{Name: "MODEL_URL", Value: "$(OPENAI_BASE_URL)/models"},
		})
		checkEnv(t, p.Spec.Containers[1], nil)
		if setup := p.Spec.InitContainers[0]; len(setup.Env) != 0 || setup.RestartPolicy != nil {
			t.Errorf("the pod's own init container changed: %+v", setup)
		}
		checkNoProxyEvent(t, c, p)
	})

	t.Run("UpstreamsFromAnnotations", func(t *testing.T) {
		// The OpenAI and Gemini base URLs come from a Secret and a ConfigMap (not literals), a
		// second container sets another OpenAI literal and takes the rest from envFrom: the
		// annotations name the upstreams for every container, whose variables become
		// literals pointing at the proxy.
		p := injectPod("annotation-upstream", true, true,
			corev1.Container{Name: "agent", Image: "busybox:1.36", Env: []corev1.EnvVar{
				{Name: "OPENAI_BASE_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}, Key: "url"}}},
				{Name: "GOOGLE_GEMINI_BASE_URL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}, Key: "gemini-url"}}},
			}},
			corev1.Container{Name: "helper", Image: "busybox:1.36",
				Env:     []corev1.EnvVar{{Name: "OPENAI_BASE_URL", Value: "https://other.example/v1"}},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}}}}})
		p.Annotations["compaction.harness9.io/upstream"] = "http://vllm.models.svc:8000/v1"
		p.Annotations["compaction.harness9.io/anthropic-upstream"] = "https://anthropic-gw.example/v1"
		p.Annotations["compaction.harness9.io/gemini-upstream"] = "https://gemini-gw.example"
		p.Spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		testenv.Must(t, c.Create(ctx, p))

		if len(p.Spec.InitContainers) != 1 {
			t.Fatalf("init containers %v, want compaction-proxy", containerNames(p.Spec.InitContainers))
		}
		checkSidecar(t, p.Spec.InitContainers[0], upstreams("http://vllm.models.svc:8000/v1", "https://anthropic-gw.example/v1", "https://gemini-gw.example"))
		checkVolumes(t, p, []string{"work"})
		checkEnv(t, p.Spec.Containers[0], []corev1.EnvVar{
			{Name: "OPENAI_BASE_URL", Value: "http://127.0.0.1:4141/v1"},
			{Name: "GOOGLE_GEMINI_BASE_URL", Value: "http://127.0.0.1:4141"},
			{Name: "ANTHROPIC_BASE_URL", Value: "http://127.0.0.1:4141"},
		})
		checkEnv(t, p.Spec.Containers[1], []corev1.EnvVar{
			{Name: "OPENAI_BASE_URL", Value: "http://127.0.0.1:4141/v1"},
			{Name: "ANTHROPIC_BASE_URL", Value: "http://127.0.0.1:4141"},
			{Name: "GOOGLE_GEMINI_BASE_URL", Value: "http://127.0.0.1:4141"},
		})
	})

	t.Run("OnlyTheNamedAPIs", func(t *testing.T) {
		// The pod names an OpenAI upstream only: the Anthropic and Gemini variables are left
		// as they were (one already pointing at the proxy by hand), nothing is added, and the
		// sidecar's Anthropic and Gemini upstreams are the unresolvable placeholders, not the
		// proxy's public defaults.
		p := injectPod("openai-only", true, true, corev1.Container{Name: "agent", Image: "busybox:1.36",
			Env: []corev1.EnvVar{
				{Name: "OPENAI_BASE_URL", Value: "https://llm.internal.example/v1"},
				{Name: "GOOGLE_GEMINI_BASE_URL", Value: "http://localhost:4141"},
			},
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "keys"}}}}})
		testenv.Must(t, c.Create(ctx, p))
		if len(p.Spec.InitContainers) != 1 {
			t.Fatalf("init containers %v, want compaction-proxy", containerNames(p.Spec.InitContainers))
		}
		checkSidecar(t, p.Spec.InitContainers[0], upstreams("https://llm.internal.example/v1", "", ""))
		checkEnv(t, p.Spec.Containers[0], []corev1.EnvVar{
			{Name: "OPENAI_BASE_URL", Value: "http://127.0.0.1:4141/v1"},
			{Name: "GOOGLE_GEMINI_BASE_URL", Value: "http://localhost:4141"},
		})
	})

	t.Run("NeverGuessesAnUpstream", func(t *testing.T) {
		// Issue 28: each of these pods was injected before, its requests (API key included)
		// sent to a public default or to another container's endpoint. Now each is admitted
		// as it was sent, and its event says why.
		agent := func(env ...corev1.EnvVar) corev1.Container {
			return corev1.Container{Name: "agent", Image: "busybox:1.36", Env: env}
		}
		secretURL := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}, Key: "url"}}
		envFrom := []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}}}}
		for _, tc := range []struct {
			name string
			pod  *corev1.Pod
			why  string // in the event's note
		}{
			{"value-from", injectPod("value-from", true, true,
				agent(corev1.EnvVar{Name: "OPENAI_BASE_URL", ValueFrom: secretURL})),
				"container agent sets OPENAI_BASE_URL from valueFrom, which the policy does not read: name the upstream in the annotation compaction.harness9.io/upstream"},
			{"variable-reference", injectPod("variable-reference", true, true,
				agent(corev1.EnvVar{Name: "GATEWAY", Value: "https://gateway.internal.example"},
					corev1.EnvVar{Name: "ANTHROPIC_BASE_URL", Value: "$(GATEWAY)/anthropic"})),
				`container agent sets ANTHROPIC_BASE_URL to "$(GATEWAY)/anthropic", which references a variable`},
			{"gemini-value-from-beside-an-openai-literal", injectPod("gemini-value-from", true, true,
				agent(corev1.EnvVar{Name: "OPENAI_BASE_URL", Value: "https://llm.internal.example/v1"},
					corev1.EnvVar{Name: "GOOGLE_GEMINI_BASE_URL", ValueFrom: secretURL})),
				"container agent sets GOOGLE_GEMINI_BASE_URL from valueFrom, which the policy does not read: name the upstream in the annotation compaction.harness9.io/gemini-upstream"},
			{"env-from", func() *corev1.Pod {
				c := agent()
				c.EnvFrom = envFrom
				return injectPod("env-from", true, true, c)
			}(), "the pod names no model endpoint for the proxy"},
			{"env-from-beside-a-literal", func() *corev1.Pod {
				helper := corev1.Container{Name: "helper", Image: "busybox:1.36", EnvFrom: envFrom}
				return injectPod("env-from-beside-a-literal", true, true,
					agent(corev1.EnvVar{Name: "OPENAI_BASE_URL", Value: "https://llm.internal.example/v1"}), helper)
			}(), "container helper takes variables from envFrom, which the policy does not read and which may set OPENAI_BASE_URL"},
			{"containers-disagree", func() *corev1.Pod {
				helper := corev1.Container{Name: "helper", Image: "busybox:1.36",
					Env: []corev1.EnvVar{{Name: "OPENAI_BASE_URL", Value: "https://gateway.internal.example/v1"}}}
				return injectPod("containers-disagree", true, true,
					agent(corev1.EnvVar{Name: "OPENAI_BASE_URL", Value: "https://api.openai.com/v1"}), helper)
			}(), `containers agent and helper set OPENAI_BASE_URL to different URLs ("https://api.openai.com/v1", "https://gateway.internal.example/v1")`},
			{"host-network", func() *corev1.Pod {
				p := injectPod("host-network", true, true, agent(corev1.EnvVar{Name: "OPENAI_BASE_URL", Value: "https://llm.internal.example/v1"}))
				p.Annotations["compaction.harness9.io/upstream"] = "https://llm.internal.example/v1"
				p.Spec.HostNetwork = true
				return p
			}(), "hostNetwork"},
			{"no-upstream", injectPod("no-upstream", true, true, agent()), "the pod names no model endpoint for the proxy"},
			// Pointing at the proxy by hand names no upstream either.
			{"only-the-proxy", injectPod("only-the-proxy", true, true,
				agent(corev1.EnvVar{Name: "OPENAI_BASE_URL", Value: "http://127.0.0.1:4141/v1"},
					corev1.EnvVar{Name: "GOOGLE_GEMINI_BASE_URL", Value: "http://localhost:4141"})),
				"the pod names no model endpoint for the proxy"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				sent := tc.pod.DeepCopy()
				testenv.Must(t, c.Create(ctx, tc.pod))
				if !equality.Semantic.DeepEqual(tc.pod.Spec.InitContainers, sent.Spec.InitContainers) ||
					!equality.Semantic.DeepEqual(tc.pod.Spec.Volumes, sent.Spec.Volumes) {
					t.Fatalf("injected: init containers %v, %d volumes", containerNames(tc.pod.Spec.InitContainers), len(tc.pod.Spec.Volumes))
				}
				for i := range sent.Spec.Containers {
					checkEnv(t, tc.pod.Spec.Containers[i], sent.Spec.Containers[i].Env)
				}
				note := proxyEvent(t, c, tc.pod)
				if !strings.HasPrefix(note, "compaction-proxy was not injected: ") || !strings.Contains(note, tc.why) {
					t.Errorf("event %s: %q, want it to say %q", controller.ReasonProxyNotInjected, note, tc.why)
				}
			})
		}
	})

	t.Run("OtherPodsUntouched", func(t *testing.T) {
		env := []corev1.EnvVar{{Name: "OPENAI_BASE_URL", Value: "https://api.openai.com/v1"}}
		for name, p := range map[string]*corev1.Pod{
			"plain":       injectPod("plain", false, false, corev1.Container{Name: "agent", Image: "busybox:1.36", Env: env}),
			"policy-only": injectPod("policy-only", true, false, corev1.Container{Name: "agent", Image: "busybox:1.36", Env: env}),
			"proxy-only":  injectPod("proxy-only", false, true, corev1.Container{Name: "agent", Image: "busybox:1.36", Env: env}),
			// Injected already (by hand, or by a policy that ran before): left as it is.
			"has-sidecar": func() *corev1.Pod {
				p := injectPod("has-sidecar", true, true, corev1.Container{Name: "agent", Image: "busybox:1.36", Env: env})
				p.Spec.InitContainers = []corev1.Container{{Name: "compaction-proxy", Image: "example/proxy:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
				return p
			}(),
		} {
			initBefore := containerNames(p.Spec.InitContainers)
			testenv.Must(t, c.Create(ctx, p))
			if got := containerNames(p.Spec.InitContainers); !equality.Semantic.DeepEqual(got, initBefore) {
				t.Errorf("%s: init containers %v, want %v", name, got, initBefore)
			}
			if len(p.Spec.InitContainers) == 1 && p.Spec.InitContainers[0].Image != "example/proxy:1" {
				t.Errorf("%s: the pod's own compaction-proxy changed: %+v", name, p.Spec.InitContainers[0])
			}
			checkEnv(t, p.Spec.Containers[0], env)
			if len(p.Spec.Volumes) != 0 {
				t.Errorf("%s: volumes %+v, want none", name, p.Spec.Volumes)
			}
		}
	})

	t.Run("RestrictedPodSecurity", func(t *testing.T) {
		// The sidecar meets the restricted Pod Security Standard: a compliant agent pod is
		// still admitted in a namespace that enforces it.
		testenv.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restricted",
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}))
		testenv.Must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "restricted", Name: "agent"}}))
		p := injectPod("restricted", true, true, corev1.Container{Name: "agent", Image: "busybox:1.36",
			Env: []corev1.EnvVar{{Name: "ANTHROPIC_BASE_URL", Value: "https://api.anthropic.com"}},
			SecurityContext: &corev1.SecurityContext{
				RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}})
		p.Namespace = "restricted"
		testenv.Must(t, c.Create(ctx, p))
		if len(p.Spec.InitContainers) != 1 {
			t.Fatalf("init containers %v, want compaction-proxy", containerNames(p.Spec.InitContainers))
		}
		checkSidecar(t, p.Spec.InitContainers[0], upstreams("", "https://api.anthropic.com/v1", ""))
	})

	t.Run("GenerateName", func(t *testing.T) {
		// A pod of a Deployment or Job has no name at admission: the session comes from the
		// downward API when the pod runs, so the sidecar is the same. A container without
		// env gets the base URL the annotation names an upstream for.
		p := injectPod("", true, true, corev1.Container{Name: "agent", Image: "busybox:1.36"})
		p.Annotations["compaction.harness9.io/gemini-upstream"] = "https://gemini-gw.example"
		p.GenerateName = "worker-"
		testenv.Must(t, c.Create(ctx, p))
		if len(p.Spec.InitContainers) != 1 {
			t.Fatalf("init containers %v, want compaction-proxy", containerNames(p.Spec.InitContainers))
		}
		checkSidecar(t, p.Spec.InitContainers[0], upstreams("", "", "https://gemini-gw.example"))
		checkEnv(t, p.Spec.Containers[0], []corev1.EnvVar{{Name: "GOOGLE_GEMINI_BASE_URL", Value: "http://127.0.0.1:4141"}})
	})
}

// injectPod is a pod in injectNamespace running as the ServiceAccount "agent", with the
// policy and the proxy annotation when asked.
func injectPod(name string, policy, proxy bool, containers ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: injectNamespace, Name: name, Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{ServiceAccountName: "agent", AutomountServiceAccountToken: ptr.To(false), Containers: containers},
	}
	if policy {
		p.Annotations["compaction.harness9.io/policy"] = "shared"
	}
	if proxy {
		p.Annotations["compaction.harness9.io/proxy"] = "true"
	}
	return p
}

func containerNames(cs []corev1.Container) []string {
	names := make([]string, 0, len(cs))
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

// upstreams is the sidecar's upstream variables for the upstreams given (OpenAI, Anthropic,
// Gemini); an empty one is the policy's placeholder for an API the pod names no upstream for.
func upstreams(openai, anthropic, gemini string) []corev1.EnvVar {
	or := func(v, placeholder string) string {
		if v == "" {
			return placeholder
		}
		return v
	}
	return []corev1.EnvVar{
		{Name: "COMPACTION_PROXY_UPSTREAM", Value: or(openai, "https://compaction.harness9.io-upstream-not-set.invalid/v1")},
		{Name: "COMPACTION_PROXY_ANTHROPIC_UPSTREAM", Value: or(anthropic, "https://compaction.harness9.io-anthropic-upstream-not-set.invalid/v1")},
		{Name: "COMPACTION_PROXY_GEMINI_UPSTREAM", Value: or(gemini, "https://compaction.harness9.io-gemini-upstream-not-set.invalid")},
	}
}

// proxyEvent waits for the pod controller's ProxyNotInjected event on p and returns its note.
func proxyEvent(t *testing.T, c client.Client, p *corev1.Pod) string {
	t.Helper()
	var note string
	testenv.Eventually(t, waitFor, "a "+controller.ReasonProxyNotInjected+" event on pod "+p.Name, func() (bool, string) {
		var list eventsv1.EventList
		testenv.Must(t, c.List(context.Background(), &list, client.InNamespace(p.Namespace)))
		for _, e := range list.Items {
			if e.Regarding.Kind == "Pod" && e.Regarding.Name == p.Name && e.Reason == controller.ReasonProxyNotInjected {
				note = e.Note
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events in %s", len(list.Items), p.Namespace)
	})
	return note
}

// checkNoProxyEvent waits until the pod controller has created p's session (SessionCreated),
// after which it would have said ProxyNotInjected, and checks that it did not.
func checkNoProxyEvent(t *testing.T, c client.Client, p *corev1.Pod) {
	t.Helper()
	var reasons []string
	testenv.Eventually(t, waitFor, "a SessionCreated event on pod "+p.Name, func() (bool, string) {
		var list eventsv1.EventList
		testenv.Must(t, c.List(context.Background(), &list, client.InNamespace(p.Namespace)))
		reasons = reasons[:0]
		for _, e := range list.Items {
			if e.Regarding.Kind == "Pod" && e.Regarding.Name == p.Name {
				reasons = append(reasons, e.Reason)
			}
		}
		return slices.Contains(reasons, compactionv1alpha1.ReasonSessionCreated), fmt.Sprint(reasons)
	})
	if slices.Contains(reasons, controller.ReasonProxyNotInjected) {
		t.Errorf("pod %s was injected and has a %s event", p.Name, controller.ReasonProxyNotInjected)
	}
}

// checkSidecar compares the injected container with what the policy writes, upstream the
// proxy's upstream variables (see upstreams).
func checkSidecar(t *testing.T, got corev1.Container, upstream []corev1.EnvVar) {
	t.Helper()
	fieldRef := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	want := corev1.Container{
		Name:          "compaction-proxy",
		Image:         proxyImage,
		Command:       []string{"/compaction-proxy"},
		Args:          []string{"--listen=127.0.0.1:4141"},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env: append([]corev1.EnvVar{
			{Name: "POD_NAMESPACE", ValueFrom: fieldRef("metadata.namespace")},
			{Name: "POD_NAME", ValueFrom: fieldRef("metadata.name")},
			{Name: "COMPACTION_SERVER", Value: proxyServer},
			{Name: "COMPACTION_SESSION", Value: "$(POD_NAMESPACE)/$(POD_NAME)"},
			{Name: "COMPACTION_TOKEN_FILE", Value: "/var/run/secrets/compaction.harness9.io/token"},
			{Name: "COMPACTION_CA_FILE", Value: "/etc/compaction/ca.crt"},
		}, upstream...),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "compaction-proxy-token", MountPath: "/var/run/secrets/compaction.harness9.io", ReadOnly: true},
			{Name: "compaction-proxy-ca", MountPath: "/etc/compaction", ReadOnly: true},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		// The API server's defaults.
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		ImagePullPolicy:          corev1.PullAlways, // the :latest tag of config/manager
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("sidecar\n%s\nwant\n%s", asJSON(got), asJSON(want))
	}
}

// checkVolumes checks that the pod has its own volumes (own), then the proxy's token and CA.
func checkVolumes(t *testing.T, p *corev1.Pod, own []string) {
	t.Helper()
	names := make([]string, 0, len(p.Spec.Volumes))
	for _, v := range p.Spec.Volumes {
		names = append(names, v.Name)
	}
	if wantNames := append(own, "compaction-proxy-token", "compaction-proxy-ca"); !equality.Semantic.DeepEqual(names, wantNames) {
		t.Fatalf("volumes %v, want %v", names, wantNames)
	}
	n := len(own)
	wantToken := corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: compactclient.DefaultTokenAudience, ExpirationSeconds: ptr.To[int64](3600), Path: "token"}}},
		DefaultMode: ptr.To[int32](corev1.ProjectedVolumeSourceDefaultMode),
	}}
	wantCA := corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: operator.CAConfigMap},
			Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}},
		DefaultMode: ptr.To[int32](corev1.ProjectedVolumeSourceDefaultMode),
	}}
	for i, want := range []corev1.VolumeSource{wantToken, wantCA} {
		if got := p.Spec.Volumes[n+i].VolumeSource; !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("volume %s:\n%s\nwant\n%s", p.Spec.Volumes[n+i].Name, asJSON(got), asJSON(want))
		}
	}
}

func checkEnv(t *testing.T, c corev1.Container, want []corev1.EnvVar) {
	t.Helper()
	if !equality.Semantic.DeepEqual(c.Env, want) {
		t.Errorf("container %s env\n%s\nwant\n%s", c.Name, asJSON(c.Env), asJSON(want))
	}
}

func asJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// TestInjectedSidecarCompacts runs compaction-proxy as the policy injected it into a pod:
// its command and environment resolved the way the kubelet would (downward API, $(VAR)
// references, the projected token and the CA copied into the namespace at their mount
// paths), against the manager running as config/default's ServiceAccount. Two things no
// kubelet runs here stand in: the proxy listens on a free port instead of 127.0.0.1:4141,
// and it reaches the manager at its local address instead of the Service's DNS name. The
// agent's request reaches the agent's own upstream compacted: with the prompt_cache_key the
// proxy sets only on a view the compaction API returned.
func TestInjectedSidecarCompacts(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	mgr := cl.StartManager(testenv.BuildManager(t))
	proxyBin := testenv.Build(t, "./cmd/compaction-proxy")
	c, ctx := cl.Client, context.Background()
	cl.CreateMinIOPolicy(ns, "shared", "inject", m, window, nil)
	cl.BindAgent(ns, "agent")

	var mu sync.Mutex
	var upstreamBodies []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		upstreamBodies = append(upstreamBodies, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}`)
	}))
	t.Cleanup(upstream.Close)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "injected-agent", Annotations: map[string]string{
			"compaction.harness9.io/policy": "shared", "compaction.harness9.io/proxy": "true"}},
		Spec: corev1.PodSpec{ServiceAccountName: "agent", Containers: []corev1.Container{{Name: "agent", Image: "busybox:1.36",
			Env: []corev1.EnvVar{{Name: "OPENAI_BASE_URL", Value: upstream.URL + "/v1"}}}}},
	}
	testenv.Eventually(t, waitFor, "the annotated pod is created with the sidecar", func() (bool, string) {
		p := pod.DeepCopy()
		if err := c.Create(ctx, p, client.DryRunAll); err != nil {
			return false, err.Error()
		}
		return len(p.Spec.InitContainers) == 1, fmt.Sprintf("init containers %v", containerNames(p.Spec.InitContainers))
	})
	testenv.Must(t, c.Create(ctx, pod))
	podSession(t, c, pod)

	// The sidecar as the kubelet would start it.
	sidecar := pod.Spec.InitContainers[0]
	mounts := map[string]string{} // volume name -> a directory standing in for it
	for _, v := range pod.Spec.Volumes {
		dir := t.TempDir()
		mounts[v.Name] = dir
		for _, src := range v.Projected.Sources {
			switch {
			case src.ServiceAccountToken != nil:
				if src.ServiceAccountToken.Audience != compactclient.DefaultTokenAudience {
					t.Fatalf("projected token audience %q", src.ServiceAccountToken.Audience)
				}
				writeFile(t, filepath.Join(dir, src.ServiceAccountToken.Path), cl.PodToken(ns, pod.Name))
			case src.ConfigMap != nil:
				ca, err := os.ReadFile(mgr.CAFile) // the namespace's copy of the published bundle
				testenv.Must(t, err)
				writeFile(t, filepath.Join(dir, src.ConfigMap.Items[0].Path), string(ca))
			}
		}
	}
	hostPath := func(p string) string {
		for _, vm := range sidecar.VolumeMounts {
			if rel, ok := strings.CutPrefix(p, vm.MountPath+"/"); ok {
				return filepath.Join(mounts[vm.Name], rel)
			}
		}
		return p
	}
	vars := map[string]string{}
	env := make([]string, 0, len(sidecar.Env))
	for _, e := range sidecar.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = map[string]string{"metadata.namespace": pod.Namespace, "metadata.name": pod.Name}[e.ValueFrom.FieldRef.FieldPath]
		}
		v = os.Expand(strings.ReplaceAll(strings.ReplaceAll(v, "$(", "${"), ")", "}"), func(k string) string { return vars[k] })
		switch e.Name {
		case "COMPACTION_TOKEN_FILE", "COMPACTION_CA_FILE":
			v = hostPath(v)
		case "COMPACTION_SERVER":
			if v != proxyServer {
				t.Fatalf("COMPACTION_SERVER %q, want %q", v, proxyServer)
			}
			v = mgr.URL
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	if got, want := vars["COMPACTION_SESSION"], ns+"/"+pod.Name; got != want {
		t.Fatalf("COMPACTION_SESSION %q, want %q", got, want)
	}
	listen := testenv.FreePorts(t, 1)[0]
	args := slices.Clone(sidecar.Args)
	for i, a := range args {
		if a == "--listen=127.0.0.1:4141" {
			args[i] = "--listen=" + listen
		}
	}
	if len(sidecar.Command) != 1 || sidecar.Command[0] != "/compaction-proxy" {
		t.Fatalf("command %v", sidecar.Command)
	}
	proxy := testenv.StartProcess(t, proxyBin, args, env...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("compaction-proxy output:\n%s", proxy.Output())
		}
	})

	// The agent calls its OPENAI_BASE_URL (the proxy's, on the stand-in port).
	base := strings.Replace(pod.Spec.Containers[0].Env[0].Value, "127.0.0.1:4141", listen, 1)
	if base != "http://"+listen+"/v1" {
		t.Fatalf("the agent's OPENAI_BASE_URL is %q", pod.Spec.Containers[0].Env[0].Value)
	}
	var resp *http.Response
	testenv.Eventually(t, waitFor, "the proxy answers", func() (bool, string) {
		var err error
		resp, err = http.Post(base+"/chat/completions", "application/json", strings.NewReader(
			`{"model":"m","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Fix the build."}]}`))
		return err == nil, fmt.Sprint(err)
	})
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"done"`) {
		t.Fatalf("the agent got %d %s", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(upstreamBodies) != 1 || !strings.HasPrefix(upstreamBodies[0], "POST /v1/chat/completions ") ||
		!strings.Contains(upstreamBodies[0], `"prompt_cache_key":"compaction-`) {
		t.Errorf("the agent's upstream received %q, want one compacted chat request (with the proxy's prompt_cache_key)", upstreamBodies)
	}
	if strings.Contains(proxy.Output(), "compaction failed") {
		t.Errorf("the proxy failed open:\n%s", proxy.Output())
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	testenv.Must(t, os.MkdirAll(filepath.Dir(path), 0o700))
	testenv.Must(t, os.WriteFile(path, []byte(data), 0o600))
}
