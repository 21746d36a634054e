package policy

import (
	"context"
	"net/http"
	"time"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

// SummarizerSpec is what a policy's summarizer is built from, its API key read. It is
// comparable with ==, so the API can tell whether a session's cached engine still has the
// policy's summarizer without building one on every request; the zero value is the
// extractive summarizer.
type SummarizerSpec struct {
	// OpenAI: the OpenAI-compatible summarizer OpenAIConfig describes; otherwise the
	// extractive summarizer.
	OpenAI       bool
	OpenAIConfig OpenAISettings
}

// OpenAISettings are the OpenAI-compatible summarizer's settings a policy makes, with its API
// key read and the process's HTTP client; package backends turns them into the client's
// configuration. They hold no Temperature (policies have none): a new pointer every request
// would defeat == on SummarizerSpec.
type OpenAISettings struct {
	BaseURL, Model, APIKey string
	MaxOutputTokens        int
	MaxTokensField         compactionv1alpha1.OpenAIMaxTokensField
	// Timeout bounds one call; 0 is the client's default.
	Timeout time.Duration
	// HTTPClient sends the requests; nil is the default client.
	HTTPClient *http.Client
}

// SummarizerFactory builds the summarizer a SummarizerSpec describes (backends.NewSummarizer).
// The compaction API takes one instead of building summarizers itself, so it does not link
// the OpenAI client.
type SummarizerFactory func(SummarizerSpec) (compaction.Summarizer, error)

// SummarizerSpec reads the policy's summarizer configuration, with its API key read through
// secrets; the summarizer sends its requests with client (nil: the default client), which
// belongs to the process, not the policy.
func (p *Policy) SummarizerSpec(ctx context.Context, secrets SecretReader, clusterResourceNamespace string, client *http.Client) (SummarizerSpec, error) {
	oa := p.Spec.Summarizer.OpenAI
	if p.Spec.Summarizer.Mode != compactionv1alpha1.SummarizerOpenAI || !oa.IsSet() {
		return SummarizerSpec{}, nil
	}
	key, err := p.APIKey(ctx, secrets, clusterResourceNamespace)
	if err != nil {
		return SummarizerSpec{}, err
	}
	cfg := OpenAISettings{BaseURL: oa.BaseURL, Model: oa.Model, APIKey: key, MaxOutputTokens: int(oa.MaxOutputTokens),
		MaxTokensField: oa.MaxTokensField, HTTPClient: client}
	if oa.TimeoutSeconds > 0 {
		cfg.Timeout = time.Duration(oa.TimeoutSeconds) * time.Second
	}
	return SummarizerSpec{OpenAI: true, OpenAIConfig: cfg}, nil
}
