package compactclient

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRetries429 is issue 28 item 3's client half: a 429 of the server's flood protection is
// sent again after its Retry-After, body and all, so an agent behind a flood keeps its turns;
// a context too short for the wait gets the 429.
func TestRetries429(t *testing.T) {
	var calls atomic.Int32
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		if calls.Add(1) <= 2 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"code":429,"reason":"TooManyRequests","message":"slow down"}`))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.ReportPassThrough(context.Background(), "ns", "s", PassThroughReport{Protocol: "openai", Reason: PassThroughTooLarge, Count: 1}); err != nil {
		t.Fatalf("after two 429s: %v, want the third answer", err)
	}
	if calls.Load() != 3 || time.Since(start) < 2*time.Second {
		t.Errorf("%d calls in %v, want 3 after waiting 1 s twice", calls.Load(), time.Since(start))
	}
	for i, b := range bodies {
		if !strings.Contains(b, `"reason":"TooLarge"`) {
			t.Errorf("call %d carried %q, want the request's body again", i, b)
		}
	}
	calls.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = c.ReportPassThrough(ctx, "ns", "s", PassThroughReport{Protocol: "openai", Reason: PassThroughTooLarge, Count: 1})
	if ae, ok := err.(*APIError); !ok || ae.Code != http.StatusTooManyRequests || calls.Load() != 1 {
		t.Errorf("with no time to wait: %v after %d calls, want the 429 at once", err, calls.Load())
	}
	none, err := New(srv.URL, WithToken("t"), WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	calls.Store(0)
	if err := none.ReportPassThrough(context.Background(), "ns", "s", PassThroughReport{Protocol: "openai", Reason: PassThroughTooLarge, Count: 1}); err == nil || calls.Load() != 1 {
		t.Errorf("WithRetries(0): %v after %d calls, want the 429", err, calls.Load())
	}
}

// TestRefusesPlainHTTP is issue 28 item 7: a plain-HTTP server off the loopback is refused
// unless asked for; the default token is the audience-bound one, never the kube-apiserver's.
func TestRefusesPlainHTTP(t *testing.T) {
	if _, err := New("http://compaction-operator-api.compaction-system.svc:8082"); err == nil || !strings.Contains(err.Error(), "plain HTTP") {
		t.Errorf("plain HTTP to a cluster service: %v, want a refusal", err)
	}
	for _, ok := range []string{"http://127.0.0.1:8082", "http://localhost:8082", "http://[::1]:8082", "https://api.example"} {
		if _, err := New(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	if _, err := New("http://api.mesh.svc:8082", WithPlainHTTP()); err != nil {
		t.Errorf("WithPlainHTTP: %v", err)
	}
	c, err := New("https://api.example")
	if err != nil {
		t.Fatal(err)
	}
	if c.tokenFile != "/var/run/secrets/compaction.harness9.io/token" {
		t.Errorf("default token file %s, want the audience-bound projected token", c.tokenFile)
	}
}
