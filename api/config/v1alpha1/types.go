/*
Copyright 2026 The compaction-operator Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +kubebuilder:object:root=true

// Configuration is the manager's configuration file (--config): apiVersion
// config.compaction.harness9.io/v1alpha1, kind Configuration. Every field is optional;
// SetDefaults documents what an absent one means. The listen addresses, the kubeconfig and
// the log flags stay command line flags.
type Configuration struct {
	metav1.TypeMeta `json:",inline"`

	// ClusterResourceNamespace is the namespace of the Secrets a ClusterCompactionPolicy
	// references without a namespace, and of the ConfigMaps pinning each session's storage
	// location (tenants must not be able to write there). Default: $POD_NAMESPACE, else
	// compaction-system.
	ClusterResourceNamespace string `json:"clusterResourceNamespace,omitempty"`

	// LeaderElection elects the one replica that runs the controllers.
	LeaderElection LeaderElection `json:"leaderElection,omitempty"`

	// ClientConnection is the manager's rate of requests to the Kubernetes API.
	ClientConnection ClientConnection `json:"clientConnection,omitempty"`

	// Metrics is the Prometheus metrics endpoint (its address is --metrics-bind-address).
	Metrics Metrics `json:"metrics,omitempty"`

	// Controllers tunes the policy and session controllers.
	Controllers Controllers `json:"controllers,omitempty"`

	// Secrets governs the Secrets policies name.
	Secrets Secrets `json:"secrets,omitempty"`

	// Egress lists the S3 endpoints and summarizer hosts policies may name.
	Egress Egress `json:"egress,omitempty"`

	// API is the compaction API agents call every turn (its address is --api-bind-address).
	API API `json:"api,omitempty"`
}

// LeaderElection configures the leader election Lease.
type LeaderElection struct {
	// LeaderElect elects one active controller replica with a Lease (needed when replicas > 1).
	// Default: false.
	LeaderElect bool `json:"leaderElect,omitempty"`
	// ResourceName is the name of the Lease. Default: compaction-operator.harness9.io.
	ResourceName string `json:"resourceName,omitempty"`
	// ResourceNamespace is the namespace of the Lease. Default: the namespace the pod runs
	// in (controller-runtime reads it from the ServiceAccount's mounted token).
	ResourceNamespace string `json:"resourceNamespace,omitempty"`
	// LeaseDuration is how long a non-leader waits before taking over an unrenewed Lease.
	// Default: 15s.
	LeaseDuration metav1.Duration `json:"leaseDuration,omitempty"`
	// RenewDeadline is how long the leader keeps trying to renew its Lease before it gives
	// up and exits (an API server outage longer than this restarts the leader). Default: 10s.
	RenewDeadline metav1.Duration `json:"renewDeadline,omitempty"`
	// RetryPeriod is how often leader election clients retry. Default: 2s.
	RetryPeriod metav1.Duration `json:"retryPeriod,omitempty"`
}

// ClientConnection is the client of the Kubernetes API.
type ClientConnection struct {
	// QPS is the steady requests per second to the Kubernetes API (a new session costs three
	// writes; status writes of the compaction API count here). Default: 100.
	QPS float64 `json:"qps,omitempty"`
	// Burst is the burst of requests to the Kubernetes API. Default: 200.
	Burst int32 `json:"burst,omitempty"`
}

// Metrics configures the metrics endpoint.
type Metrics struct {
	// Secure serves metrics over HTTPS, to callers authenticated and authorized
	// (TokenReview, SubjectAccessReview on GET /metrics); false serves plain HTTP without
	// auth. Default: true.
	Secure *bool `json:"secure,omitempty"`
	// EnableHTTP2 allows HTTP/2 on the metrics server (off by default: HTTP/2 Rapid Reset,
	// CVE-2023-44487). Default: false.
	EnableHTTP2 bool `json:"enableHTTP2,omitempty"`
	// ServiceName is the Service of the metrics endpoint: the self-signed certificate is for
	// its DNS names too, so a scraper can verify it.
	// Default: compaction-operator-controller-manager-metrics-service.
	ServiceName string `json:"serviceName,omitempty"`
}

// Controllers tunes the controllers.
type Controllers struct {
	// SessionWorkers is how many AgentSessions are reconciled (and their storage cleaned up)
	// at once. Default: 4.
	SessionWorkers int32 `json:"sessionWorkers,omitempty"`
	// StorageProbeInterval is how often a Ready policy's storage is probed again. Default: 5m.
	StorageProbeInterval metav1.Duration `json:"storageProbeInterval,omitempty"`
	// StorageRetryInterval is how soon a policy whose storage or Secrets failed is checked
	// again. Default: 30s.
	StorageRetryInterval metav1.Duration `json:"storageRetryInterval,omitempty"`
	// GCRetryMaxDelay is the longest wait between attempts to delete a deleted session's
	// objects while storage fails. Default: 2m.
	GCRetryMaxDelay metav1.Duration `json:"gcRetryMaxDelay,omitempty"`
}

// Secrets governs the Secrets policies name (the operator may get Secrets, not list or
// watch them).
type Secrets struct {
	// ClusterPolicyNamespaces are the namespaces, besides clusterResourceNamespace, whose
	// Secrets a ClusterCompactionPolicy may name; a cluster policy naming a Secret elsewhere
	// is not Ready (SecretNamespaceNotAllowed) and the Secret is never read. Default: none.
	ClusterPolicyNamespaces []string `json:"clusterPolicyNamespaces,omitempty"`
	// RecheckInterval is how often the policy controllers look at the resourceVersions of
	// the Secrets a policy names: a created, rotated or fixed Secret is noticed within it.
	// Default: 1m.
	RecheckInterval metav1.Duration `json:"recheckInterval,omitempty"`
	// CacheTTL is how long a Secret value read for a policy is kept in memory (only the keys
	// used); the compaction API uses a rotated credential within it. Default: 30s.
	CacheTTL metav1.Duration `json:"cacheTTL,omitempty"`
}

// Egress lists what policies may make the manager connect to.
type Egress struct {
	// AllowedEndpoints are the S3 endpoints and summarizer hosts policies may name: host
	// names (any port), *.domain wildcards, host:port, IP addresses, CIDRs. A policy naming
	// another is not Ready (EndpointNotAllowed) and never dialled; hosts no name entry
	// matches are dialled only to addresses in the IP/CIDR entries, checked on the resolved
	// address. Empty (the default) allows every endpoint; with a list, HTTP(S)_PROXY is not
	// used for these connections.
	AllowedEndpoints []string `json:"allowedEndpoints,omitempty"`
	// NamespacedPolicyEndpoints are the S3 endpoints and summarizer hosts a namespaced
	// CompactionPolicy may name (same syntax; allowedEndpoints applies too), or ["*"] for
	// all that allowedEndpoints allows. A namespace admin writes those policies, and the
	// manager connects to and reads from what they name: absent (the default), they may name
	// only what allowedEndpoints lists, and nothing when that is empty; [] allows none.
	// ClusterCompactionPolicies are not affected. (No omitempty: a written [] stays [].)
	NamespacedPolicyEndpoints []string `json:"namespacedPolicyEndpoints"`
}

// API configures the compaction API.
type API struct {
	// TokenAudience is the audience a caller's bearer token must be for (TokenReview
	// audiences): agents send a projected ServiceAccount token with this audience; a token
	// for the Kubernetes API itself is refused. Default: compaction.harness9.io.
	TokenAudience string `json:"tokenAudience,omitempty"`
	// RequestTimeout is the deadline of one compaction API request, summarizer calls
	// included. Default: 1m.
	RequestTimeout metav1.Duration `json:"requestTimeout,omitempty"`
	// ReadTimeout is the longest time a client may take to send a request, headers and
	// body; a stalled upload is answered 408 after it. Default: 30s.
	ReadTimeout metav1.Duration `json:"readTimeout,omitempty"`
	// MaxBodyBytes is the largest request body accepted (413 over it); a request holds a few
	// times its body in memory, so raise the memory limit with it. Default: 8388608 (8 MiB).
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
	// MaxMessages is the most messages one request may carry (413 over it). Default: 10000.
	MaxMessages int32 `json:"maxMessages,omitempty"`
	// MaxInflightBytes is the in-flight budget: the bytes the requests being served may
	// hold at once, each counting its body plus 128 per JSON value in it (at least 64 KiB);
	// a request over it is answered 429 with Retry-After. Requests hold four to five times
	// it in memory: raise the memory limit with it. Default: 67108864 (64 MiB).
	MaxInflightBytes int64 `json:"maxInflightBytes,omitempty"`
	// MaxInflightBytesPerCaller is what one caller's requests (a ServiceAccount, or one
	// pod's bound tokens) may hold of maxInflightBytes together; a caller's only request is
	// taken whatever its size. 0 (the default): an eighth of maxInflightBytes; -1: no share.
	MaxInflightBytesPerCaller int64 `json:"maxInflightBytesPerCaller,omitempty"`
	// UsageInterval is the least time between two status writes of a session for turns that
	// needed no compaction. Default: 5s.
	UsageInterval metav1.Duration `json:"usageInterval,omitempty"`
	// StatusInterval is the least time between two status writes of one session by a
	// replica: what its compactions change meanwhile is written together (counters added,
	// the latest tier, usage and compaction kept; events are not delayed); 0 writes every
	// change within half a second. Default: 5s.
	StatusInterval *metav1.Duration `json:"statusInterval,omitempty"`
	// StateTrust is how long after storage last confirmed a conversation's state a turn that
	// continues from this replica's own answer skips re-reading it (writes stay conditional,
	// so another replica's save is never overwritten; a turn that writes nothing may miss,
	// for this long, what another replica saved without moving the watermark); 0 re-reads it
	// every turn. Default: 1m.
	StateTrust *metav1.Duration `json:"stateTrust,omitempty"`
	// SummariesOffTurn never has a turn wait for an LLM summarizer: each session's next
	// summary is prepared in the background once its view passes Warn, and used at once at
	// the Soft or Full crossing, or the turn summarizes extractively when none is ready
	// (4 workers and a queue of 64 per replica). false calls the LLM on the turn that crosses
	// Soft or Full, which waits for it. Default: true.
	SummariesOffTurn *bool `json:"summariesOffTurn,omitempty"`
	// Reviews limits the TokenReviews and SubjectAccessReviews the API makes.
	Reviews Reviews `json:"reviews,omitempty"`
	// SummarizerBudget limits paid summarizer calls across sessions.
	SummarizerBudget SummarizerBudget `json:"summarizerBudget,omitempty"`
	// TLS is the API's (and the metrics endpoint's) serving certificate.
	TLS TLS `json:"tls,omitempty"`
}

// Reviews limits the compaction API's TokenReviews and SubjectAccessReviews.
type Reviews struct {
	// QPS is the steady TokenReviews and SubjectAccessReviews per second, on a client of
	// their own (not counted in clientConnection.qps). Default: 50.
	QPS float64 `json:"qps,omitempty"`
	// Burst is the burst of qps. Default: 100.
	Burst int32 `json:"burst,omitempty"`
	// NewTokenRate is the tokens per second reviewed that the API has no positive answer for
	// (new agents, junk); over it (and newTokenBurst) a request is answered 429 with
	// Retry-After. Tokens known to be good are re-reviewed without limit. Default: 20.
	NewTokenRate float64 `json:"newTokenRate,omitempty"`
	// NewTokenBurst is the burst of newTokenRate: new tokens reviewed at once, e.g. when
	// every agent reconnects after a restart. Default: 100.
	NewTokenBurst int32 `json:"newTokenBurst,omitempty"`
	// CallerRate is the SubjectAccessReviews per second one caller (a ServiceAccount, or one
	// pod's bound tokens) may cost beyond its cached answers; over it (and callerBurst) a
	// request is answered 429 with Retry-After. Default: 2.
	CallerRate float64 `json:"callerRate,omitempty"`
	// CallerBurst is the burst of callerRate. Default: 20.
	CallerBurst int32 `json:"callerBurst,omitempty"`
}

// SummarizerBudget limits paid summarizer calls of many sessions together, per replica, on
// top of each session's own summarizer.maxCallsPerHour.
type SummarizerBudget struct {
	// NamespaceSessions: the sessions of one namespace make at most this many times their
	// policy's summarizer.maxCallsPerHour paid calls an hour together; 0: no such limit.
	// Default: 20.
	NamespaceSessions *int32 `json:"namespaceSessions,omitempty"`
	// PolicySessions: the sessions of one policy (all namespaces) make at most this many
	// times its summarizer.maxCallsPerHour paid calls an hour together; 0: no such limit.
	// Default: 100.
	PolicySessions *int32 `json:"policySessions,omitempty"`
}

// TLS is where the compaction API's certificate comes from. Without certDir the manager
// issues a self-signed CA and certificate itself, kept in secretName and rotated before
// expiry.
type TLS struct {
	// InsecureServeHTTP serves the compaction API over plain HTTP: bearer tokens and
	// conversations cross the network unencrypted. Only for a network you trust end to end;
	// exclusive with certDir. Default: false.
	InsecureServeHTTP bool `json:"insecureServeHTTP,omitempty"`
	// CertDir is a directory with tls.crt and tls.key (reloaded on change), e.g. a mounted
	// cert-manager Secret; its ca.crt, if any, is published in caConfigMap. Default: empty,
	// the self-signed certificate.
	CertDir string `json:"certDir,omitempty"`
	// Namespace is the namespace of secretName, caConfigMap and the Services the certificate
	// is for. Default: $POD_NAMESPACE, else compaction-system.
	Namespace string `json:"namespace,omitempty"`
	// ServiceName is the Service of the compaction API: the self-signed certificate is for its
	// DNS names (and localhost). Default: compaction-operator-api.
	ServiceName string `json:"serviceName,omitempty"`
	// SecretName is the Secret in namespace holding the self-signed CA and serving
	// certificate that every replica serves. Default: compaction-operator-api-cert.
	SecretName string `json:"secretName,omitempty"`
	// CAConfigMap is the ConfigMap in namespace where the CA bundle agents verify the API
	// with is published (key ca.crt); every ServiceAccount may read it.
	// Default: compaction-operator-api-ca.
	CAConfigMap string `json:"caConfigMap,omitempty"`
	// CAValidity is the lifetime of a self-signed CA; the next one is published at 2/3 of it
	// and signs from 5/6 on. Default: 26280h (3 years).
	CAValidity metav1.Duration `json:"caValidity,omitempty"`
	// CertValidity is the lifetime of a self-signed serving certificate, renewed at 2/3 of
	// it without restart. Default: 2160h (90 days).
	CertValidity metav1.Duration `json:"certValidity,omitempty"`
}
