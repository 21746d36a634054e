package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/policy"
)

// finalize deletes every stored object of a session being deleted, then releases it. It
// uses the location kept in status, so it works after the policy is gone. When storage
// fails, the finalizer stays, the failure is a condition and a Warning event, and the
// returned error retries with backoff.
func (r *AgentSessionReconciler) finalize(ctx context.Context, s *compactionv1alpha1.AgentSession) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s, SessionFinalizer) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)

	// A session that never became Ready has no location, and the compaction API stores
	// nothing for a session that is not Ready: there is nothing to delete.
	if loc := s.Status.Records; loc != nil {
		removed, err := r.deleteObjects(ctx, s.Status.SessionID, loc)
		if err != nil {
			reason := storageReason(err)
			if r.Metrics != nil {
				r.Metrics.GCFailures.WithLabelValues(reason).Inc()
			}
			r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, ReasonDeleteFailed, "DeleteStorage",
				"Cannot delete the session's objects in s3://%s (%s), retrying: %v", loc.Bucket, reason, err)
			base := s.DeepCopy()
			meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
				Type: compactionv1alpha1.ConditionStorageReady, Status: metav1.ConditionFalse,
				Reason: ReasonDeleteFailed, Message: fmt.Sprintf("%s: %v", reason, err), ObservedGeneration: s.Generation,
			})
			meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
				Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: ReasonDeleting, Message: "waiting for storage to delete the session's objects", ObservedGeneration: s.Generation,
			})
			if perr := r.patchStatus(ctx, base, s); perr != nil {
				log.Error(perr, "record storage deletion failure")
			}
			return ctrl.Result{}, fmt.Errorf("delete objects of session %s: %w", s.Status.SessionID, err)
		}
		if r.Metrics != nil {
			r.Metrics.GCSessions.Inc()
			r.Metrics.GCDeletedObjects.Add(float64(removed))
		}
		log.Info("deleted session objects", "objects", removed, "bucket", loc.Bucket, "prefix", loc.Prefix)
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "StorageDeleted", "DeleteStorage",
			"Deleted %d objects of session %s from s3://%s", removed, s.Status.SessionID, loc.Bucket)
	}

	base := s.DeepCopy()
	controllerutil.RemoveFinalizer(s, SessionFinalizer)
	if err := r.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	return ctrl.Result{}, nil
}

func (r *AgentSessionReconciler) deleteObjects(ctx context.Context, sessionID string, loc *compactionv1alpha1.RecordsLocation) (int, error) {
	cfg, err := policy.S3Config(ctx, r.APIReader, loc)
	if err != nil {
		return 0, err
	}
	store, err := r.Stores.Get(ctx, cfg)
	if err != nil {
		return 0, err
	}
	return store.DeleteSession(ctx, sessionID)
}
