package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/anthropic"
)

// anthropicProtocol is Anthropic Messages (POST /v1/messages), converted to and from the
// engine's model by compaction/anthropic: blocks the engine has no place for are written
// back as the request had them.
//
// A token count (POST /v1/messages/count_tokens, count set) is compacted like a turn, so it
// counts the view the model would get: an agent that decides on its own compaction from it
// (Claude Code) sees the context the proxy keeps, not the raw history it holds.
type anthropicProtocol struct {
	count bool
}

func (anthropicProtocol) name() string { return "anthropic" }

func (anthropicProtocol) decode(_ *http.Request, body []byte) (request, error) {
	req, err := anthropic.DecodeRequest(body)
	if err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, fmt.Errorf("%w: no messages", anthropic.ErrInvalidRequest)
	}
	var top struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(body, &top) // DecodeRequest read it as an object already
	return &anthropicRequest{req: req, stream: top.Stream}, nil
}

func (a anthropicProtocol) usageReader(req request) usageReader {
	switch {
	case a.count:
		// A count's input_tokens is not a prompt the model was sent.
		return nil
	case req.(*anthropicRequest).stream:
		return &sseUsage{read: readAnthropicEvent}
	}
	return &jsonUsage{read: readAnthropicMessage}
}

type anthropicRequest struct {
	req    *anthropic.Request
	stream bool
}

func (r *anthropicRequest) history() []compaction.Message { return r.req.Messages }
func (r *anthropicRequest) conversation() string          { return conversationOf(r.req.Messages) }

func (*anthropicRequest) asSent() bool { return true }

func (r *anthropicRequest) rewrite(view []compaction.Message) ([]byte, error) {
	return r.req.Encode(view)
}
