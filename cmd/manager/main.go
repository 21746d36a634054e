// Command manager is the compaction-operator: the policy, session and pod controllers, the
// compaction API agents call every turn, metrics, health probes and leader election.
package main

import (
	"cmp"
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

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/compactapi"
	"github.com/harness9/compaction-operator/internal/controller"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/policy/backends"
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
	configFile  string
	kubeconfig  string
	metricsAddr string
	pprofAddr   string
	probeAddr   string
	apiAddr     string
	showVersion bool
	zap         zap.Options
	// cfg is the configuration file (--config), defaulted and validated.
	cfg *configv1alpha1.Configuration
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{zap: zap.Options{Development: false}}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "Usage: manager [--config FILE] [flags]\n\n"+
			"Runs the compaction-operator: reconciles CompactionPolicy, ClusterCompactionPolicy and\n"+
			"AgentSession objects, creates AgentSessions for pods annotated with %s,\n"+
			"serves the compaction API, and deletes a session's stored objects when the session is deleted.\n\n"+
			"Everything else is configured in the file of --config (apiVersion %s, kind %s;\n"+
			"docs/operations.md lists every field); without it the manager runs with the defaults.\n\nFlags:\n",
			controller.PolicyAnnotation, configv1alpha1.GroupVersion, configv1alpha1.Kind)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.configFile, "config", "", "the configuration file (YAML; unknown fields are an error); empty: the defaults")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig; default: $KUBECONFIG, the in-cluster config, then ~/.kube/config")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint; \"0\" disables it")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.StringVar(&o.apiAddr, "api-bind-address", ":8082", "address of the compaction API that agents call; \"0\" disables it")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "address of Go's /debug/pprof endpoints (plain HTTP, no auth: for profiling on a development machine); empty disables them")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.showVersion {
		return o, nil
	}
	var err error
	if o.cfg, err = configv1alpha1.Load(o.configFile); err != nil {
		return nil, err
	}
	return o, nil
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
	// The API's certificate (the self-signed CA's or the one of api.tls.certDir) serves the
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
	stores := &backends.Stores{}
	secrets := policy.NewSecretCache(mgr.GetAPIReader(), o.cfg.Secrets.CacheTTL.Duration)
	if err := controller.Setup(ctx, mgr, controller.Config{
		Stores:                   stores,
		Secrets:                  secrets,
		SecretRecheckInterval:    o.cfg.Secrets.RecheckInterval.Duration,
		ClusterSecretNamespaces:  o.cfg.Secrets.ClusterPolicyNamespaces,
		ClusterResourceNamespace: o.cfg.ClusterResourceNamespace,
		ProbeInterval:            o.cfg.Controllers.StorageProbeInterval.Duration,
		RetryInterval:            o.cfg.Controllers.StorageRetryInterval.Duration,
		RetryMaxDelay:            o.cfg.Controllers.GCRetryMaxDelay.Duration,
		SessionWorkers:           int(o.cfg.Controllers.SessionWorkers),
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

	log.Info("starting manager", "version", versionString(), "config", cmp.Or(o.configFile, "(defaults)"), "leaderElection", o.cfg.LeaderElection.LeaderElect,
		"clusterResourceNamespace", o.cfg.ClusterResourceNamespace, "clusterPolicySecretNamespaces", o.cfg.Secrets.ClusterPolicyNamespaces,
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
	cfg.QPS, cfg.Burst = float32(o.cfg.ClientConnection.QPS), int(o.cfg.ClientConnection.Burst)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := compactionv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}

	var tlsOpts []func(*tls.Config)
	if !o.cfg.Metrics.EnableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	if o.apiAddr != "0" && !o.cfg.API.TLS.InsecureServeHTTP {
		tlsOpts = append(tlsOpts, func(c *tls.Config) {
			c.Certificates = nil
			c.GetCertificate = certs.GetCertificate
		})
	}
	metrics := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: *o.cfg.Metrics.Secure, TLSOpts: tlsOpts}
	if *o.cfg.Metrics.Secure {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metrics,
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.cfg.LeaderElection.LeaderElect,
		LeaderElectionID:        o.cfg.LeaderElection.ResourceName,
		LeaderElectionNamespace: o.cfg.LeaderElection.ResourceNamespace,
		LeaseDuration:           &o.cfg.LeaderElection.LeaseDuration.Duration,
		RenewDeadline:           &o.cfg.LeaderElection.RenewDeadline.Duration,
		RetryPeriod:             &o.cfg.LeaderElection.RetryPeriod.Duration,
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
			ByObject: policy.LocationCache(o.cfg.ClusterResourceNamespace),
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

// endpoints parses egress.allowedEndpoints and egress.namespacedPolicyEndpoints into the
// lists for all policies and for namespaced ones (the latter narrowed by the former); the
// conditions of a policy naming another endpoint name these fields.
func (o *options) endpoints() (allowed, namespaced *egress.Allowlist, err error) {
	allowedPath, nsPath := configv1alpha1.AllowedEndpointsPath.String(), configv1alpha1.NamespacedPolicyEndpointsPath.String()
	if allowed, err = egress.ParseFlag(allowedPath, o.cfg.Egress.AllowedEndpoints); err != nil {
		return nil, nil, err
	}
	ns := o.cfg.Egress.NamespacedPolicyEndpoints
	switch {
	case ns == nil && allowed == nil:
		return nil, egress.None(nsPath + " (unset, and " + allowedPath + " empty)"), nil
	case ns == nil:
		return allowed, allowed, nil
	case len(ns) == 1 && strings.TrimSpace(ns[0]) == "*":
		return allowed, allowed, nil
	}
	list, err := egress.ParseFlag(nsPath, ns)
	if err != nil {
		return nil, nil, err
	}
	if list == nil {
		list = egress.None(nsPath)
	}
	return allowed, list.And(allowed), nil
}

// addCompactionAPI adds the compaction API server, with its certificate source and its
// readiness check, to mgr.

func addCompactionAPI(mgr ctrl.Manager, o *options, certs *lateCertificates, stores *backends.Stores, secrets *policy.SecretCache, allowed, namespaced *egress.Allowlist) error {
	var src compactapi.CertificateSource
	if !o.cfg.API.TLS.InsecureServeHTTP {
		var err error
		if src, err = certificateSource(mgr, o); err != nil {
			return err
		}
		certs.set(src)
	}
	api, err := compactapi.New(mgr, compactapi.Config{
		BindAddress: o.apiAddr, Certificates: src, InsecureServeHTTP: o.cfg.API.TLS.InsecureServeHTTP,
		MaxBodyBytes: o.cfg.API.MaxBodyBytes, MaxMessages: int(o.cfg.API.MaxMessages),
		MaxInflightBytes: o.cfg.API.MaxInflightBytes,
		RequestTimeout:   o.cfg.API.RequestTimeout.Duration, ReadTimeout: o.cfg.API.ReadTimeout.Duration, UsageInterval: o.cfg.API.UsageInterval.Duration, StatusInterval: o.cfg.API.StatusInterval.Duration, StateTrust: o.cfg.API.StateTrust.Duration, SummariesOffTurn: *o.cfg.API.SummariesOffTurn,
		ClusterResourceNamespace: o.cfg.ClusterResourceNamespace, TokenAudience: o.cfg.API.TokenAudience,
		ReviewQPS: o.cfg.API.Reviews.QPS, ReviewBurst: int(o.cfg.API.Reviews.Burst), NewTokenRate: o.cfg.API.Reviews.NewTokenRate, NewTokenBurst: int(o.cfg.API.Reviews.NewTokenBurst),
		CallerReviewRate: o.cfg.API.Reviews.CallerRate, CallerReviewBurst: int(o.cfg.API.Reviews.CallerBurst), MaxInflightBytesPerCaller: o.cfg.API.MaxInflightBytesPerCaller,
		SummarizerNamespaceSessions: orNone(*o.cfg.API.SummarizerBudget.NamespaceSessions), SummarizerPolicySessions: orNone(*o.cfg.API.SummarizerBudget.PolicySessions),
		Secrets: secrets, ClusterSecretNamespaces: o.cfg.Secrets.ClusterPolicyNamespaces, AllowedEndpoints: allowed,
		NamespacedEndpoints: namespaced,
	}, stores, backends.NewSummarizer, crmetrics.Registry)
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

// orNone is a configuration file's count for compactapi.Config, where 0 means the default:
// the file's 0 (no limit) is -1 there.
func orNone(n int32) int {
	if n == 0 {
		return -1
	}
	return int(n)
}

// certificateSource serves api.tls.certDir's certificate, or else issues and rotates a
// self-signed one; either runs on every replica.
func certificateSource(mgr ctrl.Manager, o *options) (compactapi.CertificateSource, error) {
	log := ctrl.Log.WithName("serving-cert")
	ca := types.NamespacedName{Namespace: o.cfg.API.TLS.Namespace, Name: o.cfg.API.TLS.CAConfigMap}
	// Uncached reads: the manager caches no Secret, and no ConfigMap of this namespace
	// unless it is the cluster resource namespace.
	reader, writer := mgr.GetAPIReader(), mgr.GetClient()
	if o.cfg.API.TLS.CertDir != "" {
		f, err := servingcert.NewFiles(o.cfg.API.TLS.CertDir, &ca, reader, writer, log)
		if err != nil {
			return nil, fmt.Errorf("compaction API certificate: %w", err)
		}
		if err := mgr.Add(f); err != nil {
			return nil, fmt.Errorf("add certificate watcher: %w", err)
		}
		return f, nil
	}
	names := append(servingcert.DNSNames(o.cfg.API.TLS.ServiceName, o.cfg.API.TLS.Namespace), "localhost")
	if o.cfg.Metrics.ServiceName != "" {
		names = append(names, servingcert.DNSNames(o.cfg.Metrics.ServiceName, o.cfg.API.TLS.Namespace)...)
	}
	m, err := servingcert.New(servingcert.Config{
		Namespace: o.cfg.API.TLS.Namespace, SecretName: o.cfg.API.TLS.SecretName, ConfigMapName: o.cfg.API.TLS.CAConfigMap, DNSNames: names,
		CAValidity: o.cfg.API.TLS.CAValidity.Duration, CertValidity: o.cfg.API.TLS.CertValidity.Duration,
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
