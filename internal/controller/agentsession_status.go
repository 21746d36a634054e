package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/policy"
)

// locations reads and writes the sessions' pinned storage locations. With fresh, a location
// the cache has not seen is asked of the API server (one request, for the finalizer, which
// must not take a cache that lags for "nothing pinned"); without, only the cache is read
// (Pin asks the API server itself when the location turns out to exist).
func (r *AgentSessionReconciler) locations(fresh bool) policy.Locations {
	l := policy.Locations{Namespace: r.ClusterResourceNamespace, Reader: r.Client, Writer: r.Client}
	if fresh {
		l.APIReader = r.APIReader
	}
	return l
}

// updateStatus resolves the session's policy, pins the session's storage location the first
// time the policy is Ready, and sets sessionID, the records location and the PolicyResolved,
// StorageReady and Ready conditions. sessionID and records are reports: they are written from
// the object's UID and the pinned location, never read, and put back (with a Warning event)
// when someone else changed them. A problem is a condition, and a later policy event
// re-resolves the session; the error is only for failures worth a retry (reading or pinning
// the location). Events go to events, to be emitted once the status is written.
func (r *AgentSessionReconciler) updateStatus(ctx context.Context, s *compactionv1alpha1.AgentSession, events *pendingEvents) error {
	gen := s.Generation
	if id := s.Status.SessionID; id != "" && id != string(s.UID) {
		events.add(corev1.EventTypeWarning, compactionv1alpha1.ReasonStatusCorrected, "CorrectStatus",
			"status.sessionID was %q, not the session's metadata.uid %s: the operator identifies a session by its UID only, and put it back", id, s.UID)
	}
	s.Status.SessionID = string(s.UID)
	s.Status.ObservedGeneration = gen
	cond := func(t string, st metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	set := func(t string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		cond(t, st, reason, msg)
	}
	// unresolved: the policy cannot be used (not found, or not this namespace's), so there is
	// no storage to report on: PolicyResolved and Ready False, StorageReady Unknown.
	unresolved := func(reason, msg, storageMsg string) {
		set(compactionv1alpha1.ConditionPolicyResolved, false, reason, msg)
		cond(compactionv1alpha1.ConditionStorageReady, metav1.ConditionUnknown, reason, storageMsg)
		set(compactionv1alpha1.ConditionReady, false, reason, msg)
	}

	pin, err := r.locations(false).Get(ctx, s)
	switch {
	case errors.Is(err, policy.ErrInvalidLocation):
		events.add(corev1.EventTypeWarning, compactionv1alpha1.ReasonStorageLocationInvalid, "ReadLocation", "%v", err)
		set(compactionv1alpha1.ConditionReady, false, compactionv1alpha1.ReasonStorageLocationInvalid, err.Error())
		return nil
	case err != nil:
		return err
	case pin != nil:
		r.reportLocation(s, pin.Location, events)
	}

	p, err := policy.Get(ctx, r.Client, s.Namespace, s.Spec.PolicyRef)
	if err != nil {
		reason := compactionv1alpha1.ReasonPolicyLookupFailed
		if errors.Is(err, policy.ErrNotFound) {
			reason = compactionv1alpha1.ReasonPolicyNotFound
		} else {
			ctrl.LoggerFrom(ctx).Error(err, "resolve policy")
		}
		unresolved(reason, err.Error(), "no policy to take storage from")
		return nil
	}
	if err := p.CheckNamespace(ctx, r.Client, s.Namespace); err != nil {
		if !errors.Is(err, policy.ErrNamespaceNotAllowed) && !errors.Is(err, policy.ErrInvalidNamespaceSelector) {
			return err
		}
		// Not this namespace's policy: nothing is pinned, and the compaction API refuses the
		// session; relabelling the namespace re-evaluates it (namespaceToSessions).
		unresolved(compactionv1alpha1.ReasonNamespaceNotAllowed, err.Error(), "the policy may not be used in this namespace")
		return nil
	}
	set(compactionv1alpha1.ConditionPolicyResolved, true, compactionv1alpha1.ReasonPolicyFound,
		fmt.Sprintf("using %s %s", p.Kind, p.Name))
	// Anchors are conversation content: status keeps them only while the policy asks.
	if p.Spec.AnchorsInStatus != compactionv1alpha1.AnchorsInclude {
		s.Status.Anchors = nil
	}

	// StorageReady mirrors the policy's probe.
	if c := p.Condition(compactionv1alpha1.ConditionStorageReady); c != nil {
		set(compactionv1alpha1.ConditionStorageReady, c.Status == metav1.ConditionTrue, c.Reason, c.Message)
	} else {
		cond(compactionv1alpha1.ConditionStorageReady, metav1.ConditionUnknown, compactionv1alpha1.ReasonPolicyNotReady, "the policy's storage has not been probed yet")
	}

	if !p.Ready() {
		msg := fmt.Sprintf("%s %s is not Ready", p.Kind, p.Name)
		if c := p.Condition(compactionv1alpha1.ConditionReady); c != nil && c.Message != "" {
			msg += ": " + c.Message
		}
		set(compactionv1alpha1.ConditionReady, false, compactionv1alpha1.ReasonPolicyNotReady, msg)
		return nil
	}
	// The location is pinned once: the session's objects stay where they were written.
	if pin == nil {
		if pin, err = r.locations(true).Pin(ctx, s, p, r.ClusterResourceNamespace); err != nil {
			set(compactionv1alpha1.ConditionReady, false, compactionv1alpha1.ReasonStorageLocationNotPinned, err.Error())
			return err
		}
		r.reportLocation(s, pin.Location, events)
	}
	set(compactionv1alpha1.ConditionReady, true, compactionv1alpha1.ReasonReady,
		fmt.Sprintf("compacting with %s %s; objects in s3://%s/%s", p.Kind, p.Name, pin.Location.Bucket, pin.Location.SessionPrefix))
	return nil
}

// reportLocation writes the pinned location into status.records, with a Warning event when
// the status said something else (changed by someone else, or written by an operator version
// that kept the location only there and from a policy whose storage changed since).
func (r *AgentSessionReconciler) reportLocation(s *compactionv1alpha1.AgentSession, loc *compactionv1alpha1.RecordsLocation, events *pendingEvents) {
	if old := s.Status.Records; old != nil && !policy.SameLocation(old, loc) {
		events.add(corev1.EventTypeWarning, compactionv1alpha1.ReasonStatusCorrected, "CorrectStatus",
			"status.records named %s, not where the operator keeps the session's objects (%s): status is a report and never read back; put back",
			describeLocation(old), describeLocation(loc))
	}
	s.Status.Records = loc.DeepCopy()
}

// describeLocation is a location for a message: s3://bucket/prefix at endpoint, with Secret.
func describeLocation(l *compactionv1alpha1.RecordsLocation) string {
	d := fmt.Sprintf("s3://%s/%s at %s", l.Bucket, l.SessionPrefix, l.Endpoint)
	if ref := l.CredentialsSecretRef; ref.IsSet() {
		d += fmt.Sprintf(" with the Secret %s/%s", ref.Namespace, ref.Name)
	}
	return d
}
