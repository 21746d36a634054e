package policy

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"time"
)

// s3Transport is the HTTP transport an S3 store gets when its connections are checked
// (Stores.Get wraps its dialer): minio-go's default transport (minio.DefaultTransport, which
// the store uses when given none), so a checked store behaves like an unchecked one. It is
// restated here so this package does not depend on minio-go; TestS3TransportIsMinioDefault
// keeps the two equal.
func s3Transport(secure bool) *http.Transport {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   16,
		ResponseHeaderTimeout: time.Minute,
		IdleConnTimeout:       time.Minute,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 10 * time.Second,
		// Objects stored with Content-Encoding gzip are read as stored, not decoded.
		DisableCompression: true,
	}
	if !secure {
		return tr
	}
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	// As minio-go: the file SSL_CERT_FILE names is trusted besides the system's roots.
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if data, err := os.ReadFile(f); err == nil {
			roots.AppendCertsFromPEM(data)
		}
		tr.TLSClientConfig.RootCAs = roots
	}
	return tr
}
