package proxy

import (
	"bytes"
	"encoding/json"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
)

// usageBook keeps the prompt tokens the upstream reported for each conversation's last
// request: the next compaction of the conversation calibrates its estimate with them.
type usageBook struct {
	mu sync.Mutex
	by *lru.Cache[string, int]
}

// maxConversations bounds the conversations whose usage the proxy remembers.
const maxConversations = 1024

func newUsageBook() *usageBook {
	c, _ := lru.New[string, int](maxConversations) // errors only for a size below 1
	return &usageBook{by: c}
}

func (b *usageBook) prompt(conv string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, _ := b.by.Get(conv)
	return n
}

func (b *usageBook) set(conv string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.by.Add(conv, n)
}

// usageReader reads an answer's body as it streams to the agent. Write never fails, so the
// agent's copy is never cut short by it.
type usageReader interface {
	Write(p []byte) (int, error)
	// promptTokens is the prompt size the answer reported, cached tokens included.
	promptTokens() (int, bool)
}

// maxUsageBody bounds what is kept of a non-streamed answer to read its usage from.
const maxUsageBody = 8 << 20

// jsonUsage reads the usage of a complete JSON answer with read.
type jsonUsage struct {
	buf  bytes.Buffer
	over bool
	read func(body []byte) (int, bool)
}

func (u *jsonUsage) Write(p []byte) (int, error) {
	if !u.over {
		if u.buf.Len()+len(p) > maxUsageBody {
			u.over = true
			u.buf.Reset()
		} else {
			u.buf.Write(p)
		}
	}
	return len(p), nil
}

func (u *jsonUsage) promptTokens() (int, bool) {
	if u.over {
		return 0, false
	}
	return u.read(u.buf.Bytes())
}

// maxEventLine bounds one line of a stream kept to read usage from.
const maxEventLine = 1 << 20

// sseUsage reads usage from the "data:" lines of a server-sent event stream with read,
// which sees each event's data and returns the prompt tokens when it reports them.
type sseUsage struct {
	line   []byte
	over   bool // the current line is longer than maxEventLine: skipped
	tokens int
	seen   bool
	read   func(data []byte) (int, bool)
}

func (u *sseUsage) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			u.add(p)
			break
		}
		u.add(p[:i])
		u.endLine()
		p = p[i+1:]
	}
	return n, nil
}

func (u *sseUsage) add(p []byte) {
	if u.over || len(u.line)+len(p) > maxEventLine {
		u.over, u.line = true, u.line[:0]
		return
	}
	u.line = append(u.line, p...)
}

func (u *sseUsage) endLine() {
	line := bytes.TrimRight(u.line, "\r")
	if !u.over {
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if n, ok := u.read(bytes.TrimSpace(data)); ok {
				u.tokens, u.seen = n, true
			}
		}
	}
	u.line, u.over = u.line[:0], false
}

func (u *sseUsage) promptTokens() (int, bool) { return u.tokens, u.seen }

// openAIUsage is the usage object of an OpenAI chat completion (or of its last chunk).
type openAIUsage struct {
	Usage *struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

func readOpenAIUsage(data []byte) (int, bool) {
	var v openAIUsage
	if json.Unmarshal(data, &v) != nil || v.Usage == nil || v.Usage.PromptTokens <= 0 {
		return 0, false
	}
	return v.Usage.PromptTokens, true
}

// anthropicUsage is the usage of an Anthropic message: the prompt is the uncached input plus
// what was read from and written to the cache.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func (u *anthropicUsage) prompt() (int, bool) {
	n := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	return n, n > 0
}

// readAnthropicMessage reads a complete Messages answer.
func readAnthropicMessage(data []byte) (int, bool) {
	var v struct {
		Usage *anthropicUsage `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil || v.Usage == nil {
		return 0, false
	}
	return v.Usage.prompt()
}

// readAnthropicEvent reads the message_start event of a stream, which carries the input
// usage (message_delta events carry the output only).
func readAnthropicEvent(data []byte) (int, bool) {
	var v struct {
		Type    string `json:"type"`
		Message *struct {
			Usage *anthropicUsage `json:"usage"`
		} `json:"message"`
	}
	if json.Unmarshal(data, &v) != nil || v.Type != "message_start" || v.Message == nil || v.Message.Usage == nil {
		return 0, false
	}
	return v.Message.Usage.prompt()
}
