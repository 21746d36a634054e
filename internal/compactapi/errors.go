package compactapi

import (
	"encoding/json"
	"net/http"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	wire "github.com/harness9/compaction-operator/compaction/client"
)

// Reasons in error responses (the wire values are in compaction/client).
const (
	ReasonUnauthorized     = wire.ReasonUnauthorized
	ReasonForbidden        = wire.ReasonForbidden
	ReasonNotFound         = wire.ReasonNotFound
	ReasonSessionNotReady  = wire.ReasonSessionNotReady
	ReasonBadRequest       = wire.ReasonBadRequest
	ReasonInvalidMessages  = wire.ReasonInvalidMessages
	ReasonTooLarge         = wire.ReasonTooLarge
	ReasonStaleWatermark   = wire.ReasonStaleWatermark
	ReasonStorage          = wire.ReasonStorage
	ReasonInternal         = wire.ReasonInternal
	ReasonTimeout          = wire.ReasonTimeout
	ReasonMediaType        = wire.ReasonMediaType
	ReasonAuthUnavailable  = wire.ReasonAuthUnavailable
	ReasonTooManyRequests  = wire.ReasonTooManyRequests
	ReasonToolResultExists = wire.ReasonToolResultExists
	// ReasonNamespaceNotAllowed (403): the session's ClusterCompactionPolicy does not select
	// its namespace (spec.namespaceSelector); the session's condition reason, too.
	ReasonNamespaceNotAllowed = compactionv1alpha1.ReasonNamespaceNotAllowed
)

func writeError(w http.ResponseWriter, code int, reason, msg string) {
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, wire.ErrorResponse{Code: code, Reason: reason, Message: msg})
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
