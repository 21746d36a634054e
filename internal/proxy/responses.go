package proxy

import (
	"errors"
	"net/http"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/responses"
)

// responsesProtocol is the OpenAI Responses API (POST /v1/responses), which Codex and the
// OpenAI Agents SDK speak, converted by compaction/responses. A request that continues
// history the provider holds (previous_response_id, conversation) is passed through: the
// proxy does not see what it would compact.
type responsesProtocol struct{}

func (responsesProtocol) name() string { return "responses" }

func (responsesProtocol) decode(_ *http.Request, body []byte) (request, error) {
	req, err := responses.DecodeRequest(body)
	if errors.Is(err, responses.ErrStateful) {
		return nil, &passThroughError{reason: ReasonStatefulRequest, err: err}
	}
	if err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, errors.New("no input")
	}
	return &responsesRequest{req: req}, nil
}

func (responsesProtocol) usageReader(req request) usageReader {
	if req.(*responsesRequest).req.Stream() {
		return &sseUsage{read: responses.PromptTokensFromEvent}
	}
	return &jsonUsage{read: responses.PromptTokens}
}

type responsesRequest struct {
	req *responses.Request
}

func (r *responsesRequest) history() []compaction.Message { return r.req.Messages }
func (r *responsesRequest) conversation() string          { return conversationOf(r.req.Opening()) }
func (r *responsesRequest) held() (int, string)           { return r.req.Held() }

func (*responsesRequest) asSent() bool { return true }

func (r *responsesRequest) rewrite(view []compaction.Message) ([]byte, error) {
	return r.req.Encode(view)
}
