package controller

import (
	"errors"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
)

// storageReason names what went wrong with storage, for a condition reason.
func storageReason(err error) string {
	switch {
	case errors.Is(err, policy.ErrSecretNamespaceNotAllowed):
		return compactionv1alpha1.ReasonSecretNamespaceNotAllowed
	case errors.Is(err, egress.ErrNotAllowed):
		return compactionv1alpha1.ReasonEndpointNotAllowed
	case errors.Is(err, policy.ErrSecretNotUsable):
		return compactionv1alpha1.ReasonSecretNotUsable
	case errors.Is(err, policy.ErrSecretKeyMissing):
		return compactionv1alpha1.ReasonSecretKeyMissing
	case errors.Is(err, s3.ErrBucketNotFound):
		return compactionv1alpha1.ReasonBucketNotFound
	case errors.Is(err, s3.ErrAccessDenied):
		return compactionv1alpha1.ReasonAccessDenied
	default:
		return compactionv1alpha1.ReasonStorageUnreachable
	}
}
