// Package responses converts an OpenAI Responses API request (POST /v1/responses, as Codex,
// the OpenAI Agents SDK and the openai SDKs send it) to the engine's message model and back,
// so that a Responses conversation can be compacted like a chat-completions one.
//
// The mapping:
//   - The top-level "instructions" string is a leading system message.
//   - A string "input" is one user message.
//   - Input messages (typed {"type":"message"} or role-only): system and developer messages
//     that lead the input are system messages; a later one is a pinned user message, written
//     back with its role; user messages are user messages; assistant messages are
//     assistant messages. Text-only content is the message's Content; content with an image
//     or a file is kept as ContentParts, so an input_image counts as an image.
//   - Consecutive assistant-side items of one turn (assistant messages, reasoning, tool calls,
//     hosted tool items such as web_search_call or mcp_call) are ONE assistant message: the
//     messages' text is its content, the calls (function_call, custom_tool_call,
//     local_shell_call, shell_call, apply_patch_call, computer_call, program, tool_search_call
//     and mcp_approval_request) its tool calls. Reasoning items and hosted tool items have no
//     place in the engine's model: like Anthropic's thinking blocks they stay in the
//     message's source and are written back with it, in their order.
//   - A call's output (function_call_output, custom_tool_call_output, ...,
//     mcp_approval_response) is a tool message answering the call's call_id.
//   - An item_reference to a reasoning or hosted tool item, or to a message after the first
//     user message (the Vercel AI SDK sends the model's earlier outputs so), is an
//     assistant-side item, kept like reasoning (see references).
//   - Items the engine cannot represent (a provider's opaque "compaction" item, any other
//     item_reference, additional_tools, unknown types, an output whose call is not in the
//     request): see opaque below.
//
// Opaque items. Such an item may stand for any amount of earlier context (a compaction item
// is the provider's own summary of it, an item_reference a stored item), so nothing may be
// summarized across it, and the engine could not write it anew. Every item up to and
// including the last opaque one (extended to the outputs of the calls it contains) is
// decoded as a leading system message whose source is its raw items: the engine keeps the
// leading system messages of a history verbatim in every view, so compaction only ever
// works on what follows, and Encode writes the prefix back byte for byte, in place.
//
// Encode goes back. A message of the compacted view that is one the request had (the
// messages a compaction keeps, found by fingerprint, from the end) is written as the request
// had it, byte for byte: its items with their ids, reasoning with its encrypted_content,
// images and any field this package does not know. Only what a compaction wrote is built
// anew: the summary (a user message), an offloaded output's placeholder (an output item of
// the type the call needs), an assistant message the compaction changed.
package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/internal/sources"
	"github.com/harness9/compaction-operator/internal/rawjson"
)

// ErrInvalidRequest is wrapped by every error DecodeRequest and Encode return for a request
// or a view they cannot convert.
var ErrInvalidRequest = errors.New("invalid OpenAI Responses request")

// ErrStateful is wrapped by DecodeRequest's error for a request that continues state the
// provider holds (previous_response_id or conversation): its input is only the newest part
// of the conversation, so there is nothing this package could compact. A request with
// "store": true but neither field carries its whole history and is decoded as any other.
var ErrStateful = errors.New("the Responses request continues server-side state")

// Request is a decoded Responses API request.
type Request struct {
	// Messages is the conversation in the engine's model: the instructions first (when the
	// request has them), then the input.
	Messages []compaction.Message

	// fields are the request's other top-level fields (model, tools, stream, store,
	// reasoning, include, prompt_cache_key, text, unknown ones), verbatim.
	fields map[string]json.RawMessage
	// sources maps an engine message's fingerprint to what it was decoded from, the latest
	// last (see match).
	sources sources.Index[*source]
	// calls are the request's tool calls by call id.
	calls map[string]*call
	// outputs are the request's output items by the call id they answer.
	outputs map[string]*output
	// outputTypes is, by call item type, the output item type the request answered such
	// calls with (Codex answers a local_shell_call with a function_call_output).
	outputTypes map[string]string
	// turns are the sources of the assistant turns by the call ids they make.
	turns map[string]*source
	// hasInput reports whether the request's "input" was a string or an array (rather than
	// absent or null), so Encode writes "input" back only then.
	hasInput bool
	// opening is, for a request with an opaque prefix, the conversation's opening as the
	// request has it (see Opening).
	opening []compaction.Message
	// held is how many input items the opaque prefix holds (0: none); holder says what its
	// last opaque item is.
	held   int
	holder string
}

