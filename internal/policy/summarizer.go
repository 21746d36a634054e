package policy

import (
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
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
