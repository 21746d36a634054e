package testenv

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// HostileMode is how one bucket of a HostileS3 misbehaves. In every mode the bucket exists
// (HEAD and GetBucketLocation answer 200, so a policy's storage probe passes), writes are
// accepted (200 with an ETag; only the key is kept, so a create-only write of a key written
// before fails with 412 as S3's does) and deletes succeed; the modes differ in what a
// read gets back.
type HostileMode string

const (
	// HostileNone is a well-behaved, empty bucket: a GET of any object is NoSuchKey and a
	// listing is empty.
	HostileNone HostileMode = "none"
	// HostileHugeState answers a GET of a session's state object (a key "…state/….json")
	// with a body of HugeStateBytes, declared in Content-Length (and a HEAD of it with that
	// length). The body is generated as it is sent, never held in memory.
	HostileHugeState HostileMode = "huge-state"
	// HostileHugeStateUnsized is HostileHugeState without Content-Length: the body comes
	// chunked, so its size shows only by reading it.
	HostileHugeStateUnsized HostileMode = "huge-state-unsized"
	// HostileEndlessList answers every listing (ListObjectsV2) with a page of one key under
	// the listed prefix, IsTruncated=true and a continuation token never sent before, for
	// ever.
	HostileEndlessList HostileMode = "endless-list"
	// HostileTrickle answers a GET of a session's state object and every listing with 200,
	// headers at once and then a body of which one byte comes every trickle interval
	// (TrickleInterval unless SetTrickleInterval), for ever (the state's body declares 64
	// KiB, the listing's nothing). It stops only when the client hangs up.
	HostileTrickle HostileMode = "trickle"
)

// HugeStateBytes is the size of a HostileHugeState body: 1 GiB.
const HugeStateBytes = 1 << 30

// TrickleInterval is the default time between two bytes of a trickled body.
const TrickleInterval = time.Second

// trickledStateBytes is the length a trickled state body declares.
const trickledStateBytes = 64 << 10

// HostileStats is what a HostileS3 bucket served.
type HostileStats struct {
	Requests  int64 // every request naming the bucket
	StateGets int64 // GETs of a state object

	HugeBodies int64 // HugeStateBytes bodies started
	HugeBytes  int64 // bytes of them sent before the client stopped reading

	ListPages int64 // list pages answered in full (an endless listing's pages included)

	Trickles       int64         // trickled answers started (state GETs and listings)
	Trickling      int64         // trickled answers still open
	TrickledBytes  int64         // bytes trickled
	LongestTrickle time.Duration // longest a closed trickled answer was held open by the client

	Puts    int64 // objects written (accepted and dropped)
	Deletes int64 // objects deleted (DELETE, or named in a batch delete)
}

// HostileS3 is an S3-compatible endpoint an attacker runs (plain HTTP on 127.0.0.1,
// path-style requests, signatures not checked), for tests that point a tenant's policy at
// it: it answers enough of the S3 API for the operator to take it for storage, and then,
// per bucket (HostileMode), serves a 1 GiB state object, a listing that never ends, or
// bodies trickled at one byte a second. It counts what it served (Stats) so a test can
// show the attack was made and when the client gave up.
type HostileS3 struct {
	srv  *httptest.Server
	stop chan struct{}

	mu       sync.Mutex
	buckets  map[string]*hostileBucket
	interval time.Duration
	tokens   int64 // continuation tokens handed out
	etags    int64
}

type hostileBucket struct {
	mode  HostileMode
	stats HostileStats
	keys  map[string]bool // written and not deleted since (their bytes are not kept)
}

// StartHostileS3 starts a hostile endpoint with the given buckets and modes (a bucket not
// named does not exist) and stops it when the test ends, hanging up on every answer still
// being sent.
func StartHostileS3(t testing.TB, buckets map[string]HostileMode) *HostileS3 {
	t.Helper()
	h := &HostileS3{stop: make(chan struct{}), buckets: map[string]*hostileBucket{}, interval: TrickleInterval}
	for name, mode := range buckets {
		h.buckets[name] = &hostileBucket{mode: mode, keys: map[string]bool{}}
	}
	h.srv = httptest.NewServer(h)
	t.Cleanup(func() {
		close(h.stop)
		h.srv.CloseClientConnections()
		h.srv.Close()
	})
	return h
}

// Endpoint is the server's host:port, as a policy's storage endpoint (protocol HTTP).
func (h *HostileS3) Endpoint() string { return strings.TrimPrefix(h.srv.URL, "http://") }

// SetMode creates the bucket if it does not exist and sets its mode; answers already being
// sent go on as they started.
func (h *HostileS3) SetMode(bucket string, mode HostileMode) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.buckets[bucket]; b != nil {
		b.mode = mode
		return
	}
	h.buckets[bucket] = &hostileBucket{mode: mode, keys: map[string]bool{}}
}

