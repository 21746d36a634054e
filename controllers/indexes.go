package controllers

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/policy"
)

// Cache index names.
const (
	// sessionPolicyIndex indexes AgentSessions by the key of the policy they reference.
	sessionPolicyIndex = "spec.policyRef"
	// policySecretIndex indexes policies by the "namespace/name" of each Secret they read.
	policySecretIndex = "spec.secretRefs"
)

// SetupIndexes registers the cache indexes the reconcilers look up. clusterResourceNamespace
// is where a ClusterCompactionPolicy's Secrets live when a reference has no namespace.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager, clusterResourceNamespace string) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &compactionv1alpha1.AgentSession{}, sessionPolicyIndex, func(o client.Object) []string {
		s := o.(*compactionv1alpha1.AgentSession)
		return []string{policy.RefKey(s.Namespace, s.Spec.PolicyRef)}
	}); err != nil {
		return fmt.Errorf("index AgentSessions by policy: %w", err)
	}
	if err := idx.IndexField(ctx, &compactionv1alpha1.CompactionPolicy{}, policySecretIndex, func(o client.Object) []string {
		return policy.FromNamespaced(o.(*compactionv1alpha1.CompactionPolicy)).SecretKeys(clusterResourceNamespace)
	}); err != nil {
		return fmt.Errorf("index CompactionPolicies by Secret: %w", err)
	}
	if err := idx.IndexField(ctx, &compactionv1alpha1.ClusterCompactionPolicy{}, policySecretIndex, func(o client.Object) []string {
		return policy.FromCluster(o.(*compactionv1alpha1.ClusterCompactionPolicy)).SecretKeys(clusterResourceNamespace)
	}); err != nil {
		return fmt.Errorf("index ClusterCompactionPolicies by Secret: %w", err)
	}
	return nil
}
