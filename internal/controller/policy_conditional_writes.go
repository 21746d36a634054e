package controller

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/policy"
)

// conditionalWrites returns the policy's ConditionalWrites condition (issue 28, item 6).
// The S3 store relies on create-only writes (If-None-Match: *): a reused tool-call ID never
// replaces an offloaded original, and of two replicas writing a session's first state one
// fails. A backend that ignores the header turns both into silent overwrites, so the store
// is probed (two PUTs and a DELETE) and the answer reported; the policy stays Ready.
//
// store is the policy's store when StorageReady is True, else nil (nothing is probed).
// decided is the condition of the last probe when the policy's fingerprint (its generation
// and its Secrets' versions) has not changed since: an answer it holds (True or False) is
// kept, so the probe runs once per generation and Secret versions, not at every storage
// probe; an Unknown one is probed again.
func (c *PolicyChecker) conditionalWrites(ctx context.Context, p *policy.Policy, store *s3.Store, decided *metav1.Condition) metav1.Condition {
	if store == nil {
		return writesNotProbed()
	}
	if decided != nil && decided.Type == compactionv1alpha1.ConditionConditionalWrites && decided.Status != metav1.ConditionUnknown {
		return *decided
	}
	loc := p.Storage(c.ClusterResourceNamespace)
	cond := metav1.Condition{Type: compactionv1alpha1.ConditionConditionalWrites}
	pctx, cancel := context.WithTimeout(ctx, storageProbeTimeout)
	defer cancel()
	err := store.ProbeConditionalWrites(pctx)
	switch {
	case err == nil:
		cond.Status, cond.Reason = metav1.ConditionTrue, compactionv1alpha1.ReasonSupported
		cond.Message = fmt.Sprintf("the storage at %s refuses a create-only write (If-None-Match: *) over an existing object", loc.Endpoint)
	case errors.Is(err, s3.ErrConditionalWritesIgnored):
		cond.Status, cond.Reason = metav1.ConditionFalse, compactionv1alpha1.ReasonIfNoneMatchIgnored
		cond.Message = fmt.Sprintf("the storage at %s ignores If-None-Match: a create-only write replaced an existing object. "+
			"A reused tool-call ID may replace an earlier offloaded result, and two replicas may overwrite each other's first state of a session. "+
			"The policy stays usable; use a storage that honours conditional writes to keep these guarantees", loc.Endpoint)
	default:
		cond.Status, cond.Reason = metav1.ConditionUnknown, compactionv1alpha1.ReasonProbeFailed
		cond.Message = "probing conditional writes failed: " + err.Error()
	}
	return cond
}

// writesNotProbed is ConditionalWrites while storage is not ready.
func writesNotProbed() metav1.Condition {
	return metav1.Condition{
		Type: compactionv1alpha1.ConditionConditionalWrites, Status: metav1.ConditionUnknown,
		Reason: compactionv1alpha1.ReasonStorageNotReady, Message: "not probed: storage is not ready",
	}
}
