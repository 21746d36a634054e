package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockUntilGone blocks a handler until the client goes away or the test ends, so a
// slow-server test can never hang srv.Close.
func blockUntilGone(t *testing.T) func(r *http.Request) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) }) // registered after newServer, so it runs before srv.Close
	return func(r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}
}

func TestPerAttemptTimeout(t *testing.T) {
	var attempts atomic.Int32
	srv := newServer(t, nil)
	block := blockUntilGone(t)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		readRequest(t, r)
		block(r)
	})
	s := newSummarizer(t, srv, func(c *Config) { c.Timeout = 50 * time.Millisecond })

	// The generous outer deadline is the only time bound: if the per-attempt timeout did not
	// work, the call would end by this deadline instead and the checks below would fail.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.Summarize(ctx, sampleRequest())
	if err == nil {
		t.Fatal("Summarize succeeded against a server that never answers")
	}
	if ctx.Err() != nil {
		t.Fatalf("call only ended with the outer context: %v", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 50ms") {
		t.Errorf("error = %v, want a per-attempt timeout", err)
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("attempts = %d, want 3 (timeouts are retried)", n)
	}
}

func TestRetryThenSuccess(t *testing.T) {
	var attempts atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		if attempts.Add(1) == 1 {
			http.Error(w, "warming up", http.StatusInternalServerError)
			return
		}
		writeCompletion(w, anchorsReply)
	})
	text, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
	if err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	if text != anchorsReply {
		t.Errorf("text = %q", text)
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("attempts = %d, want 2", n)
	}
}

func TestNetworkErrorIsRetried(t *testing.T) {
	var attempts atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		if attempts.Add(1) == 1 {
			// Drop the connection without an answer.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
			return
		}
		writeCompletion(w, "recovered")
	})
	text, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
	if err != nil || text != "recovered" {
		t.Fatalf("Summarize = %q, %v", text, err)
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("attempts = %d, want 2", n)
	}
}

func TestServerErrorExhaustsRetries(t *testing.T) {
	var attempts atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		attempts.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, `{"error":{"message":"upstream model crashed","type":"server_error"}}`)
	})
	s := newSummarizer(t, srv, func(c *Config) { c.MaxRetries = 3 })
	_, err := s.Summarize(context.Background(), sampleRequest())
	if err == nil {
		t.Fatal("Summarize succeeded")
	}
	if n := attempts.Load(); n != 4 {
		t.Errorf("attempts = %d, want MaxRetries+1 = 4", n)
	}
	var serr *StatusError
	if !errors.As(err, &serr) || serr.StatusCode != http.StatusBadGateway {
		t.Fatalf("error = %v, want a *StatusError with 502", err)
	}
	for _, want := range []string{"502", "upstream model crashed", "attempt 4 of 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestClientErrorIsNotRetried(t *testing.T) {
	var attempts atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		attempts.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		// vLLM's error shape.
		fmt.Fprint(w, `{"object":"error","message":"This model's maximum context length is 8192 tokens","type":"BadRequestError","code":400}`)
	})
	_, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1", n)
	}
	var serr *StatusError
	if !errors.As(err, &serr) || serr.StatusCode != http.StatusBadRequest {
		t.Fatalf("error = %v, want a *StatusError with 400", err)
	}
	if !strings.Contains(err.Error(), "maximum context length is 8192") {
		t.Errorf("error %q lacks the server's message", err)
	}
}

func TestRateLimitHonoursRetryAfter(t *testing.T) {
	var attempts atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		if attempts.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"message":"rate limited"}}`, http.StatusTooManyRequests)
			return
		}
		writeCompletion(w, anchorsReply)
	})
	start := time.Now()
	text, err := newSummarizer(t, srv, nil).Summarize(context.Background(), sampleRequest())
	if err != nil || text != anchorsReply {
		t.Fatalf("Summarize = %q, %v", text, err)
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("attempts = %d, want 2", n)
	}
	// A lower bound only: RetryBackoff is 1ms, so waiting this long means Retry-After won.
	if elapsed := time.Since(start); elapsed < 900*time.Millisecond {
		t.Errorf("retried after %s, want Retry-After's 1s", elapsed)
	}
}

func TestRetryAfterBeyondDeadlineFailsFast(t *testing.T) {
	var attempts atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		attempts.Add(1)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := newSummarizer(t, srv, nil).Summarize(ctx, sampleRequest())
	if err == nil || !strings.Contains(err.Error(), "would pass the context deadline") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("error = %v, want a fast failure naming 503 and the deadline", err)
	}
	if ctx.Err() != nil {
		t.Error("call waited for the deadline instead of failing fast")
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1", n)
	}
}

func TestCancelDuringRequest(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	srv := newServer(t, nil)
	block := blockUntilGone(t)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		once.Do(func() { close(started) })
		block(r)
	})
	// A per-attempt timeout far beyond the test's bound: only cancellation can end the call.
	s := newSummarizer(t, srv, func(c *Config) { c.Timeout = time.Hour })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-started
		cancel()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := s.Summarize(ctx, sampleRequest())
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Summarize did not return after its context was cancelled")
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	var attempts atomic.Int32
	answered := make(chan struct{}, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		attempts.Add(1)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
		w.(http.Flusher).Flush()
		answered <- struct{}{}
	})
	s := newSummarizer(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-answered
		// Give the client a moment to read the 429 and start its 30s wait. Should the cancel
		// still land inside the attempt, the assertions below hold all the same.
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	_, err := s.Summarize(ctx, sampleRequest())
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "429") {
		t.Fatalf("error = %v, want context.Canceled mentioning the last 429", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1", n)
	}
}

func TestAlreadyCancelledContextSendsNothing(t *testing.T) {
	var attempts atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		writeCompletion(w, "x")
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newSummarizer(t, srv, nil).Summarize(ctx, sampleRequest())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if n := attempts.Load(); n != 0 {
		t.Errorf("attempts = %d, want 0", n)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"1", time.Second, true},
		{" 0 ", 0, true},
		{"-3", 0, false},
		{"soon", 0, false},
		{"99999999999999999", 24 * time.Hour, true},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
	} {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoffIsBoundedAndGrows(t *testing.T) {
	s := &Summarizer{retryBackoff: 100 * time.Millisecond}
	for n, base := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 50: maxBackoff} {
		for range 100 {
			if d := s.backoff(n); d < base/2 || d > base {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, base/2, base)
			}
		}
	}
}
