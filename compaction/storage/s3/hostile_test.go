package s3

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
)

// Issue 28, item 1: a namespace admin points a policy at an S3 endpoint of their own. What it
// answers must cost the manager a bounded amount of memory and time: a state of 1 GiB, a body
// without a length that never ends, a listing that never ends.

const gib = 1 << 30

type listing int

const (
	endlessTokens listing = iota // pages of one new key and a new continuation token, for ever
	endlessPage                  // one page whose XML never ends
	tinyEntries                  // one page of 100,000 empty entries (about 1 MiB)
	oneSegment                   // one page, one record segment of session s1, and the end
)

// hostileS3 speaks enough S3 for minio-go: object GETs answer objectBytes bytes (declared or
// not), listings answer as listing says, batch deletes delete whatever they are asked, and
// PUTs are answered as put says.
type hostileS3 struct {
	srv *httptest.Server
	// objectBytes is the length of every object GET's body; declare sends it as Content-Length.
	objectBytes int64
	declare     bool
	listing     listing
	// putConflict answers every PUT 412 PreconditionFailed: the object exists.
	putConflict bool
	// deleteFails answers every key of a batch delete AccessDenied.
	deleteFails bool

	sent      atomic.Int64 // body bytes of object GETs and list pages written
	listPages atomic.Int64
	deleted   atomic.Int64
}

