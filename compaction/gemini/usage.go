package gemini

import (
	"bytes"
	"encoding/json"
)

// usage is the part of a GenerateContentResponse the readers use. promptTokenCount is the
// whole prompt: when part of it comes from a cache (cachedContent, or the API's implicit
// caching) it still counts those tokens, which cachedContentTokenCount repeats, so that count
// is not added. toolUsePromptTokenCount (the results of the API's own tools) is not the
// request's prompt either.
type usage struct {
	UsageMetadata *struct {
		PromptTokenCount int `json:"promptTokenCount"`
	} `json:"usageMetadata"`
}

func (u *usage) prompt() (int, bool) {
	if u.UsageMetadata == nil || u.UsageMetadata.PromptTokenCount <= 0 {
		return 0, false
	}
	return u.UsageMetadata.PromptTokenCount, true
}

// PromptTokens reads the prompt's size from a complete generateContent response:
// usageMetadata.promptTokenCount. A JSON array (a streamGenerateContent answer without
// alt=sse) is read as PromptTokensFromArray reads it.
func PromptTokens(body []byte) (int, bool) {
	t := bytes.TrimSpace(body)
	if len(t) > 0 && t[0] == '[' {
		return PromptTokensFromArray(t)
	}
	var u usage
	if json.Unmarshal(t, &u) != nil {
		return 0, false
	}
	return u.prompt()
}

// PromptTokensFromChunk reads the prompt's size from one streamed response: the data of a
// server-sent event (alt=sse), or one element of the JSON-array stream (with the "[", "," or
// "]" around it, if the caller split the array at lines). It reports false for a chunk
// without usageMetadata.promptTokenCount.
func PromptTokensFromChunk(data []byte) (int, bool) {
	t := bytes.TrimSpace(data)
	t = bytes.TrimSpace(bytes.TrimLeft(t, "[,"))
	t = bytes.TrimSpace(bytes.TrimRight(t, "],"))
	var u usage
	if len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &u) != nil {
		return 0, false
	}
	return u.prompt()
}

// PromptTokensFromArray reads the prompt's size from a JSON-array stream (the whole answer
// of streamGenerateContent without alt=sse): the last promptTokenCount of its elements. An
// array cut short (the stream ended early) is read up to its last whole element.
func PromptTokensFromArray(body []byte) (int, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	t, err := dec.Token()
	if err != nil {
		return 0, false
	}
	if t != json.Delim('[') {
		return PromptTokens(body)
	}
	n, seen := 0, false
	for dec.More() {
		var u usage
		if dec.Decode(&u) != nil {
			break
		}
		if v, ok := u.prompt(); ok {
			n, seen = v, true
		}
	}
	return n, seen
}
