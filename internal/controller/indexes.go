package controller

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
)

// SetupIndexes registers the cache indexes the reconcilers look up.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &compactionv1alpha1.AgentSession{}, sessionPolicyIndex, func(o client.Object) []string {
		s := o.(*compactionv1alpha1.AgentSession)
		return []string{policy.RefKey(s.Namespace, s.Spec.PolicyRef)}
	}); err != nil {
		return fmt.Errorf("index AgentSessions by policy: %w", err)
	}
	return nil
}
