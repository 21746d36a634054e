package s3

import (
	"net/http"
	"testing"

	"github.com/minio/minio-go/v7"
)

// DefaultTransport is minio-go's default transport for the configuration's scheme, which a
// store given no transport uses: a store on a wrapped DefaultTransport (policy.Stores checks
// its connections) behaves like an unchecked one (timeouts, pool sizes, no transparent gzip
// decoding, TLS 1.2).
func TestDefaultTransportIsMinioDefault(t *testing.T) {
	t.Setenv("SSL_CERT_FILE", "")
	for _, secure := range []bool{false, true} {
		want, err := minio.DefaultTransport(secure)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DefaultTransport(Config{Endpoint: "s3.example.com", Insecure: !secure})
		if err != nil {
			t.Fatal(err)
		}
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
			t.Errorf("secure=%v: DefaultTransport %v, minio.DefaultTransport %v", secure, g, w)
		}
	}
}
