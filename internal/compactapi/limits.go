package compactapi

import (
	"errors"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactrequest"
)

// The bounds on what one request may make the server decode and keep are
// internal/compactrequest's, in proportion to Config.MaxMessages.
const (
	valuesPerMessage        = compactrequest.ValuesPerMessage
	maxUnknownFields        = compactrequest.MaxUnknownFields
	unknownFieldsPerMessage = compactrequest.UnknownFieldsPerMessage
)

// limits are the server's bounds on one request.
func (s *Server) limits() compactrequest.Limits {
	return compactrequest.Limits{MaxMessages: s.cfg.MaxMessages}
}

// checkValues refuses a body with more JSON values than the limits allow, before it is
// decoded, and returns how many it holds.
func (s *Server) checkValues(body []byte) (int, error) {
	n, err := s.limits().CheckValues(body)
	return n, asAPIError(err)
}

// jsonValues counts the JSON values of data, up to a little past limit
// (compactrequest.CountValues).
func jsonValues(data []byte, limit int) int { return compactrequest.CountValues(data, limit) }

// parseCompact decodes and checks the body of a compaction, before the session is locked
// (compactrequest.Limits.ParseCompact).
func (s *Server) parseCompact(body []byte) (*compactclient.CompactRequest, error) {
	req, err := s.limits().ParseCompact(body)
	return req, asAPIError(err)
}

// checkMessages bounds the messages of a request and the unknown fields they keep.
func (s *Server) checkMessages(msgs []compaction.Message) error {
	return asAPIError(s.limits().CheckMessages(msgs))
}

// asAPIError is err, with a compactrequest.Error made the apiError of the same answer.
func asAPIError(err error) error {
	var e *compactrequest.Error
	if errors.As(err, &e) {
		return &apiError{code: e.Code, reason: e.Reason, msg: e.Message}
	}
	return err
}
