package controller

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/harness9/compaction-operator/internal/policy/backends"
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
	// APIReader reads what the cache may not have seen yet (pinned locations).
	APIReader client.Reader
	// Secrets reads the credentials of a session's storage.
	Secrets  *policy.SecretCache
	Stores   *backends.Stores
	Recorder recorder.EventRecorder
	// ClusterResourceNamespace holds a ClusterCompactionPolicy's Secrets by default.
	ClusterResourceNamespace string
	// RetryBaseDelay and RetryMaxDelay bound the backoff while storage cleanup fails.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// Workers is how many sessions are reconciled at once; 0 means DefaultSessionWorkers.
	Workers int
	// Metrics counts garbage collection; nil records nothing.
	Metrics *Metrics
	// Access is what the operator's flags let policies use; the finalizer reads no Secret
	// outside it.
	Access policy.Access
}

// +kubebuilder:rbac:groups=compaction.harness9.io,resources=agentsessions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=compaction.harness9.io,resources=agentsessions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=compaction.harness9.io,resources=agentsessions/finalizers,verbs=update
// Namespace labels decide which namespaces may use a ClusterCompactionPolicy (metadata only).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
//
// The pinned locations (ConfigMaps in the cluster resource namespace) need a Role there, not
// a ClusterRole: config/rbac/session_location_role.yaml, written by hand.

// Reconcile brings one AgentSession's status and finalizer in line with its policy, or
// cleans up its storage when it is being deleted.
func (r *AgentSessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s compactionv1alpha1.AgentSession
	if err := r.Get(ctx, req.NamespacedName, &s); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: a location still pinned for the session goes too (its finalizer was
			// removed by hand, or the manager stopped right after removing it).
			// (From the cache: a location it shows later triggers this again.)
			return ctrl.Result{}, r.locations(false).Delete(ctx, req.Namespace, req.Name, "")
		}
		return ctrl.Result{}, err
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
	var events pendingEvents
	err := r.updateStatus(ctx, &s, &events)
	if perr := r.patchStatus(ctx, base, &s); perr != nil {
		return ctrl.Result{}, perr
	}
	events.emit(r.Recorder, &s)
	return ctrl.Result{}, err
}

// patchStatus writes the status when it changed, as a merge patch so it never overwrites
// the fields the compaction API writes. The optimistic lock refuses a patch computed from a
// stale cache (the object changed since): the reconcile is retried on the fresh object, so
// a correction is neither written nor announced twice.
func (r *AgentSessionReconciler) patchStatus(ctx context.Context, base, s *compactionv1alpha1.AgentSession) error {
	if equality.Semantic.DeepEqual(base.Status, s.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch status: %w", err)
	}
	return nil
}

// SetupWithManager watches sessions and re-resolves them when their policy appears, goes or
// changes readiness, when someone else changed their status report, when their pinned
// location ConfigMap appears or goes, and when their namespace's labels change (a cluster
// policy's namespaceSelector).
func (r *AgentSessionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	base := r.RetryBaseDelay
	if base <= 0 {
		base = DefaultRetryBaseDelay
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&compactionv1alpha1.AgentSession{}, builder.WithPredicates(
			predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deletionStarted{}, reportChanged{}))).
		// The manager's cache holds only the pinned locations (policy.LocationCache).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.locationToSession)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.namespaceToSessions),
			builder.OnlyMetadata, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&compactionv1alpha1.CompactionPolicy{},
			handler.EnqueueRequestsFromMapFunc(r.policyToSessions(compactionv1alpha1.PolicyKindNamespaced)),
			builder.WithPredicates(policyReadinessChanged{})).
		Watches(&compactionv1alpha1.ClusterCompactionPolicy{},
			handler.EnqueueRequestsFromMapFunc(r.policyToSessions(compactionv1alpha1.PolicyKindCluster)),
			builder.WithPredicates(policyReadinessChanged{})).
		WithOptions(controller.Options{
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](base, r.maxDelay()),
			MaxConcurrentReconciles: cmp.Or(r.Workers, DefaultSessionWorkers),
		}).
		Named("agentsession").
		Complete(r)
}

// maxDelay is the longest wait between two attempts to delete a session's objects.
func (r *AgentSessionReconciler) maxDelay() time.Duration {
	if r.RetryMaxDelay > 0 {
		return r.RetryMaxDelay
	}
	return DefaultRetryMaxDelay
}

// locationToSession maps a pinned location ConfigMap to its session.
func (r *AgentSessionReconciler) locationToSession(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.ClusterResourceNamespace || o.GetLabels()[policy.LocationUIDLabel] == "" {
		return nil
	}
	namespace, name, ok := strings.Cut(o.GetAnnotations()[policy.LocationSessionAnnotation], "/")
	if !ok || namespace == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}}
}

// namespaceToSessions maps a namespace to its sessions using a ClusterCompactionPolicy, whose
// namespaceSelector may select it or not any more.
func (r *AgentSessionReconciler) namespaceToSessions(ctx context.Context, o client.Object) []reconcile.Request {
	var list compactionv1alpha1.AgentSessionList
	if err := r.List(ctx, &list, client.InNamespace(o.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list sessions of namespace", "namespace", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if policy.RefKind(list.Items[i].Spec.PolicyRef) == compactionv1alpha1.PolicyKindCluster {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
		}
	}
	return reqs
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

// reportChanged passes the status writes that changed what the operator reports and never
// reads: status.records, and a status.sessionID other than the UID. Status writes do not
// change the generation, so without it a tampered report would stand until the next spec
// change.
type reportChanged struct{ predicate.Funcs }

func (reportChanged) Update(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*compactionv1alpha1.AgentSession)
	cur, okNew := e.ObjectNew.(*compactionv1alpha1.AgentSession)
	if !okOld || !okNew {
		return false
	}
	if id := cur.Status.SessionID; id != "" && id != string(cur.UID) {
		return true
	}
	return !policy.SameLocation(old.Status.Records, cur.Status.Records)
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
