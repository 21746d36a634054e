package controllers

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/policy"
)

// SessionFinalizer holds an AgentSession until its stored objects are deleted.
const SessionFinalizer = "compaction.harness9.io/storage"

// Defaults for the retry backoff of a session whose storage cannot be cleaned up.
const (
	DefaultRetryBaseDelay = time.Second
	DefaultRetryMaxDelay  = 2 * time.Minute
)

// DefaultSessionWorkers is how many sessions are reconciled at once by default: a session
// costs two short writes (finalizer, status), and a mass deletion one storage cleanup each.
const DefaultSessionWorkers = 4

// AgentSessionReconciler resolves a session's policy, keeps its conditions and storage
// location, and deletes its stored objects when the session is deleted.
type AgentSessionReconciler struct {
	client.Client
	// APIReader reads Secrets from the API server.
	APIReader client.Reader
	Stores    *policy.Stores
	Recorder  recorder.EventRecorder
	// ClusterResourceNamespace holds a ClusterCompactionPolicy's Secrets by default.
	ClusterResourceNamespace string
	// RetryBaseDelay and RetryMaxDelay bound the backoff while storage cleanup fails.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// Workers is how many sessions are reconciled at once; 0 means DefaultSessionWorkers.
	Workers int
	// Metrics counts garbage collection; nil records nothing.
	Metrics *Metrics
}

// +kubebuilder:rbac:groups=compaction.harness9.io,resources=agentsessions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=compaction.harness9.io,resources=agentsessions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=compaction.harness9.io,resources=agentsessions/finalizers,verbs=update

// Reconcile brings one AgentSession's status and finalizer in line with its policy, or
// cleans up its storage when it is being deleted.
func (r *AgentSessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s compactionv1alpha1.AgentSession
	if err := r.Get(ctx, req.NamespacedName, &s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &s)
	}
	if !controllerutil.ContainsFinalizer(&s, SessionFinalizer) {
		base := s.DeepCopy()
		controllerutil.AddFinalizer(&s, SessionFinalizer)
		// The optimistic lock keeps other controllers' finalizers: a merge patch replaces the list.
		if err := r.Patch(ctx, &s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}

	base := s.DeepCopy()
	r.updateStatus(ctx, &s)
	return ctrl.Result{}, r.patchStatus(ctx, base, &s)
}

// patchStatus writes the status when it changed, as a merge patch so it never overwrites
// the fields the compaction API writes.
func (r *AgentSessionReconciler) patchStatus(ctx context.Context, base, s *compactionv1alpha1.AgentSession) error {
	if equality.Semantic.DeepEqual(base.Status, s.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, s, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("patch status: %w", err)
	}
	return nil
}

// SetupWithManager watches sessions and re-resolves them when their policy appears, goes or
// changes readiness.
func (r *AgentSessionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	base, maxDelay := r.RetryBaseDelay, r.RetryMaxDelay
	if base <= 0 {
		base = DefaultRetryBaseDelay
	}
	if maxDelay <= 0 {
		maxDelay = DefaultRetryMaxDelay
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&compactionv1alpha1.AgentSession{}, builder.WithPredicates(
			predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deletionStarted{}))).
		Watches(&compactionv1alpha1.CompactionPolicy{},
			handler.EnqueueRequestsFromMapFunc(r.policyToSessions(compactionv1alpha1.PolicyKindNamespaced)),
			builder.WithPredicates(policyReadinessChanged{})).
		Watches(&compactionv1alpha1.ClusterCompactionPolicy{},
			handler.EnqueueRequestsFromMapFunc(r.policyToSessions(compactionv1alpha1.PolicyKindCluster)),
			builder.WithPredicates(policyReadinessChanged{})).
		WithOptions(controller.Options{
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](base, maxDelay),
			MaxConcurrentReconciles: cmp.Or(r.Workers, DefaultSessionWorkers),
		}).
		Named("agentsession").
		Complete(r)
}

func (r *AgentSessionReconciler) policyToSessions(kind compactionv1alpha1.PolicyKind) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list compactionv1alpha1.AgentSessionList
		key := policy.Key(kind, o.GetNamespace(), o.GetName())
		if err := r.List(ctx, &list, client.MatchingFields{sessionPolicyIndex: key}, client.UnsafeDisableDeepCopy); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "list sessions of policy", "policy", key)
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
		}
		return reqs
	}
}

// deletionStarted passes the update that sets a deletion timestamp.
type deletionStarted struct{ predicate.Funcs }

func (deletionStarted) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
}

// policyReadinessChanged passes policy creations and deletions, spec changes, and status
// updates that flip Ready, but not the frequent session-count updates.
type policyReadinessChanged struct{ predicate.Funcs }

func (policyReadinessChanged) Update(e event.UpdateEvent) bool {
	if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
		return true
	}
	return readyOf(e.ObjectOld) != readyOf(e.ObjectNew)
}

func readyOf(o client.Object) string {
	var p *policy.Policy
	switch v := o.(type) {
	case *compactionv1alpha1.CompactionPolicy:
		p = policy.FromNamespaced(v)
	case *compactionv1alpha1.ClusterCompactionPolicy:
		p = policy.FromCluster(v)
	default:
		return ""
	}
	c := p.Condition(compactionv1alpha1.ConditionReady)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason + "/" + fmt.Sprint(c.ObservedGeneration)
}
