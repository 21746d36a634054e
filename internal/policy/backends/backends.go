// Package backends builds the clients policies name: S3 stores and OpenAI-compatible
// summarizers. It is apart from package policy so that what only needs policies, their
// specs and the interfaces (the compaction API) does not link the S3 and OpenAI clients;
// the manager and the controllers, which dial storage, use it.
package backends

import (
	"context"
	"fmt"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/compaction/summarize/openai"
	"github.com/harness9/compaction-operator/internal/policy"
)

// S3Config reads the credentials of loc from its Secret (policy.StorageCredentials) and
// returns the store configuration.
func S3Config(ctx context.Context, secrets policy.SecretReader, loc *compactionv1alpha1.RecordsLocation) (s3.Config, error) {
	cfg := s3.Config{
		Endpoint: loc.Endpoint,
		Bucket:   loc.Bucket,
		Prefix:   loc.Prefix,
		Region:   loc.Region,
		Insecure: loc.Protocol == compactionv1alpha1.S3HTTP,
	}
	access, secret, err := policy.StorageCredentials(ctx, secrets, loc)
	if err != nil {
		return cfg, err
	}
	cfg.AccessKey, cfg.SecretKey = access, secret
	return cfg, nil
}

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

// NewSummarizer builds the summarizer spec describes; it is a policy.SummarizerFactory.
func NewSummarizer(spec policy.SummarizerSpec) (compaction.Summarizer, error) {
	if !spec.OpenAI {
		return compaction.ExtractiveSummarizer{}, nil
	}
	oa := spec.OpenAIConfig
	// QuietErrors: summarizer errors reach records, events and API answers, and the endpoint
	// is the policy author's choice; none of its answer's text is quoted.
	sum, err := openai.New(openai.Config{BaseURL: oa.BaseURL, Model: oa.Model, APIKey: oa.APIKey, MaxOutputTokens: oa.MaxOutputTokens,
		MaxTokensField: MaxTokensField(oa.MaxTokensField), QuietErrors: true, Timeout: oa.Timeout, HTTPClient: oa.HTTPClient})
	if err != nil {
		return nil, fmt.Errorf("OpenAI summarizer: %w", err)
	}
	return sum, nil
}
