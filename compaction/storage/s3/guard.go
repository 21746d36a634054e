package s3

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/internal/bounded"
)

// ctxKey marks the contexts of the store's requests for guardTransport.
type ctxKey int

const (
	objectReadKey ctxKey = iota // an object's body, which the store bounds itself
	pageBudgetKey               // a *pageBudget shared by the listings of one store call
)

func objectRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, objectReadKey, true)
}

// pageBudget counts the list requests of one store call.
type pageBudget struct{ used atomic.Int64 }

// withPageBudget gives ctx a budget of bounded.ListPages list requests, unless it has one:
// the listings of one call share it.
func withPageBudget(ctx context.Context) context.Context {
	if _, ok := ctx.Value(pageBudgetKey).(*pageBudget); ok {
		return ctx
	}
	return context.WithValue(ctx, pageBudgetKey, &pageBudget{})
}

// guardTransport bounds what the store's requests cost whatever the endpoint answers: it
// refuses a list request past its call's page budget (with compaction.ErrTooManyPages), and
// cuts every answer but an object's body (which the store bounds per kind) past
// bounded.ResponseBytes. minio-go decodes a list page as it streams in, so this is what
// bounds an endless one.
type guardTransport struct{ base http.RoundTripper }

func (g guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if b, ok := ctx.Value(pageBudgetKey).(*pageBudget); ok && req.Method == http.MethodGet && isListing(req) {
		if b.used.Add(1) > bounded.ListPages {
			if req.Body != nil {
				_ = req.Body.Close() // a RoundTripper closes the body, even on errors
			}
			return nil, compaction.ErrTooManyPages
		}
	}
	resp, err := g.base.RoundTrip(req)
	if err != nil || resp.Body == nil || req.Method == http.MethodGet && ctx.Value(objectReadKey) != nil {
		return resp, err
	}
	what := "the answer to " + req.Method
	if resp.StatusCode != http.StatusOK || (!isListing(req) && !req.URL.Query().Has("delete")) {
		resp.Body = readCloser{bounded.Reader(resp.Body, bounded.ResponseBytes, what, req.URL.Path), resp.Body}
		return resp, nil
	}
	// A list page or a batch delete's answer: read whole (within the cap) and its entries
	// counted before minio-go decodes it. A failure is the body's read error, which minio-go
	// reports as it is, without a retry.
	data, err := bounded.ReadAll(resp.Body, resp.ContentLength, bounded.ResponseBytes, what, req.URL.Path)
	_ = resp.Body.Close() // read to its end or given up: nothing to lose
	if err == nil {
		err = checkEntries(data, what+" "+req.URL.Path)
	}
	if err != nil {
		resp.Body, resp.ContentLength = io.NopCloser(errReader{err}), -1
		return resp, nil
	}
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(data)), int64(len(data))
	return resp, nil
}

// checkEntries fails when the XML document data has more than bounded.PageEntries elements
// under its root. A document that is not well-formed passes: minio-go reports it.
func checkEntries(data []byte, name string) error {
	d := xml.NewDecoder(bytes.NewReader(data))
	depth, entries := 0, 0
	for {
		tok, err := d.RawToken()
		if err != nil {
			return nil
		}
		switch tok.(type) {
		case xml.StartElement:
			if depth++; depth == 2 {
				if entries++; entries > bounded.PageEntries {
					return fmt.Errorf("%s holds more than %d entries, the cap for one: %w", name, bounded.PageEntries, compaction.ErrObjectTooLarge)
				}
			}
		case xml.EndElement:
			depth--
		}
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// isListing reports whether req lists a bucket (ListObjects V2 or V1).
func isListing(req *http.Request) bool {
	q := req.URL.Query()
	return q.Has("list-type") || q.Has("prefix") || q.Has("marker")
}
