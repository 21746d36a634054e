package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/policy/backends"
)

// finalize deletes every stored object of a session being deleted, then releases it. The
// objects are the session's UID's, at the location pinned for the session, so it works after
// the policy is gone; status.sessionID and status.records are never used (anyone allowed to
// write the status could point them at another session's objects, or at a Secret of another
// namespace and an endpoint that collects its key). When storage fails, the finalizer stays,
// the failure is a condition and a Warning event, and the returned error retries with
// backoff.
func (r *AgentSessionReconciler) finalize(ctx context.Context, s *compactionv1alpha1.AgentSession) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s, SessionFinalizer) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	sid := string(s.UID)

	pin, err := r.locations(true).Get(ctx, s)
	var loc *compactionv1alpha1.RecordsLocation
	switch {
	case errors.Is(err, policy.ErrInvalidLocation):
		return r.holdFinalizer(ctx, s, compactionv1alpha1.ReasonStorageLocationInvalid, err.Error())
	case err != nil:
		return ctrl.Result{}, err
	case pin != nil:
		loc = pin.Location
	case s.Status.Records != nil:
		// Nothing pinned, but the status says the session was Ready: an operator version
		// that kept the location only in the status made it Ready, or someone deleted the
		// pinned location. The status is used only where it says exactly what the policy
		// says now.
		var why string
		if loc, why = r.verifiedStatusLocation(ctx, s); loc == nil {
			return r.holdFinalizer(ctx, s, compactionv1alpha1.ReasonStorageLocationUnverified, why)
		}
	}
	// Without a location the session never became Ready, and the compaction API stores
	// nothing for a session without one: there is nothing to delete.
	if pin != nil {
		if err := r.Access.CheckLocation(pin); err != nil {
			return r.holdFinalizer(ctx, s, storageReason(err), err.Error()+
				". Allow it in the operator's flags, or remove the finalizer to abandon the objects")
		}
	}
	if loc != nil {
		endpoints := r.Access.EndpointsFor(s.Spec.PolicyRef.Kind)
		if pin != nil {
			endpoints = r.Access.PinEndpoints(pin)
		}
		removed, err := r.deleteObjects(ctx, sid, loc, endpoints)
		if err != nil {
			reason := storageReason(err)
			if r.Metrics != nil {
				r.Metrics.GCFailures.WithLabelValues(reason).Inc()
			}
			if changed, serr := r.setDeletingConditions(ctx, s, compactionv1alpha1.ReasonStorageDeleteFailed, fmt.Sprintf("%s: %v", reason, err)); serr == nil && changed {
				r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, compactionv1alpha1.ReasonStorageDeleteFailed, "DeleteStorage",
					"Cannot delete the session's objects in s3://%s (%s), retrying: %v", loc.Bucket, reason, err)
			}
			return ctrl.Result{}, fmt.Errorf("delete objects of session %s: %w", sid, err)
		}
		if r.Metrics != nil {
			r.Metrics.GCSessions.Inc()
			r.Metrics.GCDeletedObjects.Add(float64(removed))
		}
		log.Info("deleted session objects", "objects", removed, "bucket", loc.Bucket, "prefix", loc.Prefix)
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, compactionv1alpha1.ReasonStorageDeleted, "DeleteStorage",
			"Deleted %d objects of session %s from s3://%s", removed, sid, loc.Bucket)
	}

	base := s.DeepCopy()
	controllerutil.RemoveFinalizer(s, SessionFinalizer)
	if err := r.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	// The pinned location goes last: a manager stopped before this point finds the session
	// gone and the location still pinned, and deletes it then (Reconcile, on NotFound).
	return ctrl.Result{}, r.locations(false).Release(ctx, pin)
}

// verifiedStatusLocation returns status.records when it is exactly where the session's policy
// stores the session's objects now, and otherwise nil and why it is not used.
func (r *AgentSessionReconciler) verifiedStatusLocation(ctx context.Context, s *compactionv1alpha1.AgentSession) (*compactionv1alpha1.RecordsLocation, string) {
	p, err := policy.Get(ctx, r.Client, s.Namespace, s.Spec.PolicyRef)
	if err != nil {
		return nil, fmt.Sprintf("no storage location is pinned for the session, and status.records (%s) cannot be checked against its policy (%v): not using it. "+
			"Restore the policy, or remove the finalizer to abandon the objects", describeLocation(s.Status.Records), err)
	}
	if err := r.Access.Check(p); err != nil {
		return nil, fmt.Sprintf("no storage location is pinned for the session, and its policy may not be used: %v", err)
	}
	want := p.Location(string(s.UID), r.ClusterResourceNamespace)
	if !policy.SameLocation(want, s.Status.Records) {
		return nil, fmt.Sprintf("no storage location is pinned for the session, and status.records (%s) is not where %s %s stores the session's objects (%s): not using it. "+
			"Remove the finalizer to abandon the objects", describeLocation(s.Status.Records), p.Kind, p.Name, describeLocation(want))
	}
	return want, ""
}

// holdFinalizer keeps the finalizer of a session whose objects have no location the operator
// can trust, says why (condition and Warning event), and checks again after the longest
// backoff: only a person can settle it (restore the policy or the pinned location, or
// remove the finalizer), and a policy event re-checks it sooner.
func (r *AgentSessionReconciler) holdFinalizer(ctx context.Context, s *compactionv1alpha1.AgentSession, reason, msg string) (ctrl.Result, error) {
	if r.Metrics != nil {
		r.Metrics.GCFailures.WithLabelValues(reason).Inc()
	}
	changed, err := r.setDeletingConditions(ctx, s, reason, msg)
	if err != nil {
		return ctrl.Result{}, err
	}
	if changed {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, reason, "DeleteStorage", "%s", msg)
	}
	return ctrl.Result{RequeueAfter: r.maxDelay()}, nil
}

// setDeletingConditions records why the deletion waits, and reports whether that changed
// the conditions. The caller emits its event only when the write succeeded and changed
// them: a failed write and its retry, or a re-check that finds the same, do not say it
// again (the condition keeps saying it).
func (r *AgentSessionReconciler) setDeletingConditions(ctx context.Context, s *compactionv1alpha1.AgentSession, reason, msg string) (bool, error) {
	base := s.DeepCopy()
	changed := meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type: compactionv1alpha1.ConditionStorageReady, Status: metav1.ConditionFalse,
		Reason: reason, Message: msg, ObservedGeneration: s.Generation,
	})
	if meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: compactionv1alpha1.ReasonDeleting, Message: "waiting for storage to delete the session's objects", ObservedGeneration: s.Generation,
	}) {
		changed = true
	}
	if err := r.patchStatus(ctx, base, s); err != nil {
		return false, fmt.Errorf("record why the deletion waits: %w", err)
	}
	return changed, nil
}

// storageDeleteTimeout bounds one DeleteSession of the finalizer. The endpoint is whatever
// the session's policy names: one that trickles its answers must not hold a worker of the
// controller for good. A session too large to delete in time (or whose listing does not end
// within the store's page cap) keeps its finalizer, and the returned error retries it with
// backoff, going on from what is left.
const storageDeleteTimeout = 30 * time.Second

func (r *AgentSessionReconciler) deleteObjects(ctx context.Context, sessionID string, loc *compactionv1alpha1.RecordsLocation, endpoints *egress.Allowlist) (int, error) {
	cfg, err := backends.S3Config(ctx, r.Secrets, loc)
	if err != nil {
		return 0, err
	}
	store, err := r.Stores.Get(ctx, cfg, endpoints)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, storageDeleteTimeout)
	defer cancel()
	return store.DeleteSession(ctx, sessionID)
}
