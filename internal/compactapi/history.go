package compactapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// The history routes read back what compactions summarized: GET .../history?from=N&to=M
// returns the archived messages of a range, GET .../history/search?q=TEXT those that match.
// They are reads of the session's conversation content, so they need what reading an
// offloaded tool result needs (get agentsessions/toolresults) and get the same per-pod
// isolation (route).

// Bounds of one history answer, whatever the session's archive holds.
const (
	// maxHistoryAnswerBytes bounds the messages of one answer; the message that crosses it
	// is the last one (so one larger than it still comes back alone).
	maxHistoryAnswerBytes = 4 << 20
	// maxSearchScanBytes bounds the archive one search reads (an archive is at most a
	// request's history, 8 MiB by default): past it the answer says where to go on.
	maxSearchScanBytes = 256 << 20
	// historyFirstChunk is what is held before the answer's status goes out, so a storage
	// error on the first archive can still be answered with a proper status.
	historyFirstChunk = 64 << 10
)

// historyParams is a parsed history or search request.
type historyParams struct {
	from, to, limit int
	match           *compaction.HistoryMatcher
}

// parseHistoryParams reads from, to, limit and (search) q and regex. Each may be given once;
// a value that is not what it should be is a 400 that names it, before anything is read.
// Other parameters are ignored, as on every route.
func parseHistoryParams(r *http.Request, search bool) (*historyParams, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("malformed query string: " + err.Error())
	}
	one := func(name string) (string, bool, error) {
		v, ok := q[name]
		if len(v) > 1 {
			return "", false, badRequest(fmt.Sprintf("%d %s parameters: send one", len(v), name))
		}
		if !ok {
			return "", false, nil
		}
		return v[0], true, nil
	}
	index := func(name string, min, max int) (int, bool, error) {
		v, ok, err := one(name)
		if err != nil || !ok {
			return 0, false, err
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < min || n > max {
			return 0, false, badRequest(fmt.Sprintf("%s parameter %q: want an integer from %d to %d", name, clip(v), min, max))
		}
		return n, true, nil
	}
	p := &historyParams{limit: compactclient.DefaultHistoryLimit}
	if search {
		p.limit = compactclient.DefaultSearchLimit
	}
	if p.from, _, err = index("from", 0, compaction.MaxArchiveIndex-1); err != nil {
		return nil, err
	}
	var hasTo bool
	if p.to, hasTo, err = index("to", 1, compaction.MaxArchiveIndex); err != nil {
		return nil, err
	}
	if hasTo && p.to <= p.from {
		return nil, badRequest(fmt.Sprintf("to (%d) must be greater than from (%d): the range is from <= index < to", p.to, p.from))
	}
	if limit, ok, err := index("limit", 1, compactclient.MaxHistoryLimit); err != nil {
		return nil, err
	} else if ok {
		p.limit = limit
	}
	if !search {
		return p, nil
	}
	text, ok, err := one("q")
	if err != nil {
		return nil, err
	}
	if !ok || text == "" {
		return nil, badRequest("the q parameter is required: the text to search for (a case-insensitive substring, or a Go RE2 regular expression with regex=1)")
	}
	regex := false
	switch v, _, err := one("regex"); {
	case err != nil:
		return nil, err
	case v == "" || v == "0" || v == "false":
	case v == "1" || v == "true":
		regex = true
	default:
		return nil, badRequest(fmt.Sprintf("regex parameter %q: want 1 or 0", clip(v)))
	}
	if p.match, err = compaction.NewHistoryMatcher(text, regex); err != nil {
		return nil, badRequest("q parameter: " + err.Error())
	}
	return p, nil
}

func badRequest(msg string) error {
	return &apiError{http.StatusBadRequest, ReasonBadRequest, msg}
}

func (s *Server) history(w http.ResponseWriter, r *http.Request, sess *session, _ struct{}) error {
	p, err := parseHistoryParams(r, false)
	if err != nil {
		return err
	}
	return s.writeHistory(w, r, sess, p)
}

