package compactclient

import "github.com/harness9/compaction-operator/compaction"

// CompactRequest is the body of POST /v1/namespaces/{ns}/sessions/{name}/compact.
type CompactRequest struct {
	// Messages is the agent's history (OpenAI chat format), or, with Watermark (or Seen), its
	// leading system messages followed by the messages after the watermark (or after its
	// first Seen messages).
	Messages []compaction.Message `json:"messages"`
	// Force runs the manual /compact path: the Emergency tier (forced truncation, no LLM)
	// whatever the usage.
	Force bool `json:"force,omitempty"`
	// Usage is what the agent's LLM reported for its last call.
	Usage *Usage `json:"usage,omitempty"`
	// Watermark and PrefixHash, from the last response, make this a delta request.
	Watermark  int    `json:"watermark,omitempty"`
	PrefixHash string `json:"prefixHash,omitempty"`
	// OmitEcho lets the server leave out of its answer the messages at the end of the view
	// that are the last messages of this request (CompactResponse.Echoed): what a turn
	// that compacts nothing returns is mostly, or wholly, what it was sent.
	OmitEcho bool `json:"omitEcho,omitempty"`
	// Seen, with PrefixHash the last answer's SeenHash (and no Watermark), makes this a
	// seen delta: the history the last answer returned as it was is not sent again, only
	// what follows it. The answer's Messages (and Echoed) are then the view after the
	// history's first Seen messages, which the view starts with unchanged. A turn that
	// must compact, or a server that no longer knows the seen history, answers 409
	// StaleWatermark: send the full history.
	Seen int `json:"seen,omitempty"`
}

// Usage is the token usage an LLM reported.
type Usage struct {
	PromptTokens int `json:"promptTokens"`
}

// CompactResponse is the answer of a compaction.
type CompactResponse struct {
	// Messages is the view to send to the LLM; with Echoed, its beginning.
	Messages []compaction.Message `json:"messages"`
	// Echoed, only in the answer to a request with OmitEcho, is how many of the request's
	// last messages end the view: the view is Messages followed by them (Session.Compact
	// puts them back). 0: Messages is the whole view.
	Echoed int `json:"echoed,omitempty"`
	// Record describes the compaction (tier, tokens, anchors, offloads, errors).
	Record *compaction.CompactionRecord `json:"record"`
	// Watermark and PrefixHash are sent back for a delta request next turn.
	Watermark  int    `json:"watermark"`
	PrefixHash string `json:"prefixHash,omitempty"`
	// Seen and SeenHash, on a turn that compacted nothing before the first summary and
	// whose view is the history as it was, are sent back (as Seen and PrefixHash) for a seen
	// delta next turn: the first Seen messages of the history need not be sent again while
	// nothing is compacted. Only given by a server that keeps the conversation's engine.
	Seen     int    `json:"seen,omitempty"`
	SeenHash string `json:"seenHash,omitempty"`
	// Usage is the context usage of Messages, a fraction of the context window (0.42 is
	// 42%): the view's estimated tokens times the session's calibration, the ratio of the
	// real prompt sizes the agent reports (CompactRequest.Usage) to the estimates. It is
	// Record.UsageAfter. (Unlike CompactRequest.Usage, it is a number, not token counts.)
	Usage float64 `json:"usage"`
	// NextTier is the tier the view enters next as the conversation grows, and
	// TokensToNextTier how many more (calibrated) tokens it can take before that tier starts:
	// the headroom before the next compaction. NextTier is absent (TierNone) and
	// TokensToNextTier 0 when the view is in Emergency already. Both are from Record.
	NextTier         compaction.Tier `json:"nextTier,omitempty"`
	TokensToNextTier int             `json:"tokensToNextTier"`
	// HookThreshold is the size, in bytes, above which the session's toolresults route
	// (OffloadToolResult) offloads a tool result at source (the policy's
	// offload.hookThresholdChars): a client need not send it a result at or under it.
	// 0: the server did not say.
	HookThreshold int `json:"hookThreshold,omitempty"`
}

// OffloadRequest is the body of POST .../toolresults: a tool result before it enters the
// history.
type OffloadRequest struct {
	Message compaction.Message `json:"message"`
}

