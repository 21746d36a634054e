package compaction

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// SummaryRequest is what a summarizer gets: the messages to fold into the summary, and the
// previous summary and anchors so the new summary is an incremental merge, not a restart.
type SummaryRequest struct {
	SessionID       string
	Tier            Tier
	Messages        []Message
	PreviousSummary string
	PreviousAnchors []Anchor
	// MaxSummaryChars is the size the prose summary should stay under.
	MaxSummaryChars int
}

// Summarizer turns messages into the documented anchors-plus-summary text, which the engine
// parses with ParseAnchorsAndSummary. Implementations must be safe for concurrent use.
type Summarizer interface {
	// Name identifies the summarizer in records and logs ("extractive", "openai").
	Name() string
	Summarize(ctx context.Context, req SummaryRequest) (string, error)
}

// SummaryUsage is the tokens one summarizer call used, as its server reported them.
type SummaryUsage struct {
	InputTokens  int
	OutputTokens int
}

// SummaryResult is one summarizer call's answer: Text in the documented format, or, when
// Text is empty, the anchors and prose as values (a summarizer that builds them, as the
// extractive one does, need not render text for the engine to parse back).
type SummaryResult struct {
	Text string
	// Anchors are the span's anchors, one per type in AnchorTypes order; Prose the summary.
	Anchors []Anchor
	Prose   string
	// Usage is the call's tokens as its server reported them; zero: the engine estimates them.
	Usage SummaryUsage
}

// ResultSummarizer is a Summarizer that answers a SummaryResult: with the tokens its server
// reported, or with anchors and prose as values. The engine prefers it to Summarize.
type ResultSummarizer interface {
	Summarizer
	SummarizeResult(ctx context.Context, req SummaryRequest) (SummaryResult, error)
}

// Summarize calls s, through SummarizeResult when s is a ResultSummarizer.
func Summarize(ctx context.Context, s Summarizer, req SummaryRequest) (SummaryResult, error) {
	if rs, ok := s.(ResultSummarizer); ok {
		return rs.SummarizeResult(ctx, req)
	}
	text, err := s.Summarize(ctx, req)
	return SummaryResult{Text: text}, err
}

// Parsed is r's anchors and prose: Text parsed (the error says what the parse filled in or
// kept aside, informational), or the values as they are.
func (r SummaryResult) Parsed() ([]Anchor, string, error) {
	if r.Text != "" || (r.Prose == "" && len(r.Anchors) == 0) {
		return ParseAnchorsAndSummary(r.Text)
	}
	return r.Anchors, r.Prose, nil
}

// size is the length of r's answer as text: what an LLM would have written for it.
func (r SummaryResult) size() int {
	if r.Text != "" || (r.Prose == "" && len(r.Anchors) == 0) {
		return len(r.Text)
	}
	return len(FormatSummary(r.Anchors, r.Prose))
}

// FormatSummary renders anchors and prose in the documented format: what
// ParseAnchorsAndSummary reads back to them.
func FormatSummary(anchors []Anchor, prose string) string {
	return "## Anchors\n" + formatAnchors(anchors) + "\n## Summary\n" + prose + "\n"
}

