package compactclient

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// sessionOn is a Session of ns/agent on a test server answering with h.
func sessionOn(t *testing.T, h http.HandlerFunc) *Session {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	return &Session{Client: c, Namespace: "ns", Name: "agent"}
}
