package testenv

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// CredentialTrap stands in for an S3 endpoint an attacker runs: it answers every request
// with 403 AccessDenied and remembers what each one carried, so a test can tell whether the
// operator sent it a credential (SigV4 puts the access key ID in the Authorization header's
// Credential=).
type CredentialTrap struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []string
}

// StartCredentialTrap starts a trap on a loopback port and stops it when the test ends.
func StartCredentialTrap(t testing.TB) *CredentialTrap {
	t.Helper()
	return startTrap(t, "application/xml", `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>trap</Message></Error>`, http.StatusForbidden)
}

// StartTrap is StartCredentialTrap answering 403 with body (and HEAD requests 404, so a
// policy with createBucket goes on to create the bucket), for a test that checks what of an
// endpoint's answer comes back in conditions and events.
func StartTrap(t testing.TB, contentType, body string) *CredentialTrap {
	t.Helper()
	return startTrap(t, contentType, body, http.StatusNotFound)
}

func startTrap(t testing.TB, contentType, body string, headStatus int) *CredentialTrap {
	t.Helper()
	c := &CredentialTrap{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.requests = append(c.requests, r.Method+" "+r.URL.String()+" Authorization: "+r.Header.Get("Authorization"))
		c.mu.Unlock()
		w.Header().Set("Content-Type", contentType)
		if r.Method == http.MethodHead {
			w.WriteHeader(headStatus)
			return
		}
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// Endpoint is the trap's host:port, as a policy's storage endpoint.
func (c *CredentialTrap) Endpoint() string { return strings.TrimPrefix(c.srv.URL, "http://") }

// Requests are the requests received so far: method, URL and Authorization header.
func (c *CredentialTrap) Requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.requests...)
}

// Saw returns the first request that carried s anywhere in its URL or Authorization header,
// or "".
func (c *CredentialTrap) Saw(s string) string { return c.SawAfter(0, s) }

// SawAfter is Saw for the requests after the first n (n = len(Requests()) at some point).
func (c *CredentialTrap) SawAfter(n int, s string) string {
	reqs := c.Requests()
	for _, r := range reqs[min(n, len(reqs)):] {
		if strings.Contains(r, s) {
			return r
		}
	}
	return ""
}