// source is what an engine message was decoded from.
type source struct {
	// items are the input items, in order, for a message decoded from items.
	items []json.RawMessage
	// kinds says, for an assistant turn, what each of items is (see buildAssistant).
	kinds []itemKind
	// callIDs is, for an assistant turn, the call id of each call item (empty otherwise).
	callIDs []string
	// content is the engine Content the source was decoded to.
	content string
	// instructions is the request's "instructions" string, verbatim, for its system message.
	instructions json.RawMessage
	// input is the request's "input" string, verbatim, for its user message.
	input json.RawMessage
}

// call is one tool call item of the request.
type call struct {
	typ, name, args string
	raw             json.RawMessage
}

// output is one output item of the request.
type output struct {
	typ    string
	fields map[string]json.RawMessage
	raw    json.RawMessage
}

// itemKind is how an input item is mapped.
type itemKind int

const (
	kindSystem    itemKind = iota // a system or developer message
	kindUser                      // a user message
	kindAssistant                 // an assistant message
	kindAside                     // an assistant-side item with no place in the engine: reasoning, hosted tools
	kindCall                      // a tool call
	kindOutput                    // a tool call's output
	kindOpaque                    // an item the engine cannot represent
)

// assistantSide reports whether an item of kind k belongs to the assistant turn it is in.
func (k itemKind) assistantSide() bool {
	return k == kindAssistant || k == kindAside || k == kindCall
}

// Item types the code names outside the tables below.
const (
	typeItemReference        = "item_reference"
	typeFunctionCall         = "function_call"
	typeLocalShellCall       = "local_shell_call"
	typeLocalShellCallOutput = "local_shell_call_output"
)

// callTypes are the tool call item types: the engine tool call's name when the item has
// none, and the field its arguments are in (whole JSON values are taken verbatim).
var callTypes = map[string]struct{ name, args string }{
	typeFunctionCall:       {"", "arguments"},
	"custom_tool_call":     {"", "input"},
	"mcp_approval_request": {"", "arguments"},
	typeLocalShellCall:     {"local_shell", "action"},
	"shell_call":           {"shell", "action"},
	"apply_patch_call":     {"apply_patch", "operation"},
	"computer_call":        {"computer", "action"},
	"program":              {"program", "code"},
	"tool_search_call":     {"tool_search", "arguments"},
}

// outputTypes are the output item types, each with the call type it answers by default.
var outputTypes = map[string]string{
	"function_call_output":    typeFunctionCall,
	"custom_tool_call_output": "custom_tool_call",
	"mcp_approval_response":   "mcp_approval_request",
	typeLocalShellCallOutput:  typeLocalShellCall,
	"shell_call_output":       "shell_call",
	"apply_patch_call_output": "apply_patch_call",
	"computer_call_output":    "computer_call",
	"program_output":          "program",
	"tool_search_output":      "tool_search_call",
}

// defaultOutput is the output type answering each call type, for a request that answers
// no call of that type.
var defaultOutput = func() map[string]string {
	out := make(map[string]string, len(outputTypes))
	for o, c := range outputTypes {
		out[c] = o
	}
	return out
}()

