package s3

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
)

// TestErrorsDoNotEchoTheBody: issue 14. Whoever writes a policy chooses the S3 endpoint; what
// it answers must not come back in errors (which reach conditions, events, records and API
// answers), or a policy pointed at an internal service reads that service through them.
func TestErrorsDoNotEchoTheBody(t *testing.T) {
	const canary = "CANARY-metadata-credentials-7f3a"
	bodies := map[string]struct {
		contentType, body string
		code              string
	}{
		"S3 XML": {"application/xml", `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>` + canary + `</Message><Key>` + canary + `</Key></Error>`, "AccessDenied"},
		"code":   {"application/xml", `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + canary + ` x</Code><Message>m</Message></Error>`, ""},
		"text":   {"text/plain", "secret from an internal service: " + canary, ""},
		"json":   {"application/json", `{"AccessKeyId":"` + canary + `"}`, ""},
	}
	for name, b := range bodies {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", b.contentType)
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(b.body))
			}))
			defer srv.Close()
			st, err := New(context.Background(), Config{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "bucket", Insecure: true, MaxRetries: 1})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, putErr := st.PutToolResult(ctx, "s1", "call_1", "x")
			_, getErr := st.GetToolResult(ctx, "s1", "call_1")
			for op, err := range map[string]error{
				"EnsureBucket": st.EnsureBucket(ctx, false), "Ping": st.Ping(ctx), "PutToolResult": putErr, "GetToolResult": getErr,
				"SaveState": st.SaveState(ctx, "s1", nil), "ReadRecords": st.ReadRecords(ctx, "s1", &strings.Builder{}),
			} {
				if err == nil {
					continue
				}
				if strings.Contains(err.Error(), canary) {
					t.Errorf("%s: the error echoes the endpoint's body: %v", op, err)
				}
			}
			if putErr == nil {
				t.Fatal("PutToolResult against a 403 endpoint succeeded")
			}
			var resp minio.ErrorResponse
			if !errors.As(putErr, &resp) || resp.StatusCode != http.StatusForbidden || resp.Code != b.code && b.code != "" {
				t.Errorf("errors.As(minio.ErrorResponse) = %+v; want status 403, code %q", resp, b.code)
			}
			if !strings.Contains(putErr.Error(), "403") {
				t.Errorf("the error does not say the status: %v", putErr)
			}
		})
	}
}