// OffloadResponse carries the message to put in the history: the placeholder when the
// result was offloaded, else the message unchanged.
type OffloadResponse struct {
	Message   compaction.Message       `json:"message"`
	Offloaded *compaction.OffloadEntry `json:"offloaded"`
	// HookThreshold is CompactResponse.HookThreshold.
	HookThreshold int `json:"hookThreshold,omitempty"`
}

// ErrorResponse is the JSON body of every error answer.
type ErrorResponse struct {
	// Code repeats the HTTP status.
	Code int `json:"code"`
	// Reason is a CamelCase word for programs, such as StaleWatermark or SessionNotReady.
	Reason string `json:"reason"`
	// Message says what is wrong, for people.
	Message string `json:"message"`
}

// DefaultTokenAudience is the audience the compaction API asks of a bearer token by
// default (the manager's api.tokenAudience): agents send a projected ServiceAccount token
// for it, never one for the Kubernetes API, so a token an agent hands to the compaction API
// cannot be replayed against the Kubernetes API, nor the other way round.
const DefaultTokenAudience = "compaction.harness9.io"

// Reasons in error responses.
const (
	ReasonUnauthorized    = "Unauthorized"
	ReasonForbidden       = "Forbidden"
	ReasonNotFound        = "NotFound"
	ReasonSessionNotReady = "SessionNotReady"
	ReasonBadRequest      = "BadRequest"
	ReasonInvalidMessages = "InvalidMessages"
	ReasonTooLarge        = "RequestTooLarge"
	ReasonStaleWatermark  = "StaleWatermark"
	ReasonStorage         = "StorageUnavailable"
	ReasonInternal        = "InternalError"
	ReasonTimeout         = "Timeout"
	// ReasonMediaType: a request body that is not application/json (415).
	ReasonMediaType = "UnsupportedMediaType"
	// ReasonAuthUnavailable: the Kubernetes API server could not check the token or the
	// permission (it is restarting, say); retry.
	ReasonAuthUnavailable = "AuthUnavailable"
	// ReasonTooManyRequests: the server is serving as many requests as its memory allows
	// (429); retry after the Retry-After header's seconds.
	ReasonTooManyRequests = "TooManyRequests"
	// ReasonToolResultExists: another result is already stored under this tool call ID in
	// the session (409); the stored one is kept. Keep the result in the history.
	ReasonToolResultExists = "ToolResultExists"
)

// PassThroughReason is why a proxy forwarded requests to the LLM uncompacted. The server
// accepts only these values (anything else is a 400); each is also the reason of the
// AgentSession's PassThrough condition (api/v1alpha1 PassThroughReason has the same values).
type PassThroughReason string

// The reasons of a PassThroughReport.
const (
	// PassThroughNotDecodable: the request is not one of its protocol the proxy can read.
	PassThroughNotDecodable PassThroughReason = "NotDecodable"
	// PassThroughStatefulRequest: the request continues a conversation the LLM provider keeps
	// (previous_response_id, a stored conversation): its history is not in the request.
	PassThroughStatefulRequest PassThroughReason = "StatefulRequest"
	// PassThroughTooLarge: the request is larger than the proxy or the compaction API takes.
	PassThroughTooLarge PassThroughReason = "TooLarge"
	// PassThroughUnsupportedRequest: an endpoint, method or feature the proxy does not compact.
	PassThroughUnsupportedRequest PassThroughReason = "UnsupportedRequest"
	// PassThroughCompactionFailed: the compaction API failed or refused, and the proxy failed
	// open.
	PassThroughCompactionFailed PassThroughReason = "CompactionFailed"
	// PassThroughWebSocket: a WebSocket (realtime) connection, not compacted.
	PassThroughWebSocket PassThroughReason = "WebSocket"
)

// PassThroughReasons are all the reasons the server accepts.
var PassThroughReasons = []PassThroughReason{
	PassThroughNotDecodable, PassThroughStatefulRequest, PassThroughTooLarge,
	PassThroughUnsupportedRequest, PassThroughCompactionFailed, PassThroughWebSocket,
}

// Valid reports whether the server accepts r.
func (r PassThroughReason) Valid() bool {
	for _, v := range PassThroughReasons {
		if r == v {
			return true
		}
	}
	return false
}