// asideTypes are the assistant-side items that are neither a message nor a call the client
// answers: reasoning, and hosted tools whose output is part of the item (or of the model's
// next output).
var asideTypes = map[string]bool{
	"reasoning":             true,
	"web_search_call":       true,
	"file_search_call":      true,
	"image_generation_call": true,
	"code_interpreter_call": true,
	"mcp_call":              true,
	"mcp_list_tools":        true,
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// DecodeRequest decodes a Responses API request body. It returns an error wrapping
// ErrStateful for a request that continues server-side state, and one wrapping
// ErrInvalidRequest for a body it cannot decode.
func DecodeRequest(body []byte) (*Request, error) {
	fields, err := rawjson.DecodeBody(body)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if err := stateful(fields); err != nil {
		return nil, err
	}
	r := &Request{
		fields:      fields,
		sources:     sources.New[*source](),
		calls:       map[string]*call{},
		outputs:     map[string]*output{},
		outputTypes: map[string]string{},
		turns:       map[string]*source{},
	}
	if raw, ok := fields["instructions"]; ok && !rawjson.IsNull(raw) {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalid(`"instructions" is not a string`)
		}
		r.add(compaction.Message{Role: compaction.RoleSystem, Content: s}, &source{instructions: raw, content: s})
		delete(fields, "instructions")
	}
	raw, ok := fields["input"]
	if !ok || rawjson.IsNull(raw) {
		return r, nil
	}
	r.hasInput = true
	delete(fields, "input")
	var s string
	if json.Unmarshal(raw, &s) == nil {
		r.add(compaction.Message{Role: compaction.RoleUser, Content: s}, &source{input: raw, content: s})
		return r, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid(`"input" is neither a string nor an array of items`)
	}
	if err := r.decodeItems(items); err != nil {
		return nil, err
	}
	return r, nil
}

// stateful returns ErrStateful when the request continues a stored response or a
// conversation.
func stateful(fields map[string]json.RawMessage) error {
	for _, k := range []string{"previous_response_id", "conversation"} {
		v, ok := fields[k]
		if !ok || rawjson.IsNull(v) {
			continue
		}
		var s string
		if json.Unmarshal(v, &s) == nil && s == "" {
			continue
		}
		return fmt.Errorf("%w: %q is set", ErrStateful, k)
	}
	return nil
}

// item is one decoded input item.
type item struct {
	raw    json.RawMessage
	fields map[string]json.RawMessage
	typ    string
	role   string
	kind   itemKind
	callID string // the call a kindCall makes or a kindOutput answers
	ref    string // the id an item_reference names
}

// decodeItems decodes the input array.
func (r *Request) decodeItems(raws []json.RawMessage) error {
	items := make([]item, len(raws))
	for i, raw := range raws {
		if err := decodeItem(raw, &items[i]); err != nil {
			return invalid("input[%d]: %v", i, err)
		}
	}
	r.pair(items)
	references(items)
	end := prefixEnd(items)
	if end >= 0 {
		r.held = end + 1
		for i := end; i >= 0; i-- {
			if items[i].kind == kindOpaque {
				r.holder = items[i].describe()
				break
			}
		}
		r.opening = slices.Clone(r.Messages) // the instructions, when the request has them
	}
	leading := true // only system messages so far
	for i := 0; i < len(items); {
		it := &items[i]
		j := i + 1
		var m compaction.Message
		var src *source
		var err error
		switch it.kind {
		case kindSystem:
			m, src, err = decodeMessage(it)
			if !leading && i > end {
				// The engine keeps only the leading system messages as the system prompt;
				// a later system or developer message (Codex and the Agents SDK insert them
				// mid-conversation) is a user message marked pinned, so it is kept verbatim
				// in every view once a compaction covers it. Its source is its item, so
				// Encode writes it back with its own role.
				m.Role, m.Pinned = compaction.RoleUser, true
			}
		case kindUser:
			m, src, err = decodeMessage(it)
		case kindOutput:
			m, src, err = r.decodeOutput(it)
		case kindOpaque:
			m = compaction.Message{Role: compaction.RoleSystem, Content: string(it.raw)}
			src = &source{items: []json.RawMessage{it.raw}, content: m.Content}
		default: // assistant side: the whole turn
			inPrefix := i <= end
			for j < len(items) && items[j].kind.assistantSide() && (j <= end) == inPrefix {
				j++
			}
			m, src, err = r.decodeTurn(items[i:j])
		}
		if err != nil {
			return invalid("input[%d]: %v", i, err)
		}
		if end >= 0 && (len(r.opening) == 0 || r.opening[len(r.opening)-1].Role == compaction.RoleSystem) {
			r.opening = append(r.opening, m)
		}
		if i <= end {
			toSystem(&m)
		}
		leading = leading && m.Role == compaction.RoleSystem
		r.add(m, src)
		i = j
	}
	return nil
}

