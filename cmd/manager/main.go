// Command manager is the compaction-operator: the policy, session and pod controllers, the
// compaction API agents call every turn, metrics, health probes and leader election.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactapi"
	"github.com/harness9/compaction-operator/internal/controller"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/servingcert"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

// The metrics endpoint authenticates and authorizes its callers.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

func main() {
	os.Exit(run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stderr))
}

type options struct {
	kubeconfig               string
	metricsAddr              string
	pprofAddr                string
	metricsSecure            bool
	probeAddr                string
	leaderElect              bool
	leaderElectionID         string
	leaderElectionNamespace  string
	leaseDuration            time.Duration
	renewDeadline            time.Duration
	retryPeriod              time.Duration
	clusterResourceNamespace string
	clusterSecretNamespaces  []string
	allowedEndpoints         []string
	namespacedEndpoints      []string
	namespacedEndpointsSet   bool
	probeInterval            time.Duration
	retryInterval            time.Duration
	secretRecheckInterval    time.Duration
	secretCacheTTL           time.Duration
	gcRetryMaxDelay          time.Duration
	enableHTTP2              bool
	apiAddr                  string
	apiCertDir               string
	apiInsecureHTTP          bool
	apiCertNamespace         string
	apiServiceName           string
	metricsServiceName       string
	apiCertSecret            string
	apiCAConfigMap           string
	apiCAValidity            time.Duration
	apiCertValidity          time.Duration
	apiMaxBodyBytes          int64
	apiMaxMessages           int
	apiMaxInflightBytes      int64
	apiRequestTimeout        time.Duration
	apiReadTimeout           time.Duration
	apiUsageInterval         time.Duration
	apiStatusInterval        time.Duration
	apiStateTrust            time.Duration
	apiSummariesOffTurn      bool
	apiTokenAudience         string
	apiReviewQPS             float64
	apiReviewBurst           int
	apiNewTokenRate          float64
	apiNewTokenBurst         int
	apiCallerReviewRate      float64
	apiCallerReviewBurst     int
	apiInflightPerCaller     int64
	apiSummarizerNamespace   int
	apiSummarizerPolicy      int
	showVersion              bool
	kubeQPS                  float64
	sessionWorkers           int
	kubeBurst                int
	zap                      zap.Options
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{zap: zap.Options{Development: false}}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "Usage: manager [flags]\n\n"+
			"Runs the compaction-operator: reconciles CompactionPolicy, ClusterCompactionPolicy and\n"+
			"AgentSession objects, creates AgentSessions for pods annotated with %s,\n"+
			"and deletes a session's stored objects when the session is deleted.\n\nFlags:\n", controller.PolicyAnnotation)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig; default: $KUBECONFIG, the in-cluster config, then ~/.kube/config")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint; \"0\" disables it")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, for callers authenticated and authorized (TokenReview, SubjectAccessReview on GET /metrics); false serves plain HTTP without auth")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "address of Go's /debug/pprof endpoints (plain HTTP, no auth: for profiling on a development machine); empty disables them")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect one active controller replica with a Lease (needed when replicas > 1)")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "compaction-operator.harness9.io", "name of the leader election Lease")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease; default: the pod's namespace")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a non-leader waits before taking over an unrenewed Lease")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second,
		"how long the leader keeps trying to renew its Lease before it gives up and exits (an API server outage longer than this restarts the leader)")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "how often leader election clients retry")
	fs.StringVar(&o.clusterResourceNamespace, "cluster-resource-namespace", envOr("POD_NAMESPACE", "compaction-system"),
		"namespace of the Secrets a ClusterCompactionPolicy references without a namespace, and of the ConfigMaps pinning each session's storage location (tenants must not be able to write there); defaults to $POD_NAMESPACE when set")
	fs.Func("cluster-policy-secret-namespaces",
		"comma-separated namespaces, besides --cluster-resource-namespace, whose Secrets a ClusterCompactionPolicy may name; a cluster policy naming a Secret elsewhere is not Ready (SecretNamespaceNotAllowed) and the Secret is never read",
		func(v string) error {
			for n := range strings.SplitSeq(v, ",") {
				if n = strings.TrimSpace(n); n != "" {
					if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
						return fmt.Errorf("namespace %q: %s", n, strings.Join(errs, "; "))
					}
					o.clusterSecretNamespaces = append(o.clusterSecretNamespaces, n)
				}
			}
			return nil
		})
	fs.Func("allowed-endpoints",
		"comma-separated S3 endpoints and summarizer hosts policies may name: host names (any port), *.domain wildcards, host:port, IP addresses, CIDRs. "+
			"A policy naming another is not Ready (EndpointNotAllowed) and never dialled; hosts no name entry matches are dialled only to addresses in the IP/CIDR entries, checked on the resolved address. "+
			"Empty (the default) allows every endpoint; with a list, HTTP(S)_PROXY is not used for these connections",
		func(v string) error {
			o.allowedEndpoints = append(o.allowedEndpoints, strings.Split(v, ",")...)
			return nil
		})
	fs.Func("namespaced-policy-endpoints",
		"comma-separated S3 endpoints and summarizer hosts a namespaced CompactionPolicy may name (same syntax as --allowed-endpoints, which applies too), or * for all that --allowed-endpoints allows. "+
			"A namespace admin writes those policies, and the manager connects to and reads from what they name: unset, they may name only what --allowed-endpoints lists, and nothing when that is empty. "+
			"A policy naming another is not Ready (EndpointNotAllowed). ClusterCompactionPolicies are not affected",
		func(v string) error {
			o.namespacedEndpointsSet = true
			o.namespacedEndpoints = append(o.namespacedEndpoints, strings.Split(v, ",")...)
			return nil
		})
	fs.DurationVar(&o.probeInterval, "storage-probe-interval", controller.DefaultProbeInterval, "how often a Ready policy's storage is probed again")
	fs.DurationVar(&o.retryInterval, "storage-retry-interval", controller.DefaultRetryInterval, "how soon a policy whose storage or Secrets failed is checked again")
	fs.DurationVar(&o.secretRecheckInterval, "secret-recheck-interval", controller.DefaultSecretRecheckInterval,
		"how often the policy controllers look at the resourceVersions of the Secrets a policy names (the operator may get Secrets, not list or watch them): a created, rotated or fixed Secret is noticed within it")
	fs.DurationVar(&o.secretCacheTTL, "secret-cache-ttl", policy.DefaultSecretTTL,
		"how long a Secret value read for a policy is kept in memory (only the keys used); the compaction API uses a rotated credential within it")
	fs.DurationVar(&o.gcRetryMaxDelay, "gc-retry-max-delay", controller.DefaultRetryMaxDelay, "longest wait between attempts to delete a deleted session's objects while storage fails")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "allow HTTP/2 on the metrics server (off by default: HTTP/2 Rapid Reset, CVE-2023-44487)")
	fs.StringVar(&o.apiAddr, "api-bind-address", ":8082", "address of the compaction API that agents call; \"0\" disables it")
	fs.StringVar(&o.apiCertDir, "api-cert-dir", "",
		"directory with tls.crt and tls.key for the compaction API and the metrics endpoint (reloaded on change), e.g. a cert-manager Secret; its ca.crt, if any, is published in --api-ca-configmap. "+
			"Empty: the manager issues a self-signed CA and certificate itself, kept in --api-cert-secret and rotated before expiry")
	fs.BoolVar(&o.apiInsecureHTTP, "api-insecure-serve-http", false,
		"serve the compaction API over plain HTTP: bearer tokens and conversations cross the network unencrypted. Only for a network you trust end to end")
	fs.StringVar(&o.apiCertNamespace, "api-cert-namespace", envOr("POD_NAMESPACE", "compaction-system"),
		"namespace of --api-cert-secret, --api-ca-configmap and the Services the certificate is for; defaults to $POD_NAMESPACE when set")
	fs.StringVar(&o.apiServiceName, "api-service-name", "compaction-operator-api", "Service of the compaction API: the self-signed certificate is for its DNS names (and localhost)")
	fs.StringVar(&o.metricsServiceName, "metrics-service-name", "compaction-operator-controller-manager-metrics-service",
		"Service of the metrics endpoint: the self-signed certificate is for its DNS names too, so a scraper can verify it")
	fs.StringVar(&o.apiCertSecret, "api-cert-secret", "compaction-operator-api-cert",
		"Secret in --api-cert-namespace holding the self-signed CA and serving certificate that every replica serves (without --api-cert-dir)")
	fs.StringVar(&o.apiCAConfigMap, "api-ca-configmap", "compaction-operator-api-ca",
		"ConfigMap in --api-cert-namespace where the CA bundle agents verify the API with is published (key ca.crt); every ServiceAccount may read it")
	fs.DurationVar(&o.apiCAValidity, "api-ca-validity", servingcert.DefaultCAValidity,
		"lifetime of a self-signed CA; the next one is published at 2/3 of it and signs from 5/6 on")
	fs.DurationVar(&o.apiCertValidity, "api-cert-validity", servingcert.DefaultCertValidity,
		"lifetime of a self-signed serving certificate; it is renewed at 2/3 of it, without restart")
	fs.Int64Var(&o.apiMaxBodyBytes, "api-max-body-bytes", compactapi.DefaultMaxBodyBytes,
		"largest request body the compaction API accepts (413 over it); a request holds a few times its body in memory, so raise the memory limit with it")
	fs.IntVar(&o.apiMaxMessages, "api-max-messages", compactapi.DefaultMaxMessages,
		"most messages one compaction API request may carry (413 over it); a body may hold 32 JSON values and its messages 4 unknown fields in all per message of this limit")
	fs.Int64Var(&o.apiMaxInflightBytes, "api-max-inflight-bytes", compactapi.DefaultMaxInflightBytes,
		"in-flight budget of the compaction API: the bytes the requests being served may hold at once, each counting its body plus 128 per JSON value in it (at least 64 KiB); "+
			"a request over it is answered 429 with Retry-After. Requests hold four to five times it in memory: raise the memory limit with it")
	fs.DurationVar(&o.apiRequestTimeout, "api-request-timeout", compactapi.DefaultRequestTimeout, "deadline of one compaction API request, summarizer calls included")
	fs.DurationVar(&o.apiReadTimeout, "api-read-timeout", compactapi.DefaultReadTimeout,
		"longest time a client may take to send a compaction API request, headers and body; a stalled upload is answered 408 after it")
	fs.DurationVar(&o.apiUsageInterval, "api-usage-interval", compactapi.DefaultUsageInterval, "least time between two status writes of a session for turns that needed no compaction")
	fs.DurationVar(&o.apiStatusInterval, "api-status-interval", compactapi.DefaultStatusInterval,
		"least time between two status writes of one session by a replica: what its compactions change meanwhile is written together (counters added, the latest tier, usage and compaction kept; events are not delayed); 0 writes every change within half a second")
	fs.BoolVar(&o.apiSummariesOffTurn, "api-summaries-off-turn", true,
		"never have a turn wait for an LLM summarizer (on by default): prepare each session's next summary in the background once its view passes Warn, and at the Soft or Full crossing use it at once, "+
			"or summarize extractively at once when none is ready (the LLM summary made late is merged at the next compaction); 4 workers and a queue of 64 per replica, "+
			"work of a deleted session cancelled. --api-summaries-off-turn=false calls the LLM on the turn that crosses Soft or Full, which waits for it")
	fs.DurationVar(&o.apiStateTrust, "api-state-trust", compactapi.DefaultStateTrust,
		"how long after storage last confirmed a conversation's state (or that it has none yet) a turn that continues from this replica's own answer (or sends the full history of a conversation whose watermark has not moved) skips re-reading it (writes stay conditional, so another replica's save is never overwritten; a turn that writes nothing may miss, for this long, what another replica saved without moving the watermark, or its first save or summary); 0 re-reads it every turn")
	fs.StringVar(&o.apiTokenAudience, "api-token-audience", compactclient.DefaultTokenAudience,
		"audience a caller's bearer token must be for (TokenReview audiences): agents send a projected ServiceAccount token with this audience; a token for the Kubernetes API itself is refused")
	fs.Float64Var(&o.apiReviewQPS, "api-review-qps", compactapi.DefaultReviewQPS,
		"steady TokenReviews and SubjectAccessReviews per second of the compaction API, on a client of their own (not counted in --kube-api-qps)")
	fs.IntVar(&o.apiReviewBurst, "api-review-burst", compactapi.DefaultReviewBurst, "burst of --api-review-qps")
	fs.Float64Var(&o.apiNewTokenRate, "api-new-token-rate", compactapi.DefaultNewTokenRate,
		"tokens per second the compaction API reviews that it has no positive answer for (new agents, junk); over it (and --api-new-token-burst) "+
			"a request is answered 429 with Retry-After. Tokens known to be good are re-reviewed without limit")
	fs.IntVar(&o.apiNewTokenBurst, "api-new-token-burst", compactapi.DefaultNewTokenBurst, "burst of --api-new-token-rate: new tokens reviewed at once, e.g. when every agent reconnects after a restart")
	fs.Float64Var(&o.apiCallerReviewRate, "api-caller-review-rate", compactapi.DefaultCallerReviewRate,
		"SubjectAccessReviews per second one caller (a ServiceAccount, or one pod's bound tokens) may cost the compaction API beyond its cached answers (questions about sessions it did not ask about before); over it (and --api-caller-review-burst) a request is answered 429 with Retry-After")
	fs.IntVar(&o.apiCallerReviewBurst, "api-caller-review-burst", compactapi.DefaultCallerReviewBurst, "burst of --api-caller-review-rate")
	fs.Int64Var(&o.apiInflightPerCaller, "api-max-inflight-bytes-per-caller", 0,
		"what one caller's requests (a ServiceAccount, or one pod's bound tokens) may hold of --api-max-inflight-bytes together; a caller's only request is taken whatever its size; 0: an eighth of --api-max-inflight-bytes; -1: no share")
	fs.IntVar(&o.apiSummarizerNamespace, "api-summarizer-namespace-sessions", compactapi.DefaultSummarizerNamespaceSessions,
		"the sessions of one namespace make at most this many times their policy's summarizer.maxCallsPerHour paid summarizer calls an hour together, per replica (on top of each session's own budget); 0: no such limit")
	fs.IntVar(&o.apiSummarizerPolicy, "api-summarizer-policy-sessions", compactapi.DefaultSummarizerPolicySessions,
		"the sessions of one policy (all namespaces) make at most this many times its summarizer.maxCallsPerHour paid summarizer calls an hour together, per replica; 0: no such limit")
	fs.Float64Var(&o.kubeQPS, "kube-api-qps", 100,
		"steady requests per second to the Kubernetes API (a new session costs three writes; status writes of the compaction API count here)")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 200, "burst of requests to the Kubernetes API")
	fs.IntVar(&o.sessionWorkers, "session-workers", controller.DefaultSessionWorkers, "AgentSessions reconciled (and their storage cleaned up) at once")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.apiMaxBodyBytes < 1 || o.apiMaxMessages < 1 || o.apiMaxInflightBytes < 1 {
		return nil, fmt.Errorf("--api-max-body-bytes (%d), --api-max-messages (%d) and --api-max-inflight-bytes (%d) must be at least 1",
			o.apiMaxBodyBytes, o.apiMaxMessages, o.apiMaxInflightBytes)
	}
	if strings.TrimSpace(o.apiTokenAudience) == "" {
		return nil, errors.New("--api-token-audience must not be empty")
	}
	if o.apiReviewQPS <= 0 || o.apiReviewBurst < 1 || o.apiNewTokenRate <= 0 || o.apiNewTokenBurst < 1 {
		return nil, fmt.Errorf("--api-review-qps (%g), --api-review-burst (%d), --api-new-token-rate (%g) and --api-new-token-burst (%d) must be positive",
			o.apiReviewQPS, o.apiReviewBurst, o.apiNewTokenRate, o.apiNewTokenBurst)
	}
	if o.apiCallerReviewRate <= 0 || o.apiCallerReviewBurst < 1 || o.apiInflightPerCaller < -1 || o.apiSummarizerNamespace < 0 || o.apiSummarizerPolicy < 0 {
		return nil, fmt.Errorf("--api-caller-review-rate (%g) and --api-caller-review-burst (%d) must be positive, --api-max-inflight-bytes-per-caller (%d) at least -1, "+
			"--api-summarizer-namespace-sessions (%d) and --api-summarizer-policy-sessions (%d) at least 0",
			o.apiCallerReviewRate, o.apiCallerReviewBurst, o.apiInflightPerCaller, o.apiSummarizerNamespace, o.apiSummarizerPolicy)
	}
	if _, _, err := o.endpoints(); err != nil {
		return nil, err
	}
	if o.secretRecheckInterval <= 0 || o.secretCacheTTL <= 0 {
		return nil, fmt.Errorf("--secret-recheck-interval (%s) and --secret-cache-ttl (%s) must be positive", o.secretRecheckInterval, o.secretCacheTTL)
	}
	if o.apiInsecureHTTP && o.apiCertDir != "" {
		return nil, errors.New("--api-insecure-serve-http and --api-cert-dir are exclusive")
	}
	if o.apiCAValidity <= 0 || o.apiCertValidity <= 0 {
		return nil, fmt.Errorf("--api-ca-validity (%s) and --api-cert-validity (%s) must be positive", o.apiCAValidity, o.apiCertValidity)
	}
	if o.sessionWorkers < 1 {
		return nil, fmt.Errorf("--session-workers must be at least 1, got %d", o.sessionWorkers)
	}
	if o.retryPeriod <= 0 || o.renewDeadline <= o.retryPeriod || o.leaseDuration <= o.renewDeadline {
		return nil, fmt.Errorf("leader election needs 0 < --leader-election-retry-period (%s) < --leader-election-renew-deadline (%s) < --leader-election-lease-duration (%s)",
			o.retryPeriod, o.renewDeadline, o.leaseDuration)
	}
	return o, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "manager:", err)
		return 2
	}
	if o.showVersion {
		_, _ = fmt.Fprintln(stderr, "compaction-operator manager", versionString())
		return 0
	}
	o.zap.DestWriter = stderr
	log := zap.New(zap.UseFlagOptions(&o.zap))
	ctrl.SetLogger(log)
	if err := runManager(ctx, o); err != nil {
		log.Error(err, "manager failed")
		return 1
	}
	return 0
}

