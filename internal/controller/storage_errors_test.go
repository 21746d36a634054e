package controller

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
)

// TestStorageReason: the condition reason comes from the store's typed errors, wrapped
// however deep, not from S3 error codes.
func TestStorageReason(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("probe: s3 store: check bucket b: %w", err) }
	cases := map[error]string{
		wrap(&s3.ResponseError{StatusCode: http.StatusForbidden, Code: "InvalidAccessKeyId"}):    compactionv1alpha1.ReasonAccessDenied,
		wrap(&s3.ResponseError{StatusCode: http.StatusForbidden, Code: "SignatureDoesNotMatch"}): compactionv1alpha1.ReasonAccessDenied,
		wrap(&s3.ResponseError{StatusCode: http.StatusNotFound, Code: "NoSuchBucket"}):           compactionv1alpha1.ReasonBucketNotFound,
		wrap(&s3.ResponseError{StatusCode: http.StatusBadRequest, Code: "InvalidArgument"}):      compactionv1alpha1.ReasonStorageUnreachable,
		wrap(s3.ErrBucketNotFound):                                        compactionv1alpha1.ReasonBucketNotFound,
		wrap(s3.ErrAccessDenied):                                          compactionv1alpha1.ReasonAccessDenied,
		wrap(policy.ErrSecretNotUsable):                                   compactionv1alpha1.ReasonSecretNotUsable,
		wrap(policy.ErrSecretKeyMissing):                                  compactionv1alpha1.ReasonSecretKeyMissing,
		wrap(policy.ErrSecretNamespaceNotAllowed):                         compactionv1alpha1.ReasonSecretNamespaceNotAllowed,
		wrap(egress.ErrNotAllowed):                                        compactionv1alpha1.ReasonEndpointNotAllowed,
		errors.New("dial tcp 10.0.0.1:9000: connect: connection refused"): compactionv1alpha1.ReasonStorageUnreachable,
	}
	for err, want := range cases {
		if got := storageReason(err); got != want {
			t.Errorf("storageReason(%v) = %s, want %s", err, got, want)
		}
	}
}
