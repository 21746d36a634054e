package controller

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Proxy injection (config/admission/proxy_injection_policy.yaml): a MutatingAdmissionPolicy
// cannot emit events, so the pod controller says why a pod that asked for compaction-proxy
// did not get it. proxyNotInjectedCause mirrors the policy's matchConditions; TestProxyInjection
// checks that they agree.
const (
	// ProxyAnnotation asks for compaction-proxy as a sidecar ("true").
	ProxyAnnotation = "compaction.harness9.io/proxy"
	// ProxyContainer is the name of the injected sidecar.
	ProxyContainer = "compaction-proxy"
	// ReasonProxyNotInjected is the reason of the Warning event on a pod that asked for
	// compaction-proxy and was admitted without it.
	ReasonProxyNotInjected = "ProxyNotInjected"
)

// proxyAPI is one API the proxy serves: the variable the agent's SDK reads its base URL
// from and the annotation that names the upstream instead.
type proxyAPI struct{ env, annotation string }

var proxyAPIs = []proxyAPI{
	{"OPENAI_BASE_URL", "compaction.harness9.io/upstream"},
	{"ANTHROPIC_BASE_URL", "compaction.harness9.io/anthropic-upstream"},
	{"GOOGLE_GEMINI_BASE_URL", "compaction.harness9.io/gemini-upstream"},
}

var (
	literalBaseURL = regexp.MustCompile(`^https?://[^$]+$`)
	proxyBaseURL   = regexp.MustCompile(`^http://(127\.0\.0\.1|localhost):4141(/|$)`)
)

// proxyInjected reports whether the pod has the sidecar.
func proxyInjected(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == ProxyContainer {
			return true
		}
	}
	return false
}

// proxyNotInjectedCause says which of the policy's conditions the pod fails, in the policy's
// order, and what to change; for a pod that meets them all, that the policy did not run.
func proxyNotInjectedCause(pod *corev1.Pod) string {
	if pod.Spec.HostNetwork {
		return "the pod uses the node's network (hostNetwork), where the proxy's 127.0.0.1:4141 and its unauthenticated read-back route would be the node's"
	}
	named := func(api proxyAPI) bool { return pod.Annotations[api.annotation] != "" }
	for _, api := range proxyAPIs {
		if named(api) {
			continue
		}
		for _, c := range pod.Spec.Containers {
			for _, e := range c.Env {
				if e.Name != api.env {
					continue
				}
				var how string
				switch {
				case e.ValueFrom != nil:
					how = "from valueFrom"
				case strings.Contains(e.Value, "$"):
					how = fmt.Sprintf("to %q, which references a variable", e.Value)
				case !literalBaseURL.MatchString(e.Value):
					how = fmt.Sprintf("to %q, not an http(s) URL", e.Value)
				default:
					continue
				}
				return fmt.Sprintf("container %s sets %s %s, which the policy does not read: name the upstream in the annotation %s",
					c.Name, api.env, how, api.annotation)
			}
		}
	}
	// The literal base URLs of each API not named by annotation, and the container that set
	// each first.
	type literal struct{ container, url string }
	literals := map[string][]literal{}
	for _, api := range proxyAPIs {
		if named(api) {
			continue
		}
		for _, c := range pod.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == api.env && !proxyBaseURL.MatchString(e.Value) {
					literals[api.env] = append(literals[api.env], literal{c.Name, e.Value})
				}
			}
		}
	}
	for _, api := range proxyAPIs {
		ls := literals[api.env]
		for _, l := range ls[min(1, len(ls)):] {
			if l.url != ls[0].url {
				return fmt.Sprintf("containers %s and %s set %s to different URLs (%q, %q), and the proxy has one upstream per API: name it in the annotation %s",
					ls[0].container, l.container, api.env, ls[0].url, l.url, api.annotation)
			}
		}
	}
	for _, api := range proxyAPIs {
		ls := literals[api.env]
		if len(ls) == 0 {
			continue
		}
		for _, c := range pod.Spec.Containers {
			if len(c.EnvFrom) > 0 && !hasEnv(c, api.env) {
				return fmt.Sprintf("container %s takes variables from envFrom, which the policy does not read and which may set %s, while container %s sets it to %q: "+
					"set %s in container %s's env, or name the upstream in the annotation %s", c.Name, api.env, ls[0].container, ls[0].url, api.env, c.Name, api.annotation)
			}
		}
	}
	upstream := false
	for _, api := range proxyAPIs {
		upstream = upstream || named(api) || len(literals[api.env]) > 0
	}
	if !upstream {
		envs, annotations := make([]string, 0, len(proxyAPIs)), make([]string, 0, len(proxyAPIs))
		for _, api := range proxyAPIs {
			envs, annotations = append(envs, api.env), append(annotations, api.annotation)
		}
		cause := fmt.Sprintf("the pod names no model endpoint for the proxy: no container sets %s to a literal http(s) URL other than the proxy's, and none of the annotations %s is set",
			strings.Join(envs, ", "), strings.Join(annotations, ", "))
		for _, c := range pod.Spec.Containers {
			if len(c.EnvFrom) > 0 {
				return cause + fmt.Sprintf(" (container %s's envFrom is not read)", c.Name)
			}
		}
		return cause
	}
	return "the proxy injection policy did not run: is its MutatingAdmissionPolicy installed (Kubernetes 1.36 or later), and was the pod created after it? " +
		"With failurePolicy Ignore, an error in the policy admits the pod without the sidecar too"
}

func hasEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}
