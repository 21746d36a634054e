package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/policy"
)

// ClusterCompactionPolicyReconciler is CompactionPolicyReconciler for the cluster-scoped kind.
type ClusterCompactionPolicyReconciler struct {
	client.Client
	Checker *PolicyChecker
}

// +kubebuilder:rbac:groups=compaction.harness9.io,resources=clustercompactionpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=compaction.harness9.io,resources=clustercompactionpolicies/status,verbs=get;update;patch

// Reconcile probes the policy's storage and recounts its sessions.
func (r *ClusterCompactionPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cp compactionv1alpha1.ClusterCompactionPolicy
	if err := r.Get(ctx, req.NamespacedName, &cp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cp.DeletionTimestamp.IsZero() {
		r.Checker.Forget(cp.UID)
		return ctrl.Result{}, nil
	}

	base := cp.DeepCopy()
	requeue, err := r.Checker.UpdateStatus(ctx, &cp, policy.FromCluster(&cp), &cp.Status)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !equality.Semantic.DeepEqual(base.Status, cp.Status) {
		if err := r.Status().Patch(ctx, &cp, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("patch status: %w", err)
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// SetupWithManager watches policies and the sessions that reference them; Secrets are
// re-checked by requeueing, as for CompactionPolicy.
func (r *ClusterCompactionPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&compactionv1alpha1.ClusterCompactionPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&compactionv1alpha1.AgentSession{},
			handler.EnqueueRequestsFromMapFunc(sessionToPolicy(compactionv1alpha1.PolicyKindCluster)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("clustercompactionpolicy").
		Complete(r)
}