// toSystem makes m, a message of the opaque prefix, a system message. Its tool calls and
// the call it answers go: the prefix is kept whole, so no pair inside it can break. The
// calls' names and arguments stay in the content, for the estimate.
func toSystem(m *compaction.Message) {
	var b strings.Builder
	b.WriteString(m.Content)
	for _, tc := range m.ToolCalls {
		b.WriteString("\n" + tc.Function.Name + " " + tc.Function.Arguments)
	}
	m.Role, m.Content, m.ToolCalls, m.ToolCallID, m.Pinned = compaction.RoleSystem, b.String(), nil, "", false
}

// decodeItem reads one input item's type, role and kind.
func decodeItem(raw json.RawMessage, it *item) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("not an item object")
	}
	if err := json.Unmarshal(raw, &it.fields); err != nil {
		return fmt.Errorf("not an item object: %v", err)
	}
	it.raw = raw
	if err := stringField(it.fields, "type", &it.typ); err != nil {
		return err
	}
	_, hasRole := it.fields["role"]
	switch {
	case it.typ == "message" || it.typ == "" && hasRole:
		if err := stringField(it.fields, "role", &it.role); err != nil {
			return err
		}
		switch it.role {
		case "system", "developer":
			it.kind = kindSystem
		case "user":
			it.kind = kindUser
		case "assistant":
			it.kind = kindAssistant
		default:
			return fmt.Errorf("a message with role %q (want user, assistant, system or developer)", it.role)
		}
		if _, ok := it.fields["content"]; !ok {
			return fmt.Errorf(`a message without "content"`)
		}
	case it.typ == "" || it.typ == typeItemReference:
		if _, ok := it.fields["id"]; !ok && it.typ == "" {
			return fmt.Errorf(`an item without "type", "role" or "id"`)
		}
		it.kind = kindOpaque                      // an item reference, until references places it
		_ = stringField(it.fields, "id", &it.ref) // an id that is no string stays opaque
	case asideTypes[it.typ]:
		it.kind = kindAside
	default:
		it.kind = kindOpaque
		if _, ok := callTypes[it.typ]; ok {
			it.kind = kindCall
		} else if _, ok := outputTypes[it.typ]; ok {
			it.kind = kindOutput
		}
	}
	switch it.kind {
	case kindCall:
		key := "call_id"
		if it.typ == "mcp_approval_request" {
			key = "id" // answered by an mcp_approval_response's approval_request_id
		}
		if err := stringField(it.fields, key, &it.callID); err != nil {
			return err
		}
		if it.callID == "" && it.typ == typeLocalShellCall {
			_ = stringField(it.fields, "id", &it.callID) // the chat-completions form
		}
	case kindOutput:
		key := "call_id"
		if it.typ == "mcp_approval_response" {
			key = "approval_request_id"
		}
		if err := stringField(it.fields, key, &it.callID); err != nil {
			return err
		}
		if it.callID == "" && it.typ == typeLocalShellCallOutput {
			// The API documents this item's "id" as the id of the call it answers.
			_ = stringField(it.fields, "id", &it.callID)
		}
	}
	return nil
}

// describe names an opaque item for a person: its type, and the id it has or names or the
// call it answers, cut short.
func (it *item) describe() string {
	typ := it.typ
	if typ == "" {
		typ = typeItemReference
	}
	var id string
	_ = stringField(it.fields, "id", &id)
	switch {
	case it.kind == kindOpaque && it.callID != "":
		return fmt.Sprintf("%.40q answering call %.64q", typ, it.callID)
	case id != "":
		return fmt.Sprintf("%.40q %.64q", typ, id)
	}
	return fmt.Sprintf("%.40q", typ)
}

