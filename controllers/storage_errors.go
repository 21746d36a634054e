package controllers

import (
	"errors"

	"github.com/minio/minio-go/v7"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
)

// storageReason names what went wrong with storage, for a condition reason.
func storageReason(err error) string {
	var resp minio.ErrorResponse
	switch {
	case errors.Is(err, policy.ErrSecretNamespaceNotAllowed):
		return compactionv1alpha1.ReasonSecretNamespaceNotAllowed
	case errors.Is(err, egress.ErrNotAllowed):
		return compactionv1alpha1.ReasonEndpointNotAllowed
	case errors.Is(err, policy.ErrSecretNotFound):
		return compactionv1alpha1.ReasonSecretNotFound
	case errors.Is(err, policy.ErrSecretKeyMissing):
		return compactionv1alpha1.ReasonSecretKeyMissing
	case errors.Is(err, s3.ErrBucketNotFound):
		return compactionv1alpha1.ReasonBucketNotFound
	case errors.As(err, &resp) && isAuthError(resp.Code):
		return compactionv1alpha1.ReasonAccessDenied
	default:
		return compactionv1alpha1.ReasonStorageUnreachable
	}
}

func isAuthError(code string) bool {
	switch code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
		return true
	}
	return false
}