// SummaryInstructions is the system prompt for LLM summarizers. It asks for the format
// ParseAnchorsAndSummary reads (strictly: headers only at the start of a line, in these
// forms) and for the same content as the extractive summarizer, so mergeAnchors can merge
// either: each anchor a list of "- " items, the files as one "files edited: ...; created:
// ...; read: ..." item.
const SummaryInstructions = `You compact the context of a long-running AI agent. Summarize the conversation excerpt you are given so the agent can continue its task without it.

Reply in exactly this format, with nothing before or after it:

## Anchors
- user_intent:
  - <the task: its title and the requirements it states, in the user's words: expected behaviour, names of functions or APIs to implement, what must not change, output formats the agent must follow>
  - <each later instruction or constraint from the user, one per item>
- execution_progress:
  - files edited: <paths>; created: <paths>; read: <paths>
  - <each step done with its outcome: exit codes, test counts, results, e.g. "pytest tests/test_x.py -> 1 failed, 22 passed">
- key_decision:
  - <each technical choice with its reason, e.g. "use X instead of Y because ...">
- tried_solution:
  - <each approach that failed, with the exact error line it produced, e.g. "python repro.py -> ValueError: unbalanced bracket">
- next_step:
  - <the concrete next actions>

## Summary
<concise prose with everything else the agent needs: names, paths, commands, numbers>

Rules:
- Write the headers exactly as above, each at the start of its line; put every item on its own line, indented by two spaces and starting with "- ". Write "- key_decision: N/A" (for example) for an anchor with nothing to add.
- Quote error lines, file paths, commands, function and API names exactly. Keep each item to one line.
- Never start a line of your own text with "## " or an anchor name; indent quoted text and code by two spaces.
- If previous anchors are given, they are kept and merged with yours automatically: list only the items this excerpt adds or changes, and N/A where it adds nothing. Exception: next_step is always the complete current plan.
- The summary replaces the previous summary: merge the previous summary with the new excerpt, keep every fact that is still true, drop what is superseded.
- Offloaded tool results appear as placeholders with a tool_call_id: mention that ID where the result matters; the agent can read it back.`

// maxRenderedMessageChars bounds one message in a summarizer prompt, so a single huge
// message cannot blow the summarizer's own context.
const maxRenderedMessageChars = 4000

// BuildSummaryPrompt renders a request as the user message for an LLM summarizer, bounded
// to about maxChars bytes: the oldest and newest messages are kept, the middle is elided.
func BuildSummaryPrompt(req SummaryRequest, maxChars int) string {
	var b strings.Builder
	if req.PreviousSummary != "" || CountAvailable(req.PreviousAnchors) > 0 {
		b.WriteString("Previous anchors:\n")
		b.WriteString(formatAnchors(mergeAnchors(nil, req.PreviousAnchors)))
		b.WriteString("\nPrevious summary:\n")
		b.WriteString(req.PreviousSummary)
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "Conversation excerpt to merge (%d messages):\n\n", len(req.Messages))
	reminder := promptReminder(req)
	rendered := make([]string, len(req.Messages))
	total := b.Len() + len(reminder)
	for i := range req.Messages {
		rendered[i] = renderMessage(&req.Messages[i], maxRenderedMessageChars)
		total += len(rendered[i])
	}
	if maxChars <= 0 || total <= maxChars {
		for _, r := range rendered {
			b.WriteString(r)
		}
		b.WriteString(reminder)
		return b.String()
	}
	// Keep messages from both ends until the budget is used, eliding the middle.
	budget := maxChars - b.Len() - len(reminder)
	lo, hi := 0, len(rendered)-1
	var front, back []string
	for lo <= hi && budget > 0 {
		if len(rendered[lo]) <= budget {
			front = append(front, rendered[lo])
			budget -= len(rendered[lo])
			lo++
		} else {
			break
		}
		if lo <= hi && len(rendered[hi]) <= budget {
			back = append(back, rendered[hi])
			budget -= len(rendered[hi])
			hi--
		}
	}
	for _, r := range front {
		b.WriteString(r)
	}
	if lo <= hi {
		fmt.Fprintf(&b, "[... %d messages elided to fit the summarizer's input ...]\n\n", hi-lo+1)
	}
	for i := len(back) - 1; i >= 0; i-- {
		b.WriteString(back[i])
	}
	b.WriteString(reminder)
	return b.String()
}

// summaryPromptLen is len(BuildSummaryPrompt(req, 0)), counted without building the
// prompt: every compaction's record counts what an LLM summarizer would be sent, and
// building a prompt of a long span to measure it cost a quarter of a Full compaction.
// The memo m, when not nil, keeps the length of the previous anchors.
func summaryPromptLen(m *extractMemo, req SummaryRequest) int {
	n := 0
	if req.PreviousSummary != "" || CountAvailable(req.PreviousAnchors) > 0 {
		n += len("Previous anchors:\n") + m.anchorsLen(req.PreviousAnchors) +
			len("\nPrevious summary:\n") + len(req.PreviousSummary) + len("\n\n")
	}
	n += len("Conversation excerpt to merge (") + decimalLen(len(req.Messages)) + len(" messages):\n\n")
	for i := range req.Messages {
		n += renderedLen(&req.Messages[i], maxRenderedMessageChars)
	}
	return n + len(promptReminder(req))
}

