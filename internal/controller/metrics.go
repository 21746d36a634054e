package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/metricsreg"
	"github.com/harness9/compaction-operator/internal/policy"
)

// Metrics are the controllers' Prometheus metrics. Session and policy gauges are computed
// from the informer cache at scrape time, so they cost nothing between scrapes and are never
// stale.
type Metrics struct {
	GCSessions       prometheus.Counter
	GCDeletedObjects prometheus.Counter
	GCFailures       *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them, with the cache-backed collectors, on reg.
func NewMetrics(reg prometheus.Registerer, cache client.Reader) (*Metrics, error) {
	r := metricsreg.New(reg)
	m := &Metrics{
		GCSessions:       r.Counter("compaction_gc_sessions_total", "Deleted AgentSessions whose stored objects were removed."),
		GCDeletedObjects: r.Counter("compaction_gc_deleted_objects_total", "Stored objects removed by garbage collection of deleted AgentSessions."),
		GCFailures: r.CounterVec("compaction_gc_failures_total", "Failed attempts to remove a deleted AgentSession's objects, by reason.",
			"reason"),
	}
	r.Register(&cacheCollector{cache: cache})
	if err := r.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

var (
	sessionsDesc = prometheus.NewDesc("compaction_sessions",
		"AgentSessions by current tier and readiness.", []string{"tier", "ready"}, nil)
	policyReadyDesc = prometheus.NewDesc("compaction_policy_ready",
		"1 when the policy is Ready, else 0.", []string{"kind", "namespace", "name", "reason"}, nil)
	policySessionsDesc = prometheus.NewDesc("compaction_policy_sessions",
		"AgentSessions using the policy.", []string{"kind", "namespace", "name"}, nil)
)

// cacheCollector reads sessions and policies from the informer cache on each scrape.
type cacheCollector struct{ cache client.Reader }

func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- policyReadyDesc
	ch <- policySessionsDesc
}

func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	log := ctrl.Log.WithName("metrics")

	var sessions compactionv1alpha1.AgentSessionList
	if err := c.cache.List(ctx, &sessions, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "list sessions for metrics")
	} else {
		type key struct{ tier, ready string }
		counts := map[key]int{}
		for i := range sessions.Items {
			s := &sessions.Items[i]
			tier := string(s.Status.Tier)
			if tier == "" {
				tier = string(compactionv1alpha1.TierNone)
			}
			ready := "false"
			for _, cond := range s.Status.Conditions {
				if cond.Type == compactionv1alpha1.ConditionReady && cond.Status == "True" {
					ready = "true"
				}
			}
			counts[key{tier, ready}]++
		}
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), k.tier, k.ready)
		}
	}

	var nsList compactionv1alpha1.CompactionPolicyList
	if err := c.cache.List(ctx, &nsList, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "list policies for metrics")
	}
	var clList compactionv1alpha1.ClusterCompactionPolicyList
	if err := c.cache.List(ctx, &clList, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "list cluster policies for metrics")
	}
	policies := make([]*policy.Policy, 0, len(nsList.Items)+len(clList.Items))
	for i := range nsList.Items {
		policies = append(policies, policy.FromNamespaced(&nsList.Items[i]))
	}
	for i := range clList.Items {
		policies = append(policies, policy.FromCluster(&clList.Items[i]))
	}
	for _, p := range policies {
		ready, reason := 0.0, ""
		if cond := p.Condition(compactionv1alpha1.ConditionReady); cond != nil {
			reason = cond.Reason
		}
		if p.Ready() {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(policyReadyDesc, prometheus.GaugeValue, ready, string(p.Kind), p.Namespace, p.Name, reason)
		ch <- prometheus.MustNewConstMetric(policySessionsDesc, prometheus.GaugeValue, float64(p.Sessions), string(p.Kind), p.Namespace, p.Name)
	}
}
