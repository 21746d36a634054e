package responses

import (
	"bytes"
	"encoding/json"
)

// usage is a response's usage: input_tokens counts the whole prompt, cached tokens included
// (input_tokens_details.cached_tokens is a part of it, not an addition).
type usage struct {
	InputTokens int `json:"input_tokens"`
}

// PromptTokens reads the prompt size from a complete (non-streamed) Responses answer: its
// usage.input_tokens. It reports false when the body has no positive count.
func PromptTokens(body []byte) (int, bool) {
	var v struct {
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil || v.Usage.InputTokens <= 0 {
		return 0, false
	}
	return v.Usage.InputTokens, true
}

// finalEvents are the stream events that carry the finished response with its usage.
var finalEvents = map[string]bool{"response.completed": true, "response.incomplete": true, "response.done": true}

// usageKey is in every event PromptTokensFromEvent reads: most events of a stream (text
// deltas) are skipped without being parsed.
var usageKey = []byte(`"usage"`)

// PromptTokensFromEvent reads the prompt size from one server-sent event's data of a
// streamed Responses answer: the response.usage.input_tokens of the event that ends the
// response (response.completed, or response.incomplete / response.done when they carry
// usage). Every other event reports false.
func PromptTokensFromEvent(data []byte) (int, bool) {
	if !bytes.Contains(data, usageKey) {
		return 0, false
	}
	var v struct {
		Type     string `json:"type"`
		Response *struct {
			Usage *usage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &v) != nil || !finalEvents[v.Type] || v.Response == nil || v.Response.Usage == nil ||
		v.Response.Usage.InputTokens <= 0 {
		return 0, false
	}
	return v.Response.Usage.InputTokens, true
}
