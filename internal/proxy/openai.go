package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

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
	developer := asSystem(msgs)
	var stream bool
	if s, ok := fields["stream"]; ok {
		_ = json.Unmarshal(s, &stream) // anything but true is a complete answer
	}
	return &openAIRequest{fields: fields, msgs: msgs, developer: developer, stream: stream, cacheKey: o.cacheKey}, nil
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
	developer map[string]bool // the messages that were developer messages (asSystem)
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
	msgs, err := encodeMessages(asDeveloper(view, r.developer))
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