// stringField reads an optional string field (absent or null is "").
func stringField(fields map[string]json.RawMessage, key string, dst *string) error {
	v, ok := fields[key]
	if !ok || rawjson.IsNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return fmt.Errorf("%q is not a string", key)
	}
	return nil
}

// pair settles which calls and outputs the engine sees as pairs. A call whose id the engine
// would refuse (empty, malformed, repeated) is an aside item: kept with its turn, not a tool
// call. An output that answers no earlier call of the request, or a call already answered,
// is opaque: its call is elsewhere (an item_reference, stored state) and the engine must
// not see it as an orphan.
func (r *Request) pair(items []item) {
	called := map[string]bool{} // call id -> answered
	for i := range items {
		it := &items[i]
		switch it.kind {
		case kindCall:
			if _, dup := called[it.callID]; dup || compaction.ValidateToolCallID(it.callID) != nil {
				it.kind, it.callID = kindAside, ""
				continue
			}
			called[it.callID] = false
		case kindOutput:
			if answered, ok := called[it.callID]; !ok || answered {
				it.kind = kindOpaque
				continue
			}
			called[it.callID] = true
		}
	}
}

// asideRefs are the prefixes of OpenAI's ids of the items that are assistant-side items by
// reference: reasoning, and the hosted tools whose output is part of the item (web search,
// file search, code interpreter, image generation).
var asideRefs = []string{"rs_", "ws_", "fs_", "ci_", "ig_"}

// references settles what the item references of a request stand for. The Vercel AI SDK,
// with "store" not false (its default), sends the reasoning, the hosted tool calls and the
// text of the model's earlier outputs as references to them, by id. A reference to a
// reasoning or hosted tool item (asideRefs) is such an item of the turn it is in, and one to
// a message ("msg_") after the first user message is an assistant turn's text (the SDK
// refers to no other message). The engine reads none of them, as it reads no reasoning: they
// stay in the turn's source, are written back with it, and go with it when a summary covers
// the turn (without the text it cannot see). A client that refers to its own earlier input
// messages by id after the task would have them summarized as assistant text; none is known
// to. Any other reference may stand for anything, the task, an MCP call or a call answered
// later, and stays opaque.
func references(items []item) {
	user := false // a user message came before
	for i := range items {
		it := &items[i]
		if it.kind == kindUser {
			user = true
		}
		if it.kind != kindOpaque || it.ref == "" {
			continue
		}
		aside := slices.ContainsFunc(asideRefs, func(p string) bool { return strings.HasPrefix(it.ref, p) })
		if aside || strings.HasPrefix(it.ref, "msg_") && user {
			it.kind = kindAside
		}
	}
}

// prefixEnd is the index of the last item of the opaque prefix (see the package comment),
// or -1 when the input has no opaque item.
func prefixEnd(items []item) int {
	end := -1
	for i := range items {
		if items[i].kind == kindOpaque {
			end = i
		}
	}
	if end < 0 {
		return end
	}
	// Take in the outputs of the prefix's calls; outputs follow their calls, so one pass
	// reaches the outputs of calls an extension took in.
	callAt := map[string]int{}
	for i := range items {
		switch it := &items[i]; it.kind {
		case kindCall:
			callAt[it.callID] = i
		case kindOutput:
			if c, ok := callAt[it.callID]; ok && c <= end && i > end {
				end = i
			}
		}
	}
	return end
}

// part is the part of a content part this package reads.
type part struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// textParts are the content part types whose text is the content.
var textParts = map[string]bool{"input_text": true, "output_text": true, "text": true, "refusal": true}