// renderedLen is len(renderMessage(m, maxChars)), counted without rendering.
func renderedLen(m *Message, maxChars int) int {
	n := 0
	switch m.Role {
	case RoleTool:
		n += len("[tool result ]\n") + len(m.ToolCallID)
	default:
		n += len("[]\n") + len(m.Role)
	}
	content := len(m.Content)
	if m.Content == "" && m.ContentParts != nil {
		content = len(renderParts(m.ContentParts))
	}
	if content > maxChars {
		half := maxChars / 2
		c := m.Content
		if c == "" {
			c = renderParts(m.ContentParts)
		}
		content = len(textcut.Head(c, half)) + len("\n[...  bytes elided ...]\n") + decimalLen(content-maxChars) + len(textcut.Tail(c, half))
	}
	n += content + 1
	for _, tc := range m.ToolCalls {
		args := len(tc.Function.Arguments)
		if args > maxChars/2 {
			args = len(textcut.Head(tc.Function.Arguments, maxChars/2)) + len("...")
		}
		n += len("-> call  ()\n") + len(tc.ID) + len(tc.Function.Name) + args
	}
	return n + 1
}

// decimalLen is the number of characters %d prints for n.
func decimalLen(n int) int {
	l := 1
	if n < 0 {
		l++
		n = -n
	}
	for ; n >= 10; n /= 10 {
		l++
	}
	return l
}

// promptReminder ends the prompt with the reply format: after a long excerpt, models follow
// the system prompt's format less reliably.
func promptReminder(req SummaryRequest) string {
	s := "\nReply in the format of your instructions: \"## Anchors\" with the five \"- name:\" headers and their \"- \" items, then \"## Summary\"."
	if CountAvailable(req.PreviousAnchors) > 0 {
		s += " The previous anchors are kept: list only what this excerpt adds or changes, and the complete current next_step."
	}
	s += "\n"
	if req.MaxSummaryChars > 0 {
		s += fmt.Sprintf("Keep the summary under %d characters.\n", req.MaxSummaryChars)
	}
	return s
}

// renderParts is content parts as a summarizer reads them: the text parts, an "[image]" for
// each image (its base64 would cost tokens and say nothing), any other part as its JSON.
func renderParts(raw json.RawMessage) string {
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	lines := make([]string, 0, len(parts))
	for _, p := range parts {
		switch kind, text := readPart(p); kind {
		case partIsText:
			lines = append(lines, text)
		case partIsImage:
			lines = append(lines, "[image]")
		default:
			lines = append(lines, string(p))
		}
	}
	return strings.Join(lines, "\n")
}

// renderMessage renders one message as plain text for a summarizer, cut to maxChars.
func renderMessage(m *Message, maxChars int) string {
	var b strings.Builder
	switch m.Role {
	case RoleTool:
		fmt.Fprintf(&b, "[tool result %s]\n", m.ToolCallID)
	default:
		fmt.Fprintf(&b, "[%s]\n", m.Role)
	}
	content := m.Content
	if content == "" && m.ContentParts != nil {
		content = renderParts(m.ContentParts)
	}
	if len(content) > maxChars {
		half := maxChars / 2
		content = textcut.Head(content, half) + fmt.Sprintf("\n[... %d bytes elided ...]\n", len(content)-maxChars) + textcut.Tail(content, half)
	}
	b.WriteString(content)
	b.WriteByte('\n')
	for _, tc := range m.ToolCalls {
		args := tc.Function.Arguments
		if len(args) > maxChars/2 {
			args = textcut.Head(args, maxChars/2) + "..."
		}
		fmt.Fprintf(&b, "-> call %s %s(%s)\n", tc.ID, tc.Function.Name, args)
	}
	b.WriteByte('\n')
	return b.String()
}
