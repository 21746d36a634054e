package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/policy"
)

// CompactionPolicyReconciler keeps a CompactionPolicy's status: storage reachability, the
// summarizer's Secret, and the number of sessions that use it.
type CompactionPolicyReconciler struct {
	client.Client
	Checker *PolicyChecker
}

// +kubebuilder:rbac:groups=compaction.harness9.io,resources=compactionpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=compaction.harness9.io,resources=compactionpolicies/status,verbs=get;update;patch
// Secrets are read on demand, never listed or watched (see PolicyChecker).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile probes the policy's storage and recounts its sessions.
func (r *CompactionPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cp compactionv1alpha1.CompactionPolicy
	if err := r.Get(ctx, req.NamespacedName, &cp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cp.DeletionTimestamp.IsZero() {
		r.Checker.Forget(cp.UID)
		return ctrl.Result{}, nil
	}

	base := cp.DeepCopy()
	requeue, err := r.Checker.UpdateStatus(ctx, &cp, policy.FromNamespaced(&cp), &cp.Status)
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

// SetupWithManager watches policies and the sessions that reference them (for the count).
// Secrets are not watched (the operator may not list them): the reconcile requeues itself to
// look at their resourceVersions again (PolicyChecker.SecretRecheckInterval).
func (r *CompactionPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&compactionv1alpha1.CompactionPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&compactionv1alpha1.AgentSession{},
			handler.EnqueueRequestsFromMapFunc(sessionToPolicy(compactionv1alpha1.PolicyKindNamespaced)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("compactionpolicy").
		Complete(r)
}

// sessionToPolicy maps a session to the policy of kind it references, if any; the session
// count of that policy may have changed.
func sessionToPolicy(kind compactionv1alpha1.PolicyKind) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		s, ok := o.(*compactionv1alpha1.AgentSession)
		if !ok || policy.RefKind(s.Spec.PolicyRef) != kind {
			return nil
		}
		key := types.NamespacedName{Name: s.Spec.PolicyRef.Name}
		if kind == compactionv1alpha1.PolicyKindNamespaced {
			key.Namespace = s.Namespace
		}
		return []reconcile.Request{{NamespacedName: key}}
	}
}