// content decodes a message's or an output's content: a string, or parts. Text-only parts
// are their texts joined by sep; parts with anything else (an image, a file) are kept whole.
func content(raw json.RawMessage, sep string) (text string, parts json.RawMessage, err error) {
	if len(raw) == 0 || rawjson.IsNull(raw) {
		return "", nil, nil
	}
	if json.Unmarshal(raw, &text) == nil {
		return text, nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", nil, fmt.Errorf("content is neither a string nor an array of parts")
	}
	texts := make([]string, 0, len(list))
	onlyText := true
	for i, p := range list {
		if t := bytes.TrimSpace(p); len(t) == 0 || t[0] != '{' {
			return "", nil, fmt.Errorf("content[%d] is not a part object", i)
		}
		var pt part
		if err := json.Unmarshal(p, &pt); err != nil {
			return "", nil, fmt.Errorf("content[%d]: %v", i, err)
		}
		switch {
		case pt.Type == "refusal":
			texts = append(texts, pt.Refusal)
		case textParts[pt.Type]:
			texts = append(texts, pt.Text)
		default:
			onlyText = false
		}
	}
	if !onlyText || len(list) == 0 {
		return "", partsOf(raw), nil
	}
	return strings.Join(texts, sep), nil, nil
}

// partsOf is raw as a message's ContentParts, decoded by the engine's own decoder so the
// estimate's cost of the parts is worked out once.
func partsOf(raw json.RawMessage) json.RawMessage {
	var m compaction.Message
	if json.Unmarshal(append(append([]byte(`{"content":`), raw...), '}'), &m) != nil || m.ContentParts == nil {
		return raw
	}
	return m.ContentParts
}

// decodeMessage decodes a user, system or developer message item.
func decodeMessage(it *item) (compaction.Message, *source, error) {
	text, parts, err := content(it.fields["content"], "\n")
	if err != nil {
		return compaction.Message{}, nil, err
	}
	role := compaction.RoleUser
	if it.kind == kindSystem {
		role = compaction.RoleSystem
	}
	return compaction.Message{Role: role, Content: text, ContentParts: parts},
		&source{items: []json.RawMessage{it.raw}, content: text}, nil
}

// decodeTurn decodes the items of one assistant turn to one assistant message.
func (r *Request) decodeTurn(items []item) (compaction.Message, *source, error) {
	m := compaction.Message{Role: compaction.RoleAssistant}
	src := &source{items: make([]json.RawMessage, len(items)), kinds: make([]itemKind, len(items)), callIDs: make([]string, len(items))}
	var texts []string
	for i := range items {
		it := &items[i]
		src.items[i], src.kinds[i], src.callIDs[i] = it.raw, it.kind, it.callID
		switch it.kind {
		case kindAssistant:
			text, parts, err := content(it.fields["content"], "\n")
			if err != nil {
				return m, nil, err
			}
			if parts != nil {
				text = renderParts(parts)
			}
			texts = append(texts, text)
		case kindCall:
			c, err := decodeCall(it)
			if err != nil {
				return m, nil, err
			}
			r.calls[it.callID], r.turns[it.callID] = c, src
			m.ToolCalls = append(m.ToolCalls, compaction.ToolCall{ID: it.callID, Type: "function",
				Function: compaction.FunctionCall{Name: c.name, Arguments: c.args}})
		}
		// Reasoning and hosted tool items stay in the source only.
	}
	m.Content = strings.Join(texts, "\n\n")
	src.content = m.Content
	return m, src, nil
}