func startHostileS3(t *testing.T, h *hostileS3) *Store {
	t.Helper()
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	st, err := New(context.Background(), Config{
		Endpoint: strings.TrimPrefix(h.srv.URL, "http://"), Bucket: "bucket", Region: "us-east-1",
		Insecure: true, AccessKey: "k", SecretKey: "s", // MaxRetries: the default, as the manager runs it
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var chunk = bytes.Repeat([]byte("x"), 32<<10)

func (h *hostileS3) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path := strings.TrimPrefix(r.URL.Path, "/bucket")
	switch {
	case r.Method == http.MethodGet && (path == "" || path == "/") && q.Has("list-type"):
		h.list(w, q)
	case r.Method == http.MethodPut && h.putConflict:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusPreconditionFailed)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>m</Message></Error>`)
	case r.Method == http.MethodPost && q.Has("delete"):
		h.batchDelete(w, r)
	case r.Method == http.MethodGet:
		h.object(w, r)
	case r.Method == http.MethodHead:
		w.WriteHeader(http.StatusNotFound)
	default:
		w.WriteHeader(http.StatusNotImplemented)
	}
}

func (h *hostileS3) object(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
	w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	if h.declare {
		w.Header().Set("Content-Length", strconv.FormatInt(h.objectBytes, 10))
	}
	w.WriteHeader(http.StatusOK)
	// Generated as it goes: nothing of the size is ever allocated, here or (fixed) there.
	for left := h.objectBytes; left > 0 && r.Context().Err() == nil; {
		n, err := w.Write(chunk[:min(int64(len(chunk)), left)])
		h.sent.Add(int64(n))
		left -= int64(n)
		if err != nil {
			return
		}
	}
}

func (h *hostileS3) list(w http.ResponseWriter, q map[string][]string) {
	page := h.listPages.Add(1)
	prefix := ""
	if p := q["prefix"]; len(p) > 0 {
		prefix = p[0]
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	head := `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` +
		`<Name>bucket</Name><Prefix>` + prefix + `</Prefix><MaxKeys>1000</MaxKeys>`
	entry := func(i int64) string {
		return fmt.Sprintf(`<Contents><Key>%sobj-%d</Key><LastModified>2025-01-01T00:00:00.000Z</LastModified>`+
			`<ETag>"e"</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>`, prefix, i)
	}
	switch h.listing {
	case oneSegment:
		_, _ = io.WriteString(w, head+`<IsTruncated>false</IsTruncated><Contents><Key>compaction_records/s1/r1.jsonl</Key>`+
			`<LastModified>2025-01-01T00:00:00.000Z</LastModified><ETag>"e"</ETag><Size>1</Size></Contents></ListBucketResult>`)
		return
	case tinyEntries:
		_, _ = io.WriteString(w, head+`<IsTruncated>false</IsTruncated>`+strings.Repeat("<Contents/>", 100_000)+`</ListBucketResult>`)
		return
	case endlessPage:
		n, _ := io.WriteString(w, head)
		h.sent.Add(int64(n))
		for i := int64(0); i < gib/100; i++ { // ~100 bytes an entry: about 1 GiB
			n, err := io.WriteString(w, entry(i))
			h.sent.Add(int64(n))
			if err != nil {
				return
			}
		}
		return
	}
	n, _ := io.WriteString(w, head+`<KeyCount>1</KeyCount><IsTruncated>true</IsTruncated>`+
		`<NextContinuationToken>token-`+strconv.FormatInt(page, 10)+`</NextContinuationToken>`+entry(page)+`</ListBucketResult>`)
	h.sent.Add(int64(n))
}

func (h *hostileS3) batchDelete(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Objects []struct {
			Key string `xml:"Key"`
		} `xml:"Object"`
	}
	if err := xml.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
	for _, o := range req.Objects {
		if h.deleteFails {
			b.WriteString("<Error><Key>")
			_ = xml.EscapeText(&b, []byte(o.Key))
			b.WriteString("</Key><Code>AccessDenied</Code><Message>m</Message></Error>")
			continue
		}
		b.WriteString("<Deleted><Key>")
		_ = xml.EscapeText(&b, []byte(o.Key))
		b.WriteString("</Key></Deleted>")
	}
	b.WriteString("</DeleteResult>")
	if !h.deleteFails {
		h.deleted.Add(int64(len(req.Objects)))
	}
	w.Header().Set("Content-Type", "application/xml")
	_, _ = io.WriteString(w, b.String())
}

// checkBounded runs op and fails the test unless it ended within limit and the heap grew by
// less than 64 MiB meanwhile (its peak, sampled every millisecond, over where it started),
// and, when maxAlloc > 0, unless everything allocated meanwhile (the server's writes
// included) stayed under maxAlloc: a bound no sampling can miss.
func checkBounded(t *testing.T, name string, limit time.Duration, maxAlloc uint64, op func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	peak := make(chan uint64)
	stop := make(chan struct{})
	go func() {
		var m runtime.MemStats
		var max uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&m)
			max = maxOf(max, m.HeapAlloc)
			select {
			case <-stop:
				peak <- max
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	err := op(ctx)
	took := time.Since(start)
	close(stop)
	grew := maxOf(<-peak, before.HeapAlloc) - before.HeapAlloc
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if took >= limit || ctx.Err() != nil {
		t.Errorf("%s: took %v (limit %v): %v", name, took.Round(time.Millisecond), limit, err)
	}
	if grew >= 64<<20 {
		t.Errorf("%s: the heap grew by %d MiB", name, grew>>20)
	}
	if maxAlloc > 0 && alloc >= maxAlloc {
		t.Errorf("%s: allocated %d MiB", name, alloc>>20)
	}
	t.Logf("%s: %v in %v; heap grew %d MiB at most, %d MiB allocated", name, err, took.Round(time.Millisecond), grew>>20, alloc>>20)
	return err
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// TestHostileObjectBodies: a state of 1 GiB, declared or not, and endless tool results and
// records, fail quickly with ErrObjectTooLarge, naming the object, without being read whole.
func TestHostileObjectBodies(t *testing.T) {
	for _, declare := range []bool{true, false} {
		t.Run(fmt.Sprintf("declared=%v", declare), func(t *testing.T) {
			h := &hostileS3{objectBytes: gib, declare: declare, listing: oneSegment}
			st := startHostileS3(t, h)
			const sid = "s1"
			ops := []struct {
				name string
				cap  int64
				op   func(ctx context.Context) error
			}{
				{"LoadState", bounded.StateBytes, func(ctx context.Context) error {
					_, err := st.LoadState(ctx, sid)
					return err
				}},
				{"LoadStateIfChanged", bounded.StateBytes, func(ctx context.Context) error {
					_, err := st.LoadStateIfChanged(ctx, sid, `"another-version"`)
					return err
				}},
				{"GetToolResult", bounded.ToolResultBytes, func(ctx context.Context) error {
					_, err := st.GetToolResult(ctx, sid, "call_1")
					return err
				}},
				{"OpenToolResult", bounded.ToolResultBytes, func(ctx context.Context) error {
					rc, _, err := st.OpenToolResult(ctx, sid, "call_1")
					if err != nil {
						return err
					}
					defer func() { _ = rc.Close() }()
					_, err = io.Copy(io.Discard, rc)
					return err
				}},
				{"ReadRecords", bounded.RecordBytes, func(ctx context.Context) error {
					return st.ReadRecords(ctx, sid, io.Discard)
				}},
			}
			for _, o := range ops {
				h.sent.Store(0)
				err := checkBounded(t, o.name, 30*time.Second, 64<<20, o.op)
				if !errors.Is(err, compaction.ErrObjectTooLarge) {
					t.Errorf("%s of a 1 GiB object: %v; want ErrObjectTooLarge", o.name, err)
					continue
				}
				if msg := err.Error(); !strings.Contains(msg, "s3://bucket/") || !strings.Contains(msg, strconv.Itoa(int(o.cap))) ||
					declare && !strings.Contains(msg, strconv.Itoa(gib)) {
					t.Errorf("%s: the error does not name the object, its size and the cap: %v", o.name, err)
				}
				// The server writes ahead into socket buffers; nothing near the 1 GiB.
				if sent := h.sent.Load(); sent > o.cap+32<<20 {
					t.Errorf("%s: the server got %d MiB out before the store stopped reading", o.name, sent>>20)
				}
			}
		})
	}
}

// TestHostileStoredToolResultNotReadWhole: PutToolResult over an existing result (the
// endpoint says one exists, then serves 1 GiB) compares no more than the new content's length.
func TestHostileStoredToolResultNotReadWhole(t *testing.T) {
	h := &hostileS3{objectBytes: gib, declare: false, putConflict: true}
	st := startHostileS3(t, h)
	err := checkBounded(t, "PutToolResult", 30*time.Second, 64<<20, func(ctx context.Context) error {
		_, err := st.PutToolResult(ctx, "s1", "call_1", "xxxx")
		return err
	})
	if !errors.Is(err, compaction.ErrToolResultExists) {
		t.Errorf("PutToolResult over a 1 GiB stored result: %v; want ErrToolResultExists", err)
	}
}

// TestHostileEndlessListing: a listing that hands out a new continuation token for ever
// ends after the page cap: DeleteSession deletes what it listed and fails with
// ErrTooManyPages (so the finalizer requeues) instead of holding its worker for good. One
// endless page is cut at the answer cap.
func TestHostileEndlessListing(t *testing.T) {
	t.Run("tokens", func(t *testing.T) {
		h := &hostileS3{}
		st := startHostileS3(t, h)
		var removed int
		err := checkBounded(t, "DeleteSession", 60*time.Second, 0, func(ctx context.Context) error {
			var err error
			removed, err = st.DeleteSession(ctx, "s1")
			return err
		})
		if !errors.Is(err, compaction.ErrTooManyPages) {
			t.Fatalf("DeleteSession against an endless listing: %v; want ErrTooManyPages", err)
		}
		if strings.Contains(err.Error(), "token-") {
			t.Errorf("the error quotes the endpoint's continuation token: %v", err)
		}
		if pages := h.listPages.Load(); pages != bounded.ListPages {
			t.Errorf("the endpoint served %d list pages; want the cap, %d", pages, bounded.ListPages)
		}
		if removed == 0 || int64(removed) != h.deleted.Load() {
			t.Errorf("removed %d objects, the endpoint deleted %d; want the listed ones deleted", removed, h.deleted.Load())
		}
		h.listPages.Store(0)
		err = checkBounded(t, "ReadRecords", 60*time.Second, 0, func(ctx context.Context) error {
			return st.ReadRecords(ctx, "s1", io.Discard)
		})
		if !errors.Is(err, compaction.ErrTooManyPages) {
			t.Errorf("ReadRecords against an endless listing: %v; want ErrTooManyPages", err)
		}
	})
	// Every listed object refused: the error names a few and counts the rest, so it still
	// fits a condition's message.
	t.Run("refused deletes", func(t *testing.T) {
		h := &hostileS3{deleteFails: true}
		st := startHostileS3(t, h)
		removed, err := st.DeleteSession(context.Background(), "s1")
		if !errors.Is(err, compaction.ErrTooManyPages) || !errors.Is(err, ErrAccessDenied) || removed != 0 {
			t.Fatalf("DeleteSession = %d, %v; want 0, ErrTooManyPages and ErrAccessDenied", removed, err)
		}
		if msg := err.Error(); len(msg) > 2048 || !strings.Contains(msg, "and 995 more objects not deleted") {
			t.Errorf("the error is %d bytes: %s", len(msg), msg)
		}
	})
	for name, l := range map[string]listing{"endless page": endlessPage, "tiny entries": tinyEntries} {
		t.Run(name, func(t *testing.T) {
			h := &hostileS3{listing: l}
			st := startHostileS3(t, h)
			err := checkBounded(t, "DeleteSession", 60*time.Second, 0, func(ctx context.Context) error {
				_, err := st.DeleteSession(ctx, "s1")
				return err
			})
			if !errors.Is(err, compaction.ErrObjectTooLarge) {
				t.Errorf("DeleteSession against a list page of %s: %v; want ErrObjectTooLarge", name, err)
			}
			if sent := h.sent.Load(); sent > bounded.ResponseBytes+32<<20 {
				t.Errorf("the server got %d MiB out before the store stopped reading", sent>>20)
			}
		})
	}
}
