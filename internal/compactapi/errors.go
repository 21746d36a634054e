package compactapi

import (
	"encoding/json"
	"net/http"
)

// Reasons in error responses; clients switch on them.
const (
	ReasonUnauthorized    = "Unauthorized"
	ReasonForbidden       = "Forbidden"
	ReasonNotFound        = "NotFound"
	ReasonSessionNotReady = "SessionNotReady"
	ReasonBadRequest      = "BadRequest"
	ReasonInvalidMessages = "InvalidMessages"
	ReasonTooLarge        = "RequestTooLarge"
	ReasonStaleWatermark  = "StaleWatermark"
	ReasonStorage         = "StorageUnavailable"
	ReasonInternal        = "InternalError"
	ReasonTimeout         = "Timeout"
)

// ErrorResponse is the JSON body of every error answer.
type ErrorResponse struct {
	// Code repeats the HTTP status.
	Code int `json:"code"`
	// Reason is a CamelCase word for programs.
	Reason string `json:"reason"`
	// Message says what is wrong, for people.
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, code int, reason, msg string) {
	writeJSON(w, code, ErrorResponse{Code: code, Reason: reason, Message: msg})
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
