package policy

import (
	"net/http"
	"testing"

	"github.com/minio/minio-go/v7"
)

// s3Transport restates minio-go's default transport: a checked store must behave like an
// unchecked one (timeouts, pool sizes, no transparent gzip decoding, TLS 1.2).
func TestS3TransportIsMinioDefault(t *testing.T) {
	t.Setenv("SSL_CERT_FILE", "")
	for _, secure := range []bool{false, true} {
		want, err := minio.DefaultTransport(secure)
		if err != nil {
			t.Fatal(err)
		}
		got := s3Transport(secure)
		settings := func(tr *http.Transport) any {
			var minTLS uint16
			if tr.TLSClientConfig != nil {
				minTLS = tr.TLSClientConfig.MinVersion
			}
			return [...]any{tr.Proxy != nil, tr.DialContext != nil, tr.MaxIdleConns, tr.MaxIdleConnsPerHost,
				tr.ResponseHeaderTimeout, tr.IdleConnTimeout, tr.TLSHandshakeTimeout, tr.ExpectContinueTimeout,
				tr.DisableCompression, tr.ForceAttemptHTTP2, tr.TLSClientConfig != nil, minTLS}
		}
		if g, w := settings(got), settings(want); g != w {
			t.Errorf("secure=%v: s3Transport %v, minio.DefaultTransport %v", secure, g, w)
		}
	}
}
