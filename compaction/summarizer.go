package compaction

import (
	"context"
	"fmt"
	"strings"
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

// SummaryInstructions is the system prompt for LLM summarizers. It asks for the exact
// format ParseAnchorsAndSummary reads best.
const SummaryInstructions = `You compact the context of a long-running AI agent. Summarize the conversation excerpt you are given so the agent can continue its task without it.

Reply in exactly this format, with nothing before or after:

## Anchors
- user_intent: the user's original goal and constraints, in their words where possible
- execution_progress: what has been completed so far (files changed, tests run, results)
- key_decision: technical choices made and why
- tried_solution: approaches that failed and why, so they are not repeated
- next_step: the concrete next actions

## Summary
A concise prose summary of everything else the agent needs: names, paths, commands, error messages, numbers.

Rules: write N/A for an anchor with nothing to say. If a previous summary and anchors are given, merge them with the new excerpt: keep every fact that is still true, drop what is superseded. Offloaded tool results appear as placeholders with a tool_call_id: mention that ID where the result matters, the agent can read it back.`

// maxRenderedMessageChars bounds one message in a summarizer prompt, so a single huge
// message cannot blow the summarizer's own context.
const maxRenderedMessageChars = 4000

// BuildSummaryPrompt renders a request as the user message for an LLM summarizer, bounded
// to about maxChars bytes: the oldest and newest messages are kept, the middle is elided.
func BuildSummaryPrompt(req SummaryRequest, maxChars int) string {
	var b strings.Builder
	if req.PreviousSummary != "" || CountAvailable(req.PreviousAnchors) > 0 {
		b.WriteString("Previous anchors:\n")
		b.WriteString(FormatAnchors(MergeAnchors(nil, req.PreviousAnchors)))
		b.WriteString("\nPrevious summary:\n")
		b.WriteString(req.PreviousSummary)
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "Conversation excerpt to merge (%d messages):\n\n", len(req.Messages))
	rendered := make([]string, len(req.Messages))
	total := b.Len()
	for i := range req.Messages {
		rendered[i] = RenderMessage(&req.Messages[i], maxRenderedMessageChars)
		total += len(rendered[i])
	}
	if maxChars <= 0 || total <= maxChars {
		for _, r := range rendered {
			b.WriteString(r)
		}
		if req.MaxSummaryChars > 0 {
			fmt.Fprintf(&b, "\nKeep the summary under %d characters.\n", req.MaxSummaryChars)
		}
		return b.String()
	}
	// Keep messages from both ends until the budget is used, eliding the middle.
	budget := maxChars - b.Len()
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
	if req.MaxSummaryChars > 0 {
		fmt.Fprintf(&b, "\nKeep the summary under %d characters.\n", req.MaxSummaryChars)
	}
	return b.String()
}

// RenderMessage renders one message as plain text for a summarizer, cut to maxChars.
func RenderMessage(m *Message, maxChars int) string {
	var b strings.Builder
	switch m.Role {
	case RoleTool:
		fmt.Fprintf(&b, "[tool result %s]\n", m.ToolCallID)
	default:
		fmt.Fprintf(&b, "[%s]\n", m.Role)
	}
	content := m.Content
	if content == "" && m.ContentParts != nil {
		content = string(m.ContentParts)
	}
	if len(content) > maxChars {
		half := maxChars / 2
		content = truncateUTF8(content, half) + fmt.Sprintf("\n[... %d bytes elided ...]\n", len(content)-maxChars) + tailUTF8(content, half)
	}
	b.WriteString(content)
	b.WriteByte('\n')
	for _, tc := range m.ToolCalls {
		args := tc.Function.Arguments
		if len(args) > maxChars/2 {
			args = truncateUTF8(args, maxChars/2) + "..."
		}
		fmt.Fprintf(&b, "-> call %s %s(%s)\n", tc.ID, tc.Function.Name, args)
	}
	b.WriteByte('\n')
	return b.String()
}

// tailUTF8 returns the last n bytes of s or fewer, starting on a rune boundary.
func tailUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && (s[i]&0xC0) == 0x80 {
		i++
	}
	return s[i:]
}