func (s *Server) historySearch(w http.ResponseWriter, r *http.Request, sess *session, _ struct{}) error {
	p, err := parseHistoryParams(r, true)
	if err != nil {
		return err
	}
	return s.writeHistory(w, r, sess, p)
}

// writeHistory streams the answer (compactclient.HistoryResponse) as the archive is read:
// the messages as they are stored, then where to go on. At most p.limit messages and about
// maxHistoryAnswerBytes of them; a search reads at most maxSearchScanBytes of archive.
func (s *Server) writeHistory(w http.ResponseWriter, r *http.Request, sess *session, p *historyParams) error {
	out := &historyWriter{w: w}
	out.buf.WriteString(`{"messages":[`)
	q := compaction.HistoryQuery{From: p.from, To: p.to, Match: p.match,
		// A message came in one request body: one longer than the largest body is not one
		// this API stored.
		MaxLineBytes: int(max(s.cfg.MaxBodyBytes, DefaultMaxBodyBytes))}
	if p.match != nil {
		q.MaxScanBytes = maxSearchScanBytes
	}
	n, size := 0, 0
	res, err := compaction.ScanArchive(r.Context(), sess.store, sess.storeID(), q, func(m *compaction.ArchivedMessage) error {
		if n == p.limit || size >= maxHistoryAnswerBytes {
			return compaction.ErrStopListing // not taken: Next is its index
		}
		entry, err := historyEntry(m)
		if err != nil {
			return err
		}
		if n > 0 {
			entry = append([]byte{','}, entry...)
		}
		n, size = n+1, size+len(entry)
		return out.write(entry)
	})
	if err != nil && !out.started {
		if errors.Is(err, compaction.ErrObjectTooLarge) {
			return &apiError{http.StatusBadGateway, ReasonStorage, err.Error()}
		}
		if r.Context().Err() != nil {
			return r.Context().Err()
		}
		return &apiError{http.StatusServiceUnavailable, ReasonStorage, err.Error()}
	}
	if err != nil {
		// The status line is out: the answer ends without its closing part, which a client
		// sees as a broken read.
		s.log.Error(err, "history stream broken", "session", sess.obj.Namespace+"/"+sess.obj.Name)
		return nil
	}
	tail, _ := json.Marshal(struct {
		Next      int  `json:"next"`
		Truncated bool `json:"truncated"`
	}{res.Next, res.Stopped})
	_ = out.write(append([]byte("],"), tail[1:]...))
	out.buf.WriteByte('\n')
	return out.flush()
}

// historyEntry is one message of the answer (compactclient.HistoryMessage), with the
// message's JSON as stored (it decoded, so it is one JSON object).
func historyEntry(m *compaction.ArchivedMessage) ([]byte, error) {
	head, err := json.Marshal(struct {
		Index   int             `json:"index"`
		Role    compaction.Role `json:"role"`
		Archive string          `json:"archive"`
	}{m.Index, m.Message.Role, m.Span.String()})
	if err != nil {
		return nil, fmt.Errorf("encode history entry %d: %w", m.Index, err)
	}
	entry := make([]byte, 0, len(head)+len(m.Raw)+16)
	entry = append(entry, head[:len(head)-1]...)
	entry = append(entry, `,"message":`...)
	entry = append(entry, m.Raw...)
	return append(entry, '}'), nil
}

// historyWriter holds the answer until historyFirstChunk bytes, then sends the status and
// streams.
type historyWriter struct {
	w       http.ResponseWriter
	buf     bytes.Buffer
	started bool
}

func (h *historyWriter) write(p []byte) error {
	h.buf.Write(p)
	if h.buf.Len() < historyFirstChunk {
		return nil
	}
	return h.flush()
}

func (h *historyWriter) flush() error {
	if !h.started {
		h.started = true
		h.w.Header().Set("Content-Type", "application/json")
		h.w.Header().Set("X-Content-Type-Options", "nosniff")
		h.w.WriteHeader(http.StatusOK)
	}
	_, err := h.w.Write(h.buf.Bytes())
	h.buf.Reset()
	return err
}
