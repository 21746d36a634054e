package controllers

import (
	"errors"

	"github.com/minio/minio-go/v7"

	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
)

// Condition reasons for storage problems, shared by policies and sessions.
const (
	ReasonStorageReachable   = "Reachable"
	ReasonSecretNotFound     = "SecretNotFound"
	ReasonSecretKeyMissing   = "SecretKeyMissing"
	ReasonBucketNotFound     = "BucketNotFound"
	ReasonAccessDenied       = "AccessDenied"
	ReasonInvalidStorage     = "InvalidStorageConfig"
	ReasonStorageUnreachable = "StorageUnreachable"
	// ReasonSecretNamespaceNotAllowed: a ClusterCompactionPolicy names a Secret outside the
	// operator's namespace and --cluster-policy-secret-namespaces; it is never read.
	ReasonSecretNamespaceNotAllowed = "SecretNamespaceNotAllowed"
	// ReasonEndpointNotAllowed: the storage endpoint (or summarizer base URL) is outside the
	// operator's --allowed-endpoints; it is never dialled.
	ReasonEndpointNotAllowed = "EndpointNotAllowed"
)

// storageReason names what went wrong with storage, for a condition reason.
func storageReason(err error) string {
	var resp minio.ErrorResponse
	switch {
	case errors.Is(err, policy.ErrSecretNamespaceNotAllowed):
		return ReasonSecretNamespaceNotAllowed
	case errors.Is(err, egress.ErrNotAllowed):
		return ReasonEndpointNotAllowed
	case errors.Is(err, policy.ErrSecretNotFound):
		return ReasonSecretNotFound
	case errors.Is(err, policy.ErrSecretKeyMissing):
		return ReasonSecretKeyMissing
	case errors.Is(err, s3.ErrBucketNotFound):
		return ReasonBucketNotFound
	case errors.As(err, &resp) && isAuthError(resp.Code):
		return ReasonAccessDenied
	default:
		return ReasonStorageUnreachable
	}
}

func isAuthError(code string) bool {
	switch code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
		return true
	}
	return false
}
