package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/errgroup"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// ToolResults is what a Compactor can do besides compacting: offload a tool result at
// source (the spec's OffloadHook) and read an offloaded result back. APICompactor does both;
// with a Compactor that does not, the proxy offloads nothing on entry and serves no
// read-back route.
type ToolResults interface {
	// HookThreshold is the size, in bytes, above which OffloadToolResult offloads a
	// result; 0 while it is not known.
	HookThreshold() int
	// OffloadToolResult returns the message to put in the conversation's history instead of
	// m: its placeholder, or m when it is kept.
	OffloadToolResult(ctx context.Context, conversation string, m compaction.Message) (compaction.Message, error)
	// GetToolResult returns an offloaded result of the conversation. An error for a result
	// that does not exist wraps ErrToolResultNotFound.
	GetToolResult(ctx context.Context, conversation, toolCallID string) ([]byte, error)
}

// ErrToolResultNotFound is what GetToolResult wraps for a tool call ID with no stored result.
var ErrToolResultNotFound = errors.New("no offloaded result for this tool call")

// minHookThreshold is the hook threshold assumed while the API has not said its own: the
// smallest a policy allows (offload.hookThresholdChars has a minimum of 256), so no result
// the hook would offload is kept from it, and nothing at or under it costs a round trip.
const minHookThreshold = 256

// hookConcurrency bounds the hook calls one request makes at once.
const hookConcurrency = 4

// hookEntry is what the hook made of one tool result: the placeholder, or "" when it kept the
// result. bytes and crc are the result's size and CRC32C, so a different result under the
// same ID (of the same length, too) is new.
type hookEntry struct {
	bytes       int
	crc         uint32
	placeholder string
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entryOf is the hook entry of content, with placeholder.
func entryOf(content, placeholder string) hookEntry {
	return hookEntry{bytes: len(content), crc: crc32.Checksum([]byte(content), castagnoli), placeholder: placeholder}
}

// of reports whether e is the entry of content.
func (e hookEntry) of(content string) bool {
	return e.bytes == len(content) && e.crc == crc32.Checksum([]byte(content), castagnoli)
}

// hookBook remembers, per conversation, the tool results the hook has seen, so each is sent
// to it once (idempotent per tool_call_id) and shown the same way in every later request.
type hookBook struct {
	mu sync.Mutex
	by *lru.Cache[string, map[string]hookEntry]
}

func newHookBook() *hookBook {
	c, _ := lru.New[string, map[string]hookEntry](maxConversations) // errors only for a size below 1
	return &hookBook{by: c}
}

// snapshot returns a copy of conv's entries.
func (b *hookBook) snapshot(conv string) map[string]hookEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, _ := b.by.Get(conv)
	out := make(map[string]hookEntry, len(cur))
	for k, v := range cur {
		out[k] = v
	}
	return out
}

// update adds entries to conv's and drops those whose ID is not in keep: the book only has to
// know the results still in the agent's history.
func (b *hookBook) update(conv string, add map[string]hookEntry, keep map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, _ := b.by.Get(conv)
	next := make(map[string]hookEntry, len(cur)+len(add))
	for k, v := range cur {
		if keep[k] {
			next[k] = v
		}
	}
	for k, v := range add {
		next[k] = v
	}
	if len(next) == 0 {
		b.by.Remove(conv)
		return
	}
	b.by.Add(conv, next)
}

