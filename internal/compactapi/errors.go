package compactapi

import (
	"encoding/json"
	"net/http"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// Reasons in error responses (the wire values are in compaction/compactclient).
const (
	ReasonUnauthorized     = compactclient.ReasonUnauthorized
	ReasonForbidden        = compactclient.ReasonForbidden
	ReasonNotFound         = compactclient.ReasonNotFound
	ReasonSessionNotReady  = compactclient.ReasonSessionNotReady
	ReasonBadRequest       = compactclient.ReasonBadRequest
	ReasonInvalidMessages  = compactclient.ReasonInvalidMessages
	ReasonTooLarge         = compactclient.ReasonTooLarge
	ReasonStaleWatermark   = compactclient.ReasonStaleWatermark
	ReasonStorage          = compactclient.ReasonStorage
	ReasonInternal         = compactclient.ReasonInternal
	ReasonTimeout          = compactclient.ReasonTimeout
	ReasonMediaType        = compactclient.ReasonMediaType
	ReasonAuthUnavailable  = compactclient.ReasonAuthUnavailable
	ReasonTooManyRequests  = compactclient.ReasonTooManyRequests
	ReasonToolResultExists = compactclient.ReasonToolResultExists
	// ReasonNamespaceNotAllowed (403): the session's ClusterCompactionPolicy does not select
	// its namespace (spec.namespaceSelector); the session's condition reason, too.
	ReasonNamespaceNotAllowed = compactionv1alpha1.ReasonNamespaceNotAllowed
)

func writeError(w http.ResponseWriter, code int, reason, msg string) {
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, compactclient.ErrorResponse{Code: code, Reason: reason, Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	// The status line is out; a failed write means the client went away.
	_ = enc.Encode(v)
}
