package controllers

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/policy"
)

// AgentSession condition reasons.
const (
	ReasonPolicyResolved = "PolicyFound"
	ReasonPolicyNotFound = "PolicyNotFound"
	ReasonPolicyNotReady = "PolicyNotReady"
	ReasonPolicyError    = "PolicyLookupFailed"
	ReasonDeleting       = "Deleting"
	ReasonDeleteFailed   = "StorageDeleteFailed"
)

// updateStatus resolves the session's policy and sets sessionID, the records location and
// the PolicyResolved, StorageReady and Ready conditions. It never fails: a problem is a
// condition, and a later policy event re-resolves the session.
func (r *AgentSessionReconciler) updateStatus(ctx context.Context, s *compactionv1alpha1.AgentSession) {
	gen := s.Generation
	s.Status.SessionID = string(s.UID)
	s.Status.ObservedGeneration = gen
	set := func(t string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen})
	}

	p, err := policy.Get(ctx, r.Client, s.Namespace, s.Spec.PolicyRef)
	if err != nil {
		reason := ReasonPolicyError
		if errors.Is(err, policy.ErrNotFound) {
			reason = ReasonPolicyNotFound
		} else {
			ctrl.LoggerFrom(ctx).Error(err, "resolve policy")
		}
		set(compactionv1alpha1.ConditionPolicyResolved, false, reason, err.Error())
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
			Type: compactionv1alpha1.ConditionStorageReady, Status: metav1.ConditionUnknown,
			Reason: reason, Message: "no policy to take storage from", ObservedGeneration: gen,
		})
		set(compactionv1alpha1.ConditionReady, false, reason, err.Error())
		return
	}
	set(compactionv1alpha1.ConditionPolicyResolved, true, ReasonPolicyResolved,
		fmt.Sprintf("using %s %s", p.Kind, p.Name))

	// StorageReady mirrors the policy's probe.
	if c := p.Condition(compactionv1alpha1.ConditionStorageReady); c != nil {
		set(compactionv1alpha1.ConditionStorageReady, c.Status == metav1.ConditionTrue, c.Reason, c.Message)
	} else {
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
			Type: compactionv1alpha1.ConditionStorageReady, Status: metav1.ConditionUnknown,
			Reason: ReasonPolicyNotReady, Message: "the policy's storage has not been probed yet", ObservedGeneration: gen,
		})
	}

	if !p.Ready() {
		msg := fmt.Sprintf("%s %s is not Ready", p.Kind, p.Name)
		if c := p.Condition(compactionv1alpha1.ConditionReady); c != nil && c.Message != "" {
			msg += ": " + c.Message
		}
		set(compactionv1alpha1.ConditionReady, false, ReasonPolicyNotReady, msg)
		return
	}
	// The location is kept once set: the session's objects stay where they were written.
	if s.Status.Records == nil {
		s.Status.Records = p.Location(s.Status.SessionID, r.ClusterResourceNamespace)
	}
	set(compactionv1alpha1.ConditionReady, true, ReasonReady,
		fmt.Sprintf("compacting with %s %s; objects in s3://%s/%s", p.Kind, p.Name, s.Status.Records.Bucket, s.Status.Records.SessionPrefix))
}