// Bounds of a PassThroughReport the server accepts; Client.ReportPassThrough fits Message and
// Count into them.
const (
	// MaxPassThroughMessageBytes bounds Message, in bytes of UTF-8.
	MaxPassThroughMessageBytes = 512
	// MaxPassThroughProtocolLength bounds Protocol.
	MaxPassThroughProtocolLength = 32
	// MaxPassThroughCount bounds Count (a report of more says this many).
	MaxPassThroughCount = 1_000_000
)

// PassThroughReport is the body of POST /v1/namespaces/{ns}/sessions/{name}/passthrough: a
// proxy forwarded Count requests of the session to the LLM uncompacted since its last report,
// the last of them for Reason. The server counts them in the AgentSession's
// status.passThrough and sets its PassThrough condition; it answers 204.
type PassThroughReport struct {
	// Conversation is the conversation of the session the requests were of (as
	// InConversation); empty for the default one.
	Conversation string `json:"conversation,omitempty"`
	// Protocol is the LLM API of the requests: a lower-case token of at most 32 letters,
	// digits, '.', '_' and '-', starting with a letter (openai, anthropic, responses, gemini).
	Protocol string `json:"protocol"`
	// Reason is why (one of PassThroughReasons).
	Reason PassThroughReason `json:"reason"`
	// Message says more, for people (the status shows it): printable UTF-8 of at most
	// MaxPassThroughMessageBytes bytes, on one line. Optional.
	Message string `json:"message,omitempty"`
	// Count is how many requests passed through since the last report, 1 to
	// MaxPassThroughCount.
	Count int `json:"count"`
}

// Bounds of the history routes (GET .../history and GET .../history/search).
const (
	// DefaultHistoryLimit and DefaultSearchLimit are how many messages an answer holds at
	// most when the request gives no limit; MaxHistoryLimit is the most a limit may ask.
	DefaultHistoryLimit = 100
	DefaultSearchLimit  = 20
	MaxHistoryLimit     = 1000
)

// HistoryRange selects archived messages by their index in the agent's raw history:
// From <= index < To. To 0 is no upper bound; Limit 0 is the server's default
// (DefaultHistoryLimit), at most MaxHistoryLimit.
type HistoryRange struct {
	From, To, Limit int
}

// HistorySearch finds archived messages by their text (content, the text of content parts,
// tool calls, tool call IDs): Text as a case-insensitive substring, or with Regex as a Go
// RE2 regular expression (case-insensitive too; "(?-i)" turns that off), at most
// compaction.MaxHistoryQueryBytes bytes. From, To and Limit are as in HistoryRange (the
// default limit is DefaultSearchLimit).
type HistorySearch struct {
	Text  string
	Regex bool
	From  int
	To    int
	Limit int
}

// HistoryMessage is one archived message: what a compaction summarized (or an Emergency
// truncation dropped), as the agent sent it; a tool result offloaded before that is its
// placeholder, whose full text GetToolResult reads back.
type HistoryMessage struct {
	// Index is the message's index in the agent's raw history (its system messages
	// counted).
	Index int             `json:"index"`
	Role  compaction.Role `json:"role"`
	// Archive is the range ("from-to") of the archive that keeps it.
	Archive string             `json:"archive"`
	Message compaction.Message `json:"message"`
}

// HistoryResponse is the answer of GET .../history and GET .../history/search: messages in
// index order, each index once.
type HistoryResponse struct {
	Messages []HistoryMessage `json:"messages"`
	// Next is where to go on (HistoryRange.From, HistorySearch.From): after the last message
	// the server read.
	Next int `json:"next"`
	// Truncated says a bound cut the answer short (the limit, the answer's size, or how much
	// of the archive one search reads): more may follow from Next.
	Truncated bool `json:"truncated"`
}

// ResetResponse is the answer of POST .../reset.
type ResetResponse struct {
	// Record is the Reset record appended to the trail (Reset true, WatermarkBefore the
	// forgotten watermark).
	Record *compaction.CompactionRecord `json:"record"`
	// RecordError says the record could not be appended; the state was reset all the same.
	RecordError string `json:"recordError,omitempty"`
}
