package gemini

import "testing"

// A complete generateContent response as the API answers it: promptTokenCount includes the
// cached tokens that cachedContentTokenCount repeats.
const generateResponse = `{
  "candidates": [{"content": {"parts": [{"text": "Done.", "thoughtSignature": "CiQB"}], "role": "model"}, "finishReason": "STOP", "index": 0}],
  "usageMetadata": {"promptTokenCount": 12845, "candidatesTokenCount": 3, "totalTokenCount": 13010, "cachedContentTokenCount": 11980,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12845}], "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 11980}], "thoughtsTokenCount": 162},
  "modelVersion": "gemini-2.5-pro",
  "responseId": "x1"
}`

// Streamed chunks: every chunk carries usageMetadata, the last one the final count; a chunk
// may have candidates only.
const (
	chunk1  = `{"candidates": [{"content": {"parts": [{"text": "Do"}], "role": "model"}, "index": 0}], "usageMetadata": {"promptTokenCount": 12845, "totalTokenCount": 12845}, "modelVersion": "gemini-2.5-pro", "responseId": "x1"}`
	chunk2  = `{"candidates": [{"content": {"parts": [{"text": "ne."}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 12846, "candidatesTokenCount": 3, "totalTokenCount": 13011, "thoughtsTokenCount": 162}, "modelVersion": "gemini-2.5-pro", "responseId": "x1"}`
	noUsage = `{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": {}}}], "role": "model"}, "index": 0}]}`
)

func TestUsageReaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		read func([]byte) (int, bool)
		body string
		want int
		ok   bool
	}{
		{"response", PromptTokens, generateResponse, 12845, true},
		{"response without usage", PromptTokens, noUsage, 0, false},
		{"an error", PromptTokens, `{"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}`, 0, false},
		{"not JSON", PromptTokens, `{"usageMetadata": `, 0, false},
		{"an array given as a response", PromptTokens, "[" + chunk1 + "," + chunk2 + "]", 12846, true},
		{"SSE data", PromptTokensFromChunk, chunk1, 12845, true},
		{"SSE data without usage", PromptTokensFromChunk, noUsage, 0, false},
		{"zero prompt tokens", PromptTokensFromChunk, `{"usageMetadata": {"promptTokenCount": 0}}`, 0, false},
		{"array element with its comma", PromptTokensFromChunk, "," + chunk2 + "\r\n", 12846, true},
		{"first array element", PromptTokensFromChunk, "[" + chunk1, 12845, true},
		{"last array element", PromptTokensFromChunk, chunk2 + "]", 12846, true},
		{"the array's end", PromptTokensFromChunk, "]", 0, false},
		{"array", PromptTokensFromArray, "[" + chunk1 + ",\r\n" + chunk2 + "]", 12846, true},
		{"array with a last chunk without usage", PromptTokensFromArray, "[" + chunk1 + "," + chunk2 + "," + noUsage + "]", 12846, true},
		{"array cut short", PromptTokensFromArray, "[" + chunk1 + "," + chunk2[:40], 12845, true},
		{"empty array", PromptTokensFromArray, "[]", 0, false},
		{"an object given as an array", PromptTokensFromArray, generateResponse, 12845, true},
		{"nothing", PromptTokensFromArray, "", 0, false},
	} {
		got, ok := tc.read([]byte(tc.body))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: (%d, %v), want (%d, %v)", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
