package compactapi

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
)

// readBody reads the whole request body, at most limit bytes (the route's bound, at most
// MaxBodyBytes; a Content-Length over it is refused before), before anything of the session
// is locked. A body that has not arrived within ReadTimeout (the connection's read deadline)
// is a 408, one that ends before its Content-Length a 400, one over the limit a 413.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := readAll(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	if err == nil {
		return body, nil
	}
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return nil, err
	case errors.As(err, &ne) && ne.Timeout():
		return nil, &apiError{http.StatusRequestTimeout, ReasonTimeout,
			fmt.Sprintf("the request body did not arrive within %s", s.cfg.ReadTimeout)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, &apiError{http.StatusBadRequest, ReasonBadRequest, "the request body ended before its Content-Length"}
	default:
		return nil, &apiError{http.StatusBadRequest, ReasonBadRequest, "reading the request body: " + err.Error()}
	}
}

// readAll reads r to its end into a buffer of exactly size bytes when the size is known
// (Content-Length, at most limit: net/http stops the body there), growing one otherwise.
func readAll(r io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 || size > limit {
		return io.ReadAll(r)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
