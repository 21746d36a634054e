package controller

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

// PolicyReconciler keeps the status of one policy kind (CompactionPolicy or
// ClusterCompactionPolicy): storage reachability, the summarizer's Secret, and the number of
// sessions that use it. The two kinds share a spec and a status; policyKind is what differs.
type PolicyReconciler[T client.Object] struct {
	client.Client
	Checker *PolicyChecker
	kind    policyKind[T]
}

// policyKind adapts one policy kind to PolicyReconciler.
type policyKind[T client.Object] struct {
	kind compactionv1alpha1.PolicyKind
	// controller names the controller (logs, metrics).
	controller string
	newObject  func() T
	// view returns the object seen as a Policy, and its status to fill in place.
	view func(T) (*policy.Policy, *compactionv1alpha1.CompactionPolicyStatus)
}

// NewCompactionPolicyReconciler returns the reconciler of CompactionPolicies.
func NewCompactionPolicyReconciler(c client.Client, checker *PolicyChecker) *PolicyReconciler[*compactionv1alpha1.CompactionPolicy] {
	return &PolicyReconciler[*compactionv1alpha1.CompactionPolicy]{Client: c, Checker: checker, kind: policyKind[*compactionv1alpha1.CompactionPolicy]{
		kind: compactionv1alpha1.PolicyKindNamespaced, controller: "compactionpolicy",
		newObject: func() *compactionv1alpha1.CompactionPolicy { return &compactionv1alpha1.CompactionPolicy{} },
		view: func(p *compactionv1alpha1.CompactionPolicy) (*policy.Policy, *compactionv1alpha1.CompactionPolicyStatus) {
			return policy.FromNamespaced(p), &p.Status
		},
	}}
}

// NewClusterCompactionPolicyReconciler returns the reconciler of ClusterCompactionPolicies.
func NewClusterCompactionPolicyReconciler(c client.Client, checker *PolicyChecker) *PolicyReconciler[*compactionv1alpha1.ClusterCompactionPolicy] {
	return &PolicyReconciler[*compactionv1alpha1.ClusterCompactionPolicy]{Client: c, Checker: checker, kind: policyKind[*compactionv1alpha1.ClusterCompactionPolicy]{
		kind: compactionv1alpha1.PolicyKindCluster, controller: "clustercompactionpolicy",
		newObject: func() *compactionv1alpha1.ClusterCompactionPolicy {
			return &compactionv1alpha1.ClusterCompactionPolicy{}
		},
		view: func(p *compactionv1alpha1.ClusterCompactionPolicy) (*policy.Policy, *compactionv1alpha1.CompactionPolicyStatus) {
			return policy.FromCluster(p), &p.Status
		},
	}}
}

// +kubebuilder:rbac:groups=compaction.harness9.io,resources=compactionpolicies;clustercompactionpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=compaction.harness9.io,resources=compactionpolicies/status;clustercompactionpolicies/status,verbs=get;update;patch
// Secrets are read on demand, never listed or watched (see PolicyChecker).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile probes the policy's storage and recounts its sessions.
func (r *PolicyReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.kind.newObject()
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		r.Checker.Forget(obj.GetUID())
		return ctrl.Result{}, nil
	}

	base, _ := obj.DeepCopyObject().(T)
	p, status := r.kind.view(obj)
	requeue, events, err := r.Checker.UpdateStatus(ctx, obj, p, status)
	if err != nil {
		return ctrl.Result{}, err
	}
	if _, old := r.kind.view(base); !equality.Semantic.DeepEqual(*old, *status) {
		if err := r.Status().Patch(ctx, obj, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("patch status: %w", err)
		}
	}
	events.emit(r.Checker.Recorder, obj)
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// SetupWithManager watches policies and the sessions that reference them (for the count).
// Secrets are not watched (the operator may not list them): the reconcile requeues itself to
// look at their resourceVersions again (PolicyChecker.SecretRecheckInterval).
func (r *PolicyReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(r.kind.newObject(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&compactionv1alpha1.AgentSession{},
			handler.EnqueueRequestsFromMapFunc(sessionToPolicy(r.kind.kind)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named(r.kind.controller).
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
