package openai

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// TestQuietErrors: issue 14. With QuietErrors (the operator's setting) no text of the
// server's answer reaches an error, whatever the answer: the endpoint is a policy author's
// choice, the errors are read by tenants.
func TestQuietErrors(t *testing.T) {
	const canary = "CANARY-internal-service-9c1d"
	answers := map[string]struct {
		status int
		body   string
	}{
		"400 JSON":     {http.StatusBadRequest, `{"error":{"message":"` + canary + `"}}`},
		"401 text":     {http.StatusUnauthorized, "token " + canary},
		"500 text":     {http.StatusInternalServerError, canary},
		"200 garbage":  {http.StatusOK, "<html>" + canary + "</html>"},
		"200 error":    {http.StatusOK, `{"choices":[],"error":{"message":"` + canary + `"}}`},
		"200 refusal":  {http.StatusOK, `{"choices":[{"message":{"content":"","refusal":"` + canary + `"},"finish_reason":"` + canary + `"}]}`},
		"200 bad part": {http.StatusOK, `{"choices":[{"message":{"content":{"x":"` + canary + `"}}}]}`},
	}
	for name, a := range answers {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(a.status)
				_, _ = w.Write([]byte(a.body))
			})
			loud := newSummarizer(t, srv, func(c *Config) { c.MaxRetries = -1 })
			if _, err := loud.Summarize(context.Background(), sampleRequest()); err == nil || !strings.Contains(err.Error(), canary) {
				t.Logf("without QuietErrors: %v", err) // the CLI's default shows the server's text
			}
			quiet := newSummarizer(t, srv, func(c *Config) { c.MaxRetries, c.QuietErrors = -1, true })
			_, err := quiet.Summarize(context.Background(), sampleRequest())
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), canary) {
				t.Errorf("the error quotes the server's answer: %v", err)
			}
			var se *StatusError
			if a.status != http.StatusOK && (!errors.As(err, &se) || se.StatusCode != a.status) {
				t.Errorf("error %v: want a StatusError %d", err, a.status)
			}
		})
	}
}
