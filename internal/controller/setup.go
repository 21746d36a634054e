package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/policy/backends"
)

// Config is what the controllers need besides the manager.
type Config struct {
	// ClusterResourceNamespace holds a ClusterCompactionPolicy's Secrets when a reference
	// names no namespace: the operator's own namespace.
	ClusterResourceNamespace string
	// ProbeInterval is how often a Ready policy's storage is probed again.
	ProbeInterval time.Duration
	// RetryInterval is how soon a policy whose storage or Secrets failed is checked again.
	RetryInterval time.Duration
	// SecretRecheckInterval is the longest time a created, rotated or fixed Secret goes
	// unnoticed by the policy controllers (they may not watch Secrets).
	SecretRecheckInterval time.Duration
	// ClusterSecretNamespaces are the namespaces besides ClusterResourceNamespace whose
	// Secrets a ClusterCompactionPolicy may name.
	ClusterSecretNamespaces []string
	// AllowedEndpoints are the S3 endpoints (and summarizer base URLs) policies may name; nil
	// allows all. A nil Stores is made to check it on every connection too.
	AllowedEndpoints *egress.Allowlist
	// NamespacedEndpoints are those a CompactionPolicy may name (policy.Access); nil means
	// AllowedEndpoints.
	NamespacedEndpoints *egress.Allowlist
	// Secrets reads Secret values; shared with the compaction API. nil makes a new one.
	Secrets *policy.SecretCache
	// RetryMaxDelay caps the backoff between attempts to delete a deleted session's objects.
	RetryMaxDelay time.Duration
	// SessionWorkers is how many AgentSessions are reconciled at once; 0 means
	// DefaultSessionWorkers.
	SessionWorkers int
	// Stores is shared with whatever else talks to storage; nil makes a new one.
	Stores *backends.Stores
	// Registerer receives the controllers' metrics; nil means controller-runtime's registry,
	// which the manager serves on /metrics.
	Registerer prometheus.Registerer
}

// Setup registers the cache indexes and the four controllers with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, cfg Config) error {
	if err := SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	stores := cfg.Stores
	if stores == nil {
		stores = &backends.Stores{}
	}
	secrets := cfg.Secrets
	if secrets == nil {
		secrets = policy.NewSecretCache(mgr.GetAPIReader(), 0)
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = crmetrics.Registry
	}
	metrics, err := NewMetrics(reg, mgr.GetCache())
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	rec := mgr.GetEventRecorder("compaction-operator")
	access := policy.Access{
		ClusterResourceNamespace: cfg.ClusterResourceNamespace, ClusterSecretNamespaces: cfg.ClusterSecretNamespaces,
		Endpoints: cfg.AllowedEndpoints, NamespacedEndpoints: cfg.NamespacedEndpoints,
	}
	checker := &PolicyChecker{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Secrets: secrets, Stores: stores, Recorder: rec,
		ClusterResourceNamespace: cfg.ClusterResourceNamespace,
		ProbeInterval:            cfg.ProbeInterval, RetryInterval: cfg.RetryInterval,
		SecretRecheckInterval: cfg.SecretRecheckInterval, Access: access,
	}
	setups := []struct {
		name  string
		setup func(ctrl.Manager) error
	}{
		{"CompactionPolicy", NewCompactionPolicyReconciler(mgr.GetClient(), checker).SetupWithManager},
		{"ClusterCompactionPolicy", NewClusterCompactionPolicyReconciler(mgr.GetClient(), checker).SetupWithManager},
		{"AgentSession", (&AgentSessionReconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Secrets: secrets, Stores: stores, Recorder: rec,
			ClusterResourceNamespace: cfg.ClusterResourceNamespace, RetryMaxDelay: cfg.RetryMaxDelay,
			Workers: cfg.SessionWorkers, Metrics: metrics, Access: access,
		}).SetupWithManager},
		{"Pod", (&PodReconciler{Client: mgr.GetClient(), Recorder: rec}).SetupWithManager},
	}
	for _, s := range setups {
		if err := s.setup(mgr); err != nil {
			return fmt.Errorf("set up %s controller: %w", s.name, err)
		}
	}
	return nil
}
