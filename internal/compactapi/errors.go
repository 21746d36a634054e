package compactapi

import (
	"bytes"
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

// writeCompactResponse writes resp as writeJSON does, byte for byte, with the messages
// encoded by their MarshalJSON alone: encoding/json would check and compact each message's
// JSON again after it (the view is most of the answer). The rest of the answer is
// encoding/json's, with no messages.
func writeCompactResponse(w http.ResponseWriter, resp compactclient.CompactResponse) {
	body, ok := encodeCompactResponse(resp)
	if !ok {
		writeJSON(w, http.StatusOK, resp)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	// The status line is out; a failed write means the client went away.
	_, _ = w.Write(body)
}

// encodeCompactResponse is resp's JSON with a newline, as a json.Encoder without HTML
// escaping writes it; false when a message or the rest cannot be encoded (writeJSON
// answers then, as before).
func encodeCompactResponse(resp compactclient.CompactResponse) ([]byte, bool) {
	msgs := resp.Messages
	resp.Messages = nil
	var rest bytes.Buffer
	enc := json.NewEncoder(&rest)
	enc.SetEscapeHTML(false)
	const head = `{"messages":null`
	if err := enc.Encode(resp); err != nil || !bytes.HasPrefix(rest.Bytes(), []byte(head)) {
		return nil, false
	}
	if msgs == nil {
		return rest.Bytes(), true
	}
	size := rest.Len()
	for i := range msgs {
		size += len(msgs[i].Content) + 256
	}
	body := make([]byte, 0, size)
	body = append(body, `{"messages":[`...)
	for i := range msgs {
		if i > 0 {
			body = append(body, ',')
		}
		b, err := msgs[i].MarshalJSON()
		if err != nil {
			return nil, false
		}
		body = append(body, b...)
	}
	body = append(body, ']')
	return append(body, rest.Bytes()[len(head):]...), true
}