// offloadNew runs the OffloadHook on the tool results of history new to the proxy in conv
// (not seen by their tool_call_id in an earlier request), and puts the placeholders of those
// it offloaded, now or earlier, in place of the results. Results at or under the hook
// threshold, placeholders and results read back are never sent to the hook. A failed hook
// call keeps the result (fail-open) and is tried again on the next request. It returns
// history itself, and false, when nothing is replaced.
func (p *Proxy) offloadNew(ctx context.Context, conv string, history []compaction.Message) ([]compaction.Message, bool) {
	tr, ok := p.cfg.Compactor.(ToolResults)
	if !ok || p.cfg.DisableOffloadHook {
		return history, false
	}
	threshold := tr.HookThreshold()
	if threshold <= 0 {
		threshold = minHookThreshold
	}
	known := p.hooks.snapshot(conv)
	var out []compaction.Message
	replace := func(i int, content string) {
		if out == nil {
			out = make([]compaction.Message, len(history))
			copy(out, history)
		}
		out[i] = history[i].Clone()
		out[i].Content = content
	}
	keep := map[string]bool{}
	var todo []int
	for i := range history {
		m := &history[i]
		if m.Role != compaction.RoleTool || m.ToolCallID == "" || m.ContentParts != nil {
			continue
		}
		if e, ok := known[m.ToolCallID]; ok && e.of(m.Content) {
			keep[m.ToolCallID] = true
			if e.placeholder != "" {
				replace(i, e.placeholder)
			}
			continue
		}
		if len(m.Content) <= threshold || strings.HasPrefix(m.Content, compaction.PlaceholderPrefix) || compaction.IsReadBack(m.Content) {
			continue
		}
		todo = append(todo, i)
	}
	if len(todo) == 0 {
		if len(keep) != len(known) {
			p.hooks.update(conv, nil, keep)
		}
		if out == nil {
			return history, false
		}
		return out, true
	}
	type result struct {
		msg compaction.Message
		err error
	}
	results := make([]result, len(todo))
	var g errgroup.Group
	g.SetLimit(hookConcurrency)
	for k, i := range todo {
		g.Go(func() error {
			results[k].msg, results[k].err = tr.OffloadToolResult(ctx, conv, history[i])
			return nil // each result's error is its own: one failing stops no other
		})
	}
	_ = g.Wait()
	add := map[string]hookEntry{}
	for k, i := range todo {
		m, r := &history[i], results[k]
		var ae *compactclient.APIError
		switch {
		case errors.As(r.err, &ae) && ae.Reason == compactclient.ReasonToolResultExists:
			// Another result is stored under the ID: this one stays in the history, for good.
			add[m.ToolCallID] = entryOf(m.Content, "")
			p.cfg.Metrics.hook("kept")
		case r.err != nil:
			p.cfg.Metrics.hook("failed_open")
			p.cfg.Log.V(1).Info("offload hook failed; the tool result stays in the request", "toolCallID", m.ToolCallID, "error", r.err.Error())
			continue
		case r.msg.Content != m.Content && strings.HasPrefix(r.msg.Content, compaction.PlaceholderPrefix):
			add[m.ToolCallID] = entryOf(m.Content, r.msg.Content)
			replace(i, r.msg.Content)
			p.cfg.Metrics.hook("offloaded")
		default:
			add[m.ToolCallID] = entryOf(m.Content, "")
			p.cfg.Metrics.hook("kept")
		}
		keep[m.ToolCallID] = true
	}
	p.hooks.update(conv, add, keep)
	if out == nil {
		return history, false
	}
	return out, true
}

// ReadBackPath is the path, on the proxy's listener, under which it serves offloaded tool
// results: GET ReadBackPath + {tool_call_id} + "?conversation=" + {conversation}.
const ReadBackPath = "/compaction/v1/toolresults/"

// readBackCommand is the last line of a placeholder the proxy forwards, in place of
// compaction.PlaceholderReadBack: a command that reads the result back.
func readBackCommand(base, conv, toolCallID string) string {
	return fmt.Sprintf("[the full result is stored: read it back with: curl -s '%s%s%s?conversation=%s']",
		base, ReadBackPath, url.PathEscape(toolCallID), url.QueryEscape(conv))
}

// withReadBack returns view with the last line of every placeholder replaced by the command
// that reads its result back through the proxy. The rewrite depends only on the placeholder,
// the conversation and Config.ReadBackURL, so the same view gives the same bytes on every
// turn (a provider's prompt cache of it holds). view itself is returned when nothing changes.
func (p *Proxy) withReadBack(conv string, view []compaction.Message) []compaction.Message {
	if p.cfg.ReadBackURL == "" {
		return view
	}
	if _, ok := p.cfg.Compactor.(ToolResults); !ok {
		return view
	}
	var out []compaction.Message
	for i := range view {
		m := &view[i]
		if parts := p.imageReadBack(conv, m.ContentParts); parts != nil {
			if out == nil {
				out = make([]compaction.Message, len(view))
				copy(out, view)
			}
			out[i] = m.Clone()
			out[i].ContentParts = parts
			continue
		}
		if m.Role != compaction.RoleTool || !strings.HasPrefix(m.Content, compaction.PlaceholderPrefix) || !strings.HasSuffix(m.Content, compaction.PlaceholderReadBack) {
			continue
		}
		id := placeholderID(m.Content)
		if id == "" {
			id = m.ToolCallID
		}
		if compaction.ValidateToolCallID(id) != nil {
			continue
		}
		if out == nil {
			out = make([]compaction.Message, len(view))
			copy(out, view)
		}
		out[i] = m.Clone()
		out[i].Content = strings.TrimSuffix(m.Content, compaction.PlaceholderReadBack) + readBackCommand(p.cfg.ReadBackURL, conv, id)
	}
	if out == nil {
		return view
	}
	return out
}

