package policy

import (
	"context"
	"fmt"
	"net/http"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/summarize/openai"
)

// MaxTokensField is the request field the OpenAI summarizer sends the policy's
// maxOutputTokens in.
func MaxTokensField(f compactionv1alpha1.OpenAIMaxTokensField) openai.TokenLimitField {
	if f == compactionv1alpha1.OpenAIMaxCompletionTokens {
		return openai.MaxCompletionTokens
	}
	// MaxTokens, and "" for a policy stored before the field existed (the API server
	// defaults it on read, but a client may hand over an object it never defaulted).
	return openai.MaxTokens
}

// SummarizerSpec is what a policy's summarizer is built from, its API key read. It is
// comparable with ==, so the API can tell whether a session's cached engine still has the
// policy's summarizer without building one on every request; the zero value is the
// extractive summarizer.
type SummarizerSpec struct {
	// openAI: cfg is used; otherwise the extractive summarizer. cfg never holds a
	// Temperature (policies have none): a new pointer every request would defeat ==.
	openAI bool
	cfg    openai.Config
}

// SummarizerSpec reads the policy's summarizer configuration (OpenAIConfig); the summarizer
// sends its requests with client (nil: the default client).
func (p *Policy) SummarizerSpec(ctx context.Context, secrets SecretReader, clusterResourceNamespace string, client *http.Client) (SummarizerSpec, error) {
	cfg, ok, err := p.OpenAIConfig(ctx, secrets, clusterResourceNamespace)
	if err != nil {
		return SummarizerSpec{}, err
	}
	cfg.HTTPClient = client
	return SummarizerSpec{openAI: ok, cfg: cfg}, nil
}

// New builds the summarizer the spec describes.
func (s SummarizerSpec) New() (compaction.Summarizer, error) {
	if !s.openAI {
		return compaction.ExtractiveSummarizer{}, nil
	}
	sum, err := openai.New(s.cfg)
	if err != nil {
		return nil, fmt.Errorf("OpenAI summarizer: %w", err)
	}
	return sum, nil
}
