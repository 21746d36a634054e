package backends

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/summarize/openai"
)

// A policy's maxTokensField reaches the endpoint as the one length bound it accepts: an
// in-process OpenAI-compatible server that refuses the other field, as OpenAI's reasoning
// models refuse max_tokens.
func TestMaxTokensFieldReachesTheEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field       compactionv1alpha1.OpenAIMaxTokensField
		want, other string
	}{
		{"", "max_tokens", "max_completion_tokens"}, // stored before the field existed
		{compactionv1alpha1.OpenAIMaxTokens, "max_tokens", "max_completion_tokens"},
		{compactionv1alpha1.OpenAIMaxCompletionTokens, "max_completion_tokens", "max_tokens"},
	} {
		t.Run(string(tc.field), func(t *testing.T) {
			t.Parallel()
			got := make(chan map[string]json.RawMessage, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req map[string]json.RawMessage
				body, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(body, &req)
				got <- req
				if _, ok := req[tc.other]; ok {
					http.Error(w, `{"error":{"message":"Unsupported parameter: '`+tc.other+`'"}}`, http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"## Summary\nfine"}}]}`)
			}))
			t.Cleanup(srv.Close)
			oa := compactionv1alpha1.OpenAISummarizerSpec{BaseURL: srv.URL, Model: "m", MaxOutputTokens: 300, MaxTokensField: tc.field}
			s, err := openai.New(openai.Config{BaseURL: oa.BaseURL, Model: oa.Model, APIKey: "k", MaxRetries: -1,
				MaxOutputTokens: int(oa.MaxOutputTokens), MaxTokensField: MaxTokensField(oa.MaxTokensField)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Summarize(context.Background(), compaction.SummaryRequest{Messages: []compaction.Message{{Role: compaction.RoleUser, Content: "hi"}}}); err != nil {
				t.Fatalf("summarize: %v", err)
			}
			if req := <-got; string(req[tc.want]) != "300" {
				t.Errorf("%s = %s, want 300", tc.want, req[tc.want])
			}
		})
	}
}
