package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/compactrequest"
	"github.com/harness9/compaction-operator/internal/rawjson"
)

// openAIProtocol is OpenAI Chat Completions (POST /v1/chat/completions).
type openAIProtocol struct {
	// cacheKey sets prompt_cache_key to the conversation when the agent did not set one.
	cacheKey bool
}

func (openAIProtocol) name() string { return "openai" }

func (o openAIProtocol) decode(_ *http.Request, body []byte) (request, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	raw, ok := fields["messages"]
	if !ok {
		return nil, errors.New("no messages")
	}
	msgs, ok := compactrequest.DecodeMessages(raw)
	if !ok {
		if err := json.Unmarshal(raw, &msgs); err != nil {
			return nil, fmt.Errorf("messages: %w", err)
		}
	}
	if len(msgs) == 0 {
		return nil, errors.New("no messages")
	}
	parts := asText(msgs)
	developer := asSystem(msgs)
	var stream bool
	if s, ok := fields["stream"]; ok {
		_ = json.Unmarshal(s, &stream) // anything but true is a complete answer
	}
	return &openAIRequest{fields: fields, msgs: msgs, developer: developer, parts: parts, stream: stream, cacheKey: o.cacheKey}, nil
}

// asText makes the content of msgs that is text parts only ([{"type": "text", "text": ...}],
// as Qwen Code sends its tool results) the text itself, which the engine offloads, estimates
// and summarizes as text, and returns the parts by the message they became (partsKey), so
// that rewrite sends a message the view keeps with its parts again. Parts of any other type,
// or with other fields (cache_control), stay parts.
func asText(msgs []compaction.Message) map[string]json.RawMessage {
	var parts map[string]json.RawMessage
	for i := range msgs {
		m := &msgs[i]
		text, ok := textParts(m.ContentParts)
		if !ok {
			continue
		}
		if parts == nil {
			parts = map[string]json.RawMessage{}
		}
		raw := m.ContentParts
		m.ContentParts, m.Content = nil, text
		parts[partsKey(m)] = raw
	}
	return parts
}

// withParts returns view with the messages asText made text given their parts back; view
// itself when there are none.
func withParts(view []compaction.Message, parts map[string]json.RawMessage) []compaction.Message {
	if len(parts) == 0 {
		return view
	}
	var out []compaction.Message
	for i := range view {
		raw, ok := parts[partsKey(&view[i])]
		if !ok || view[i].ContentParts != nil {
			continue
		}
		if out == nil {
			out = slices.Clone(view)
		}
		out[i].ContentParts, out[i].Content = raw, ""
	}
	if out == nil {
		return view
	}
	return out
}

// partsKey is what asText knows a message by: its role, the call it answers and its text.
func partsKey(m *compaction.Message) string {
	return string(m.Role) + "\x00" + m.ToolCallID + "\x00" + m.Content
}

// textParts returns the text of content parts that are all {"type": "text", "text": ...},
// joined, and whether they are.
func textParts(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	var list []map[string]json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return "", false
	}
	var b strings.Builder
	for _, p := range list {
		var typ, text string
		if len(p) != 2 || json.Unmarshal(p["type"], &typ) != nil || typ != "text" || json.Unmarshal(p["text"], &text) != nil {
			return "", false
		}
		b.WriteString(text)
	}
	return b.String(), true
}

// roleDeveloper is the role OpenAI's reasoning models (o1 and later, gpt-5) take system
// instructions in; the Vercel AI SDK sends it for them, and OpenAI's own docs recommend it.
// The engine knows it as a system message.
const roleDeveloper compaction.Role = "developer"

// asSystem makes msgs' developer messages system messages, and returns what they hold
// (messageKey), so that rewrite sends them back as developer messages.
func asSystem(msgs []compaction.Message) map[string]bool {
	var developer map[string]bool
	for i := range msgs {
		if msgs[i].Role != roleDeveloper {
			continue
		}
		if developer == nil {
			developer = map[string]bool{}
		}
		msgs[i].Role = compaction.RoleSystem
		developer[messageKey(&msgs[i])] = true
	}
	return developer
}

// asDeveloper returns view with the system messages that were developer messages in the
// request (the view keeps system messages verbatim) made developer messages again. view
// itself is returned when there are none.
func asDeveloper(view []compaction.Message, developer map[string]bool) []compaction.Message {
	if len(developer) == 0 {
		return view
	}
	var out []compaction.Message
	for i := range view {
		if view[i].Role != compaction.RoleSystem || !developer[messageKey(&view[i])] {
			continue
		}
		if out == nil {
			out = slices.Clone(view)
		}
		out[i].Role = roleDeveloper
	}
	if out == nil {
		return view
	}
	return out
}

// messageKey is what a message holds: its text or its parts. A system and a developer
// message that hold the same are the same instruction to the model.
func messageKey(m *compaction.Message) string {
	if m.ContentParts != nil {
		return "parts\x00" + string(m.ContentParts)
	}
	return "text\x00" + m.Content
}

func (openAIProtocol) usageReader(req request) usageReader {
	if req.(*openAIRequest).stream {
		return &sseUsage{read: readOpenAIUsage}
	}
	return &jsonUsage{read: readOpenAIUsage}
}

type openAIRequest struct {
	fields    map[string]json.RawMessage
	msgs      []compaction.Message
	developer map[string]bool            // the messages that were developer messages (asSystem)
	parts     map[string]json.RawMessage // the messages that were text parts (asText)
	stream    bool
	cacheKey  bool
}

func (r *openAIRequest) history() []compaction.Message { return r.msgs }
func (r *openAIRequest) conversation() string          { return conversationOf(r.msgs) }

func (r *openAIRequest) asSent() bool {
	_, set := r.fields["prompt_cache_key"]
	return !r.cacheKey || set
}

func (r *openAIRequest) rewrite(view []compaction.Message) ([]byte, error) {
	msgs, err := encodeMessages(withParts(asDeveloper(view, r.developer), r.parts))
	if err != nil {
		return nil, fmt.Errorf("encode view: %w", err)
	}
	fields := make(map[string]json.RawMessage, len(r.fields)+1)
	for k, v := range r.fields {
		fields[k] = v
	}
	fields["messages"] = msgs
	if _, set := fields["prompt_cache_key"]; r.cacheKey && !set {
		// The view's prefix is stable between compactions; one key per conversation keeps
		// its requests on the same cache.
		key, _ := json.Marshal("compaction-" + r.conversation())
		fields["prompt_cache_key"] = key
	}
	return rawjson.Object(fields), nil
}

// encodeMessages is the JSON array of msgs. Each message's own encoding is valid, compact
// JSON: joined as it is, not validated and compacted again as json.Marshal of the slice
// would (most of the cost of a large history).
func encodeMessages(msgs []compaction.Message) (json.RawMessage, error) {
	out := make([]byte, 0, 2+compaction.EstimateTokens(msgs)*5)
	out = append(out, '[')
	for i := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		m, err := msgs[i].MarshalJSON()
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	return append(out, ']'), nil
}

// conversationOf names the conversation msgs belong to: a hash of its opening, the leading
// system messages and the first user message, which every later request of the conversation
// repeats and another conversation (a sub-agent, a parallel worker) does not.
func conversationOf(msgs []compaction.Message) string {
	h := sha256.New()
	for i := range msgs {
		m := &msgs[i]
		part, _ := json.Marshal([]any{m.Role, m.Content, m.ContentParts})
		h.Write(part)
		if m.Role != compaction.RoleSystem {
			break
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