// renderParts is the text of an assistant message's parts that are not all text.
func renderParts(parts json.RawMessage) string {
	var list []json.RawMessage
	_ = json.Unmarshal(parts, &list) // content checked it
	texts := make([]string, 0, len(list))
	for _, p := range list {
		var pt part
		_ = json.Unmarshal(p, &pt)
		switch {
		case pt.Type == "refusal":
			texts = append(texts, pt.Refusal)
		case textParts[pt.Type]:
			texts = append(texts, pt.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// decodeCall reads a tool call item's name and arguments.
func decodeCall(it *item) (*call, error) {
	spec := callTypes[it.typ]
	c := &call{typ: it.typ, name: spec.name, raw: it.raw}
	if err := stringField(it.fields, "name", &c.name); err != nil {
		return nil, err
	}
	if c.name == "" {
		c.name = it.typ
	}
	if v, ok := it.fields[spec.args]; ok && !rawjson.IsNull(v) {
		if json.Unmarshal(v, &c.args) != nil {
			c.args = string(v) // an object (action, operation): its JSON
		}
	}
	return c, nil
}

// decodeOutput decodes an output item to a tool message.
func (r *Request) decodeOutput(it *item) (compaction.Message, *source, error) {
	m := compaction.Message{Role: compaction.RoleTool, ToolCallID: it.callID}
	var err error
	switch it.typ {
	case "shell_call_output":
		m.Content, err = shellOutput(it.fields["output"])
	case "computer_call_output":
		m.ContentParts = screenshot(it.fields["output"])
		if m.ContentParts == nil {
			m.Content = string(it.fields["output"])
		}
	case "program_output":
		err = stringField(it.fields, "result", &m.Content)
	case "mcp_approval_response":
		var v struct {
			Approve bool   `json:"approve"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal(it.raw, &v) != nil {
			return m, nil, fmt.Errorf("an mcp_approval_response with malformed fields")
		}
		m.Content = "approved"
		if !v.Approve {
			m.Content = "denied"
		}
		if v.Reason != "" {
			m.Content += ": " + v.Reason
		}
	case "tool_search_output":
		m.Content = string(it.fields["tools"])
	default:
		m.Content, m.ContentParts, err = content(it.fields["output"], "\n")
	}
	if err != nil {
		return m, nil, fmt.Errorf("%s: %w", it.typ, err)
	}
	r.outputs[it.callID] = &output{typ: it.typ, fields: it.fields, raw: it.raw}
	if c := r.calls[it.callID]; c != nil {
		r.outputTypes[c.typ] = it.typ
	}
	return m, &source{items: []json.RawMessage{it.raw}, content: m.Content}, nil
}

// shellOutput is a shell_call_output's stdout and stderr, chunk after chunk.
func shellOutput(raw json.RawMessage) (string, error) {
	var s string
	if len(raw) == 0 || rawjson.IsNull(raw) {
		return "", nil
	}
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var chunks []struct {
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
	}
	if err := json.Unmarshal(raw, &chunks); err != nil {
		return "", fmt.Errorf("a shell_call_output whose output is not an array of output chunks")
	}
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString(c.Stdout)
		if c.Stderr != "" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(c.Stderr)
		}
	}
	return b.String(), nil
}

// screenshot is a computer_call_output's screenshot as an input_image part, so the estimate
// counts it as an image rather than as the bytes of its data URL. Encode writes the item
// itself, never these parts.
func screenshot(raw json.RawMessage) json.RawMessage {
	var shot map[string]json.RawMessage
	if json.Unmarshal(raw, &shot) != nil || shot == nil {
		return nil
	}
	shot["type"] = rawjson.MustMarshal("input_image")
	return partsOf(rawjson.JoinArray([]json.RawMessage{rawjson.Object(shot)}))
}

func (r *Request) add(m compaction.Message, src *source) {
	r.Messages = append(r.Messages, m)
	r.sources.Add(&m, src)
}

// Opening is the conversation's opening as the request has it: the leading system messages
// and the first message after them, as decoded before an opaque prefix made them system
// messages (the prefix changes from one request to the next; the opening does not). The
// proxy names a conversation by it. The slice is the request's: callers must not change it.
func (r *Request) Opening() []compaction.Message {
	if r.opening == nil {
		return r.Messages
	}
	return r.opening
}

// Held reports how many input items the request's opaque prefix holds (0 when it has none)
// and what holds them: the type and id of its last item the engine cannot represent.
// Compaction never summarizes them.
func (r *Request) Held() (items int, holder string) {
	return r.held, r.holder
}

// Stream reports whether the request asks for a streamed answer ("stream": true).
func (r *Request) Stream() bool {
	return string(bytes.TrimSpace(r.fields["stream"])) == "true"
}
