// Package compactrequest decodes and checks the bodies of the compaction API's requests
// before anything of a session is locked: the count of a body's JSON values, the decoding of
// one JSON object, the limits on messages and on the unknown fields they keep, and the 4xx
// answers (Error) for bodies that break them. It imports nothing of Kubernetes, so it and
// its fuzz target build quickly; internal/compactapi serves what it decodes.
package compactrequest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// Error is a 4xx answer to a body: its HTTP status, its reason (compactclient.Reason*) and
// its message.
type Error struct {
	Code    int
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Decode reads one JSON object with no unknown top-level fields and nothing after it.
func Decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return &Error{http.StatusBadRequest, compactclient.ReasonBadRequest, "empty request body: send a JSON object"}
		}
		return &Error{http.StatusBadRequest, compactclient.ReasonBadRequest, "malformed JSON body: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{http.StatusBadRequest, compactclient.ReasonBadRequest, "malformed JSON body: data after the JSON object"}
	}
	return nil
}

// ParseCompact decodes and checks the body of a compaction (after CheckValues). What needs
// the session's state (tool calls answered across the watermark, the watermark itself) is
// checked by the engine.
func (l Limits) ParseCompact(body []byte) (*compactclient.CompactRequest, error) {
	var req compactclient.CompactRequest
	if !decodeCompactFast(body, &req) {
		if err := Decode(body, &req); err != nil {
			return nil, err
		}
	}
	if len(req.Messages) == 0 {
		return nil, &Error{http.StatusBadRequest, compactclient.ReasonInvalidMessages, "messages is empty"}
	}
	if err := l.CheckMessages(req.Messages); err != nil {
		return nil, err
	}
	switch {
	case req.Seen < 0 || (req.Seen > 0 && req.Watermark != 0):
		return nil, &Error{http.StatusBadRequest, compactclient.ReasonBadRequest, "a seen delta needs seen (> 0) and prefixHash (the last response's seen and seenHash), and no watermark"}
	case req.Seen > 0 && req.PrefixHash == "":
		return nil, &Error{http.StatusBadRequest, compactclient.ReasonBadRequest, "a seen delta needs both seen (> 0) and prefixHash (the last response's seenHash)"}
	case req.Seen == 0 && (req.Watermark < 0 || (req.Watermark > 0) != (req.PrefixHash != "")):
		return nil, &Error{http.StatusBadRequest, compactclient.ReasonBadRequest, "a delta request needs both watermark (> 0) and prefixHash from the last response"}
	}
	if req.Usage != nil && req.Usage.PromptTokens < 0 {
		return nil, &Error{http.StatusBadRequest, compactclient.ReasonBadRequest, "usage.promptTokens must not be negative"}
	}
	return &req, nil
}