// SetTrickleInterval sets the time between two bytes of the trickled answers started from
// now on.
func (h *HostileS3) SetTrickleInterval(d time.Duration) {
	h.mu.Lock()
	h.interval = d
	h.mu.Unlock()
}

// Stats returns what the bucket served so far (zero for an unknown bucket).
func (h *HostileS3) Stats(bucket string) HostileStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.buckets[bucket]; b != nil {
		return b.stats
	}
	return HostileStats{}
}

// update changes the bucket's stats under the lock.
func (h *HostileS3) update(bucket string, fn func(*HostileStats)) {
	h.mu.Lock()
	if b := h.buckets[bucket]; b != nil {
		fn(&b.stats)
	}
	h.mu.Unlock()
}

func (h *HostileS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	h.mu.Lock()
	b := h.buckets[bucket]
	var mode HostileMode
	if b != nil {
		b.stats.Requests++
		mode = b.mode
	}
	h.mu.Unlock()
	if b == nil {
		s3Error(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	if key == "" {
		h.serveBucket(w, r, bucket, mode)
		return
	}
	h.serveObject(w, r, bucket, key, mode)
}

func (h *HostileS3) serveBucket(w http.ResponseWriter, r *http.Request, bucket string, mode HostileMode) {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodHead, r.Method == http.MethodPut: // BucketExists, MakeBucket
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodGet && q.Has("location"):
		writeXML(w, `<LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></LocationConstraint>`)
	case r.Method == http.MethodGet && (q.Has("list-type") || q.Has("prefix") || q.Has("marker")):
		h.serveList(w, r, bucket, mode, q.Get("prefix"))
	case r.Method == http.MethodPost && q.Has("delete"):
		h.serveBatchDelete(w, r, bucket)
	default:
		s3Error(w, r, http.StatusNotImplemented, "NotImplemented", "not implemented by this endpoint")
	}
}

func (h *HostileS3) serveList(w http.ResponseWriter, r *http.Request, bucket string, mode HostileMode, prefix string) {
	head := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>` + xmlText(bucket) +
		`</Name><Prefix>` + xmlText(prefix) + `</Prefix><MaxKeys>1000</MaxKeys>`
	switch mode {
	case HostileEndlessList:
		h.mu.Lock()
		h.tokens++
		n := h.tokens
		h.mu.Unlock()
		writeXML(w, head+fmt.Sprintf(`<KeyCount>1</KeyCount><IsTruncated>true</IsTruncated><NextContinuationToken>endless-%d</NextContinuationToken>`+
			`<Contents><Key>%s</Key><LastModified>2025-01-01T00:00:00.000Z</LastModified><ETag>"00000000000000000000000000000000"</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>`,
			n, xmlText(fmt.Sprintf("%sendless-%08d", prefix, n))))
		h.update(bucket, func(s *HostileStats) { s.ListPages++ })
	case HostileTrickle:
		head += `<KeyCount>1000</KeyCount><IsTruncated>true</IsTruncated><NextContinuationToken>trickle</NextContinuationToken>`
		entry := `<Contents><Key>` + xmlText(prefix) + `trickle</Key><Size>1</Size></Contents>`
		h.trickle(w, r, bucket, "application/xml", -1, func(i int64) byte {
			if i < int64(len(head)) {
				return head[i]
			}
			return entry[(i-int64(len(head)))%int64(len(entry))]
		})
	default:
		writeXML(w, head+`<KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>`)
		h.update(bucket, func(s *HostileStats) { s.ListPages++ })
	}
}

func (h *HostileS3) serveBatchDelete(w http.ResponseWriter, r *http.Request, bucket string) {
	var req struct {
		Objects []struct {
			Key string `xml:"Key"`
		} `xml:"Object"`
	}
	if err := xml.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&req); err != nil {
		s3Error(w, r, http.StatusBadRequest, "MalformedXML", "malformed batch delete")
		return
	}
	var out strings.Builder
	out.WriteString(`<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
	h.mu.Lock()
	b := h.buckets[bucket]
	for _, o := range req.Objects {
		out.WriteString(`<Deleted><Key>` + xmlText(o.Key) + `</Key></Deleted>`)
		delete(b.keys, o.Key)
	}
	b.stats.Deletes += int64(len(req.Objects))
	h.mu.Unlock()
	out.WriteString(`</DeleteResult>`)
	writeXML(w, out.String())
}

func (h *HostileS3) serveObject(w http.ResponseWriter, r *http.Request, bucket, key string, mode HostileMode) {
	state := isStateKey(key)
	switch r.Method {
	case http.MethodPut:
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
		h.mu.Lock()
		b := h.buckets[bucket]
		// Create-only writes (If-None-Match: *) are honoured, as S3's are; If-Match is not
		// checked (the bytes are not kept, so neither are versions).
		exists := b.keys[key] && r.Header.Get("If-None-Match") == "*"
		if !exists {
			b.keys[key] = true
			b.stats.Puts++
			h.etags++
		}
		etag := fmt.Sprintf(`"%032x"`, h.etags)
		h.mu.Unlock()
		if exists {
			s3Error(w, r, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
			return
		}
		w.Header().Set("ETag", etag)
		w.WriteHeader(http.StatusOK)
	case http.MethodDelete:
		h.mu.Lock()
		delete(h.buckets[bucket].keys, key)
		h.buckets[bucket].stats.Deletes++
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case http.MethodHead:
		if state && (mode == HostileHugeState || mode == HostileHugeStateUnsized) {
			objectHeaders(w, "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(HugeStateBytes))
			w.WriteHeader(http.StatusOK)
			return
		}
		s3Error(w, r, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	case http.MethodGet:
		if state {
			h.update(bucket, func(s *HostileStats) { s.StateGets++ })
		}
		switch {
		case state && mode == HostileHugeState:
			h.hugeBody(w, bucket, true)
		case state && mode == HostileHugeStateUnsized:
			h.hugeBody(w, bucket, false)
		case state && mode == HostileTrickle:
			body := `{"lastSummary":"`
			h.trickle(w, r, bucket, "application/json", trickledStateBytes, func(i int64) byte {
				if i < int64(len(body)) {
					return body[i]
				}
				return 'a'
			})
		default:
			s3Error(w, r, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		}
	default:
		s3Error(w, r, http.StatusNotImplemented, "NotImplemented", "not implemented by this endpoint")
	}
}

// isStateKey reports whether key is a session's (or a conversation's) state object:
// {prefix}state/{sessionID}.json or {prefix}state/conversations/{sessionID}/{id}.json.
func isStateKey(key string) bool {
	return strings.Contains("/"+key, "/state/") && strings.HasSuffix(key, ".json")
}

// A huge body is hugeFirst (the start of a state document, then one long string) and then
// hugeRest over and over.
var (
	hugeRest  = []byte(strings.Repeat("a", 64<<10))
	hugeFirst = append([]byte(`{"lastSummary":"`), hugeRest[16:]...)
)

// hugeBody sends HugeStateBytes (with or without Content-Length) until the client stops
// reading or the server stops.
func (h *HostileS3) hugeBody(w http.ResponseWriter, bucket string, sized bool) {
	objectHeaders(w, "application/json")
	if sized {
		w.Header().Set("Content-Length", strconv.Itoa(HugeStateBytes))
	}
	w.WriteHeader(http.StatusOK)
	h.update(bucket, func(s *HostileStats) { s.HugeBodies++ })
	chunk := hugeFirst
	for sent := 0; sent < HugeStateBytes; chunk = hugeRest {
		n, err := w.Write(chunk[:min(len(chunk), HugeStateBytes-sent)])
		sent += n
		h.update(bucket, func(s *HostileStats) { s.HugeBytes += int64(n) })
		if err != nil {
			return
		}
		select {
		case <-h.stop:
			return
		default:
		}
	}
}

// trickle answers 200 with headers at once, then the body's bytes (byteAt(0), byteAt(1),
// …) one per interval, until declared bytes were sent (negative: for ever), the client
// hangs up or the server stops.
func (h *HostileS3) trickle(w http.ResponseWriter, r *http.Request, bucket, contentType string, declared int64, byteAt func(int64) byte) {
	objectHeaders(w, contentType)
	if declared >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(declared, 10))
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	h.mu.Lock()
	interval := h.interval
	h.mu.Unlock()
	start := time.Now()
	h.update(bucket, func(s *HostileStats) { s.Trickles++; s.Trickling++ })
	defer func() {
		held := time.Since(start)
		h.update(bucket, func(s *HostileStats) { s.Trickling--; s.LongestTrickle = max(s.LongestTrickle, held) })
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := int64(0); declared < 0 || i < declared; i++ {
		if _, err := w.Write([]byte{byteAt(i)}); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		h.update(bucket, func(s *HostileStats) { s.TrickledBytes++ })
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-h.stop:
			return
		}
	}
}

func objectHeaders(w http.ResponseWriter, contentType string) {
	hdr := w.Header()
	hdr.Set("Content-Type", contentType)
	hdr.Set("ETag", `"0123456789abcdef0123456789abcdef"`)
	hdr.Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
}

func writeXML(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, body)
}

// s3Error answers an S3 error (without a body for HEAD, as S3 does).
func s3Error(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	body := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<Error><Code>` + code + `</Code><Message>` + xmlText(msg) +
		`</Message><Resource>` + xmlText(r.URL.Path) + `</Resource><RequestId>hostile</RequestId></Error>`
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