// runManager builds the manager, sets up the controllers and the compaction API, and runs
// them until ctx ends.
func runManager(ctx context.Context, o *options) error {
	log := ctrl.Log.WithName("setup")
	// The API's certificate (the self-signed CA's or the one of --api-cert-dir) serves the
	// metrics too, so a scraper can verify them with the published CA; it is known only once
	// the manager exists.
	certs := &lateCertificates{}
	mgr, err := newManager(o, certs)
	if err != nil {
		return err
	}
	allowed, namespaced, err := o.endpoints()
	if err != nil {
		return err
	}
	stores := &policy.Stores{}
	secrets := policy.NewSecretCache(mgr.GetAPIReader(), o.secretCacheTTL)
	if err := controller.Setup(ctx, mgr, controller.Config{
		Stores:                   stores,
		Secrets:                  secrets,
		SecretRecheckInterval:    o.secretRecheckInterval,
		ClusterSecretNamespaces:  o.clusterSecretNamespaces,
		ClusterResourceNamespace: o.clusterResourceNamespace,
		ProbeInterval:            o.probeInterval,
		RetryInterval:            o.retryInterval,
		RetryMaxDelay:            o.gcRetryMaxDelay,
		SessionWorkers:           o.sessionWorkers,
		AllowedEndpoints:         allowed,
		NamespacedEndpoints:      namespaced,
	}); err != nil {
		return err
	}
	if o.apiAddr != "0" {
		if err := addCompactionAPI(mgr, o, certs, stores, secrets, allowed, namespaced); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}

	log.Info("starting manager", "version", versionString(), "leaderElection", o.leaderElect,
		"clusterResourceNamespace", o.clusterResourceNamespace, "clusterPolicySecretNamespaces", o.clusterSecretNamespaces,
		"allowedEndpoints", allowed.String(), "namespacedPolicyEndpoints", namespaced.String())
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// reconciliationTimeout bounds every Reconcile of the four controllers.
const reconciliationTimeout = 2 * time.Minute

// newManager builds the controller-runtime manager: its client, cache, leader election,
// probes and metrics server (served with certs when the API serves TLS).
func newManager(o *options, certs *lateCertificates) (ctrl.Manager, error) {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	// client-go's defaults (5 QPS, burst 10) would throttle the status writes of a busy API.
	cfg.QPS, cfg.Burst = float32(o.kubeQPS), o.kubeBurst
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := compactionv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}

	var tlsOpts []func(*tls.Config)
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	if o.apiAddr != "0" && !o.apiInsecureHTTP {
		tlsOpts = append(tlsOpts, func(c *tls.Config) {
			c.Certificates = nil
			c.GetCertificate = certs.GetCertificate
		})
	}
	metrics := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure, TLSOpts: tlsOpts}
	if o.metricsSecure {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metrics,
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		LeaseDuration:           &o.leaseDuration,
		RenewDeadline:           &o.renewDeadline,
		RetryPeriod:             &o.retryPeriod,
		// main returns right after the manager stops, so the Lease can be handed over at once.
		LeaderElectionReleaseOnCancel: true,
		// No reconcile holds a worker for good, whatever an endpoint a policy names does
		// (each storage call has a shorter deadline of its own: probes 10 s, deletions 30 s).
		Controller: config.Controller{ReconciliationTimeout: reconciliationTimeout},
		// Secrets are read on demand (policy.SecretCache keeps the values of the keys used for
		// a short time); the operator may get Secrets but neither list nor watch them, so the
		// manager's cache must never start an informer for them.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		// The only ConfigMaps the manager reads are the sessions' pinned storage locations,
		// in the cluster resource namespace (where its Role lets it list them).
		Cache: cache.Options{
			ByObject: policy.LocationCache(o.clusterResourceNamespace),
			// Nothing reads managedFields: without them every cached object is smaller, and
			// each read from the cache copies less (the compaction API reads a session, its
			// policy and its pinned location on every request).
			DefaultTransform: cache.TransformStripManagedFields(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	return mgr, nil
}

// endpoints parses --allowed-endpoints and --namespaced-policy-endpoints into the lists for
// all policies and for namespaced ones (the latter narrowed by the former).
func (o *options) endpoints() (allowed, namespaced *egress.Allowlist, err error) {
	const flag = "--namespaced-policy-endpoints"
	if allowed, err = egress.Parse(o.allowedEndpoints); err != nil {
		return nil, nil, err
	}
	switch {
	case !o.namespacedEndpointsSet && allowed == nil:
		return nil, egress.None(flag + " (unset, and --allowed-endpoints empty)"), nil
	case !o.namespacedEndpointsSet:
		return allowed, allowed, nil
	case len(o.namespacedEndpoints) == 1 && strings.TrimSpace(o.namespacedEndpoints[0]) == "*":
		return allowed, allowed, nil
	}
	ns, err := egress.ParseFlag(flag, o.namespacedEndpoints)
	if err != nil {
		return nil, nil, err
	}
	if ns == nil {
		ns = egress.None(flag)
	}
	return allowed, ns.And(allowed), nil
}

// addCompactionAPI adds the compaction API server, with its certificate source and its
// readiness check, to mgr.

func addCompactionAPI(mgr ctrl.Manager, o *options, certs *lateCertificates, stores *policy.Stores, secrets *policy.SecretCache, allowed, namespaced *egress.Allowlist) error {
	var src compactapi.CertificateSource
	if !o.apiInsecureHTTP {
		var err error
		if src, err = certificateSource(mgr, o); err != nil {
			return err
		}
		certs.set(src)
	}
	api, err := compactapi.New(mgr, compactapi.Config{
		BindAddress: o.apiAddr, Certificates: src, InsecureServeHTTP: o.apiInsecureHTTP,
		MaxBodyBytes: o.apiMaxBodyBytes, MaxMessages: o.apiMaxMessages,
		MaxInflightBytes: o.apiMaxInflightBytes,
		RequestTimeout:   o.apiRequestTimeout, ReadTimeout: o.apiReadTimeout, UsageInterval: o.apiUsageInterval, StatusInterval: o.apiStatusInterval, StateTrust: o.apiStateTrust, SummariesOffTurn: o.apiSummariesOffTurn,
		ClusterResourceNamespace: o.clusterResourceNamespace, TokenAudience: o.apiTokenAudience,
		ReviewQPS: o.apiReviewQPS, ReviewBurst: o.apiReviewBurst, NewTokenRate: o.apiNewTokenRate, NewTokenBurst: o.apiNewTokenBurst,
		CallerReviewRate: o.apiCallerReviewRate, CallerReviewBurst: o.apiCallerReviewBurst, MaxInflightBytesPerCaller: o.apiInflightPerCaller,
		SummarizerNamespaceSessions: orNone(o.apiSummarizerNamespace), SummarizerPolicySessions: orNone(o.apiSummarizerPolicy),
		Secrets: secrets, ClusterSecretNamespaces: o.clusterSecretNamespaces, AllowedEndpoints: allowed,
		NamespacedEndpoints: namespaced,
	}, stores, crmetrics.Registry)
	if err != nil {
		return err
	}
	if err := mgr.Add(api); err != nil {
		return fmt.Errorf("add compaction API: %w", err)
	}
	if err := mgr.AddReadyzCheck("compaction-api", api.ReadyCheck); err != nil {
		return fmt.Errorf("add compaction API ready check: %w", err)
	}
	return nil
}

// orNone is a flag's count for compactapi.Config, where 0 means the default: a flag's 0 (no
// limit) is -1 there.
func orNone(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// certificateSource serves --api-cert-dir's certificate, or else issues and rotates a
// self-signed one; either runs on every replica.
func certificateSource(mgr ctrl.Manager, o *options) (compactapi.CertificateSource, error) {
	log := ctrl.Log.WithName("serving-cert")
	ca := types.NamespacedName{Namespace: o.apiCertNamespace, Name: o.apiCAConfigMap}
	// Uncached reads: the manager caches no Secret, and no ConfigMap of this namespace
	// unless it is the cluster resource namespace.
	reader, writer := mgr.GetAPIReader(), mgr.GetClient()
	if o.apiCertDir != "" {
		f, err := servingcert.NewFiles(o.apiCertDir, &ca, reader, writer, log)
		if err != nil {
			return nil, fmt.Errorf("compaction API certificate: %w", err)
		}
		if err := mgr.Add(f); err != nil {
			return nil, fmt.Errorf("add certificate watcher: %w", err)
		}
		return f, nil
	}
	names := append(servingcert.DNSNames(o.apiServiceName, o.apiCertNamespace), "localhost")
	if o.metricsServiceName != "" {
		names = append(names, servingcert.DNSNames(o.metricsServiceName, o.apiCertNamespace)...)
	}
	m, err := servingcert.New(servingcert.Config{
		Namespace: o.apiCertNamespace, SecretName: o.apiCertSecret, ConfigMapName: o.apiCAConfigMap, DNSNames: names,
		CAValidity: o.apiCAValidity, CertValidity: o.apiCertValidity,
		Reader: reader, Writer: writer, Log: log,
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(m); err != nil {
		return nil, fmt.Errorf("add serving certificate manager: %w", err)
	}
	return m, nil
}

// lateCertificates lets the metrics server, configured before the certificate source
// exists, serve the source's certificate.
type lateCertificates struct {
	src atomic.Pointer[compactapi.CertificateSource]
}

func (l *lateCertificates) set(src compactapi.CertificateSource) { l.src.Store(&src) }

func (l *lateCertificates) GetCertificate(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
	src := l.src.Load()
	if src == nil {
		return nil, errors.New("no serving certificate")
	}
	return (*src).GetCertificate(h)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("find cluster config: %w", err)
	}
	return cfg, nil
}

func versionString() string {
	v, rev := version, ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if rev != "" {
		return v + " (" + rev + ")"
	}
	return v
}