// imageReadBack returns parts with the last line of every image placeholder in it replaced by
// the command that fetches the image through the proxy, or nil when there is none. The line
// and the command hold no character JSON escapes (the ID is hex, the conversation checked),
// so the rewrite is done on the JSON text.
func (p *Proxy) imageReadBack(conv string, parts json.RawMessage) json.RawMessage {
	if len(parts) == 0 || !bytes.Contains(parts, []byte(compaction.ImagePlaceholderPrefix)) || !validConversation(conv) {
		return nil
	}
	out := compaction.ImageReadBackLine.ReplaceAllFunc(parts, func(line []byte) []byte {
		id := compaction.ImageReadBackLine.FindSubmatch(line)[1]
		return []byte(imageReadBackCommand(p.cfg.ReadBackURL, conv, string(id)))
	})
	if bytes.Equal(out, parts) || !json.Valid(out) {
		return nil
	}
	return out
}

// imageReadBackCommand is the last line of an image placeholder the proxy forwards: a
// command that saves the image to a file named by its ID.
func imageReadBackCommand(base, conv, id string) string {
	return fmt.Sprintf("[the image is stored: save it with: curl -s -o %s '%s%s%s?conversation=%s']",
		id, base, ReadBackPath, id, url.QueryEscape(conv))
}

// placeholderID reads the tool call ID a placeholder names ("tool_call_id: ..." on its second
// line); "" when it names none.
func placeholderID(content string) string {
	rest, ok := strings.CutPrefix(content, compaction.PlaceholderPrefix+"\ntool_call_id: ")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "\n")
	return id
}

// maxConversationID is the longest conversation name the compaction API accepts.
const maxConversationID = 64

// validConversation reports whether c is a conversation name the compaction API accepts: 1
// to 64 letters, digits, '-', '_' and '.', not starting with '.'.
func validConversation(c string) bool {
	if c == "" || len(c) > maxConversationID || c[0] == '.' {
		return false
	}
	for i := 0; i < len(c); i++ {
		switch ch := c[i]; {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '-', ch == '_', ch == '.':
		default:
			return false
		}
	}
	return true
}

// readBack serves GET ReadBackPath{id}?conversation=...: the stored result, as text, after a
// first line starting with compaction.ReadBackPrefix, so the engine never offloads it again
// when the agent's tool puts it in the history.
func (p *Proxy) readBack(w http.ResponseWriter, r *http.Request) {
	tr, ok := p.cfg.Compactor.(ToolResults)
	if !ok {
		p.cfg.Metrics.readBack("not_found")
		http.Error(w, "compaction-proxy: no tool result store", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "compaction-proxy: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// The escaped path keeps an ID's '/' (sent as %2F) apart from the path's.
	id, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), ReadBackPath))
	if err == nil {
		err = compaction.ValidateToolCallID(id)
	}
	if err != nil {
		p.cfg.Metrics.readBack("bad_request")
		http.Error(w, "compaction-proxy: tool call ID: "+err.Error(), http.StatusBadRequest)
		return
	}
	conv := r.URL.Query().Get(compactclient.ConversationParam)
	if !validConversation(conv) {
		p.cfg.Metrics.readBack("bad_request")
		http.Error(w, "compaction-proxy: the conversation parameter must be 1 to 64 letters, digits, '-', '_' or '.'", http.StatusBadRequest)
		return
	}
	data, err := tr.GetToolResult(r.Context(), conv, id)
	if err != nil {
		var ae *compactclient.APIError
		switch {
		case errors.Is(err, ErrToolResultNotFound), errors.As(err, &ae) && ae.Code == http.StatusNotFound:
			p.cfg.Metrics.readBack("not_found")
			http.Error(w, fmt.Sprintf("compaction-proxy: no offloaded result for tool call %q in conversation %s", id, conv), http.StatusNotFound)
		case errors.As(err, &ae) && ae.Code == http.StatusBadRequest:
			p.cfg.Metrics.readBack("bad_request")
			http.Error(w, "compaction-proxy: "+err.Error(), http.StatusBadRequest)
		default:
			p.cfg.Metrics.readBack("failed")
			http.Error(w, "compaction-proxy: read back: "+err.Error(), http.StatusBadGateway)
		}
		return
	}
	if compaction.IsImageID(id) {
		// An offloaded image: its bytes, typed, as the compaction API returned them.
		ct := http.DetectContentType(data)
		if !strings.HasPrefix(ct, "image/") {
			ct = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		p.cfg.Metrics.readBack("ok")
		if r.Method != http.MethodHead {
			_, _ = w.Write(data)
		}
		return
	}
	head := fmt.Sprintf("%s tool_call_id: %s, %d bytes\n", compaction.ReadBackPrefix, id, len(data))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(data)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	p.cfg.Metrics.readBack("ok")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write([]byte(head))
	_, _ = w.Write(data)
}
