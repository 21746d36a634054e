package proxy

import (
	"errors"
	"net/http"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/gemini"
)

// geminiProtocol is the Gemini API's generateContent, streamGenerateContent (server-sent
// events with ?alt=sse, a JSON array without) and countTokens, which Gemini CLI speaks,
// converted by compaction/gemini. A token count is compacted like a turn, as Anthropic's
// is (see anthropicProtocol).
type geminiProtocol struct {
	action string
	sse    bool
}

func (geminiProtocol) name() string { return "gemini" }

func (geminiProtocol) decode(_ *http.Request, body []byte) (request, error) {
	req, err := gemini.DecodeRequest(body)
	if err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, errors.New("no contents")
	}
	return &geminiRequest{req: req}, nil
}

func (g geminiProtocol) usageReader(request) usageReader {
	switch {
	case g.action == "countTokens":
		return nil
	case g.action == "streamGenerateContent" && g.sse:
		return &sseUsage{read: gemini.PromptTokensFromChunk}
	case g.action == "streamGenerateContent":
		return &jsonUsage{read: gemini.PromptTokensFromArray}
	}
	return &jsonUsage{read: gemini.PromptTokens}
}

type geminiRequest struct {
	req *gemini.Request
}

func (r *geminiRequest) history() []compaction.Message { return r.req.Messages }
func (r *geminiRequest) conversation() string          { return conversationOf(r.req.Messages) }

func (*geminiRequest) asSent() bool { return true }

func (r *geminiRequest) rewrite(view []compaction.Message) ([]byte, error) {
	return r.req.Encode(view)
}
