package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTypedErrors: callers tell an access or bucket problem apart with errors.Is, without
// knowing S3's error codes; the error is still the quiet ResponseError.
func TestTypedErrors(t *testing.T) {
	cases := []struct {
		code   string
		status int
		want   error // nil: neither
	}{
		{"AccessDenied", http.StatusForbidden, ErrAccessDenied},
		{"InvalidAccessKeyId", http.StatusForbidden, ErrAccessDenied},
		{"SignatureDoesNotMatch", http.StatusForbidden, ErrAccessDenied},
		{"InvalidToken", http.StatusBadRequest, ErrAccessDenied},
		{"ExpiredToken", http.StatusBadRequest, ErrAccessDenied},
		{"NoSuchBucket", http.StatusNotFound, ErrBucketNotFound},
		{"InvalidArgument", http.StatusBadRequest, nil},
		// Bodies that are no S3 error: the status decides (as minio-go reads it).
		{"", http.StatusForbidden, ErrAccessDenied},
		{"", http.StatusBadRequest, nil},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%d", c.code, c.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if c.code == "" {
					w.Header().Set("Content-Type", "text/plain")
					w.WriteHeader(c.status)
					_, _ = w.Write([]byte("an answer of a service that is no S3"))
					return
				}
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + c.code + `</Code><Message>m</Message></Error>`))
			}))
			defer srv.Close()
			st, err := New(context.Background(), Config{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "bucket", Region: "us-east-1", Insecure: true, MaxRetries: 1})
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.PutToolResult(context.Background(), "s1", "call_1", "x")
			if err == nil {
				t.Fatal("PutToolResult against an endpoint answering errors succeeded")
			}
			for _, sentinel := range []error{ErrAccessDenied, ErrBucketNotFound} {
				if got := errors.Is(err, sentinel); got != (sentinel == c.want) {
					t.Errorf("errors.Is(%v, %v) = %v", err, sentinel, got)
				}
			}
			var re *ResponseError
			if !errors.As(err, &re) || re.StatusCode != c.status {
				t.Errorf("errors.As(*ResponseError) = %+v; want status %d", re, c.status)
			}
		})
	}
}

// TestTypedErrorsFromMinIO: what a real MinIO answers for wrong credentials and a missing
// bucket.
func TestTypedErrorsFromMinIO(t *testing.T) {
	srv := startServer(t)
	c := ctx(t)
	bucket := srv.newBucket(t)

	wrongSecret := srv.config(bucket, "")
	wrongSecret.SecretKey = "wrong-secret-key"
	wrongKey := srv.config(bucket, "")
	wrongKey.AccessKey = "no-such-access-key"
	for name, cfg := range map[string]Config{"wrong secret key": wrongSecret, "unknown access key": wrongKey} {
		st, err := New(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureBucket(c, false); !errors.Is(err, ErrAccessDenied) {
			t.Errorf("%s: EnsureBucket (a HEAD, no body) = %v; want ErrAccessDenied", name, err)
		}
		if _, err := st.GetToolResult(c, "s1", "call_1"); !errors.Is(err, ErrAccessDenied) {
			t.Errorf("%s: GetToolResult (an S3 error body) = %v; want ErrAccessDenied", name, err)
		}
	}

	gone := srv.store(t, "no-such-bucket", "")
	if _, err := gone.PutToolResult(c, "s1", "call_1", "x"); !errors.Is(err, ErrBucketNotFound) || errors.Is(err, ErrAccessDenied) {
		t.Errorf("PutToolResult into a missing bucket = %v; want ErrBucketNotFound", err)
	}
}
