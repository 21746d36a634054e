package compaction

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// ExtractiveSummarizer is the default summarizer: deterministic, no network, no model. It
// builds the five anchors and a prose timeline from the messages themselves (the first user
// request, the tool calls made, failures seen, the decisions the assistant stated, its last
// plan), so everything works, and is testable, with no LLM.
type ExtractiveSummarizer struct{}

// Name is "extractive".
func (ExtractiveSummarizer) Name() string { return "extractive" }

// Lengths the extractive summary keeps of each piece it quotes.
const (
	extractIntentChars   = 800
	extractLineChars     = 160
	extractDecisionChars = 240
	extractMaxItems      = 5
)

// Summarize renders the anchors and summary in the documented format.
func (ExtractiveSummarizer) Summarize(ctx context.Context, req SummaryRequest) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	prev := map[AnchorType]string{}
	for _, a := range req.PreviousAnchors {
		if a.Available() {
			prev[a.Type] = a.Content
		}
	}
	calls := map[string]ToolCall{}
	var (
		intent    string
		nextStep  string
		toolCount = map[string]int{}
		nUser     int
		nAsst     int
		nTool     int
		nOffload  int
	)
	// Forward: counts, the first request, the last plan.
	for i := range req.Messages {
		m := &req.Messages[i]
		switch m.Role {
		case RoleUser:
			nUser++
			if intent == "" && !strings.HasPrefix(m.Content, CompactionHeader) && strings.TrimSpace(m.Content) != "" {
				intent = clip(m.Content, extractIntentChars)
			}
		case RoleAssistant:
			nAsst++
			for _, tc := range m.ToolCalls {
				calls[tc.ID] = tc
				toolCount[tc.Function.Name]++
			}
			if t := strings.TrimSpace(m.Content); t != "" {
				nextStep = clip(t, extractDecisionChars*2)
			}
		case RoleTool:
			nTool++
			if strings.HasPrefix(m.Content, PlaceholderPrefix) {
				nOffload++
			}
		}
	}
	// Backward: only the latest few calls, decisions and failures are kept, so stop looking
	// once they are found; a long span costs no more than a short one.
	var lastCalls, decisions, failures []string
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := &req.Messages[i]
		if len(lastCalls) >= extractMaxItems && len(decisions) >= extractMaxItems && len(failures) >= extractMaxItems {
			break
		}
		switch m.Role {
		case RoleAssistant:
			for j := len(m.ToolCalls) - 1; j >= 0 && len(lastCalls) < extractMaxItems; j-- {
				lastCalls = append(lastCalls, describeCall(m.ToolCalls[j]))
			}
			if len(decisions) < extractMaxItems {
				ds := decisionSentences(m.Content)
				for j := len(ds) - 1; j >= 0 && len(decisions) < extractMaxItems; j-- {
					decisions = append(decisions, ds[j])
				}
			}
		case RoleTool:
			if len(failures) >= extractMaxItems {
				continue
			}
			if line, ok := failureLine(m.Content); ok {
				what := "a tool call"
				if tc, ok := calls[m.ToolCallID]; ok {
					what = describeCall(tc)
				}
				failures = append(failures, what+" -> "+line)
			}
		}
	}
	slices.Reverse(lastCalls)
	slices.Reverse(decisions)
	slices.Reverse(failures)

	anchors := map[AnchorType]string{}
	switch {
	case prev[AnchorUserIntent] != "":
		anchors[AnchorUserIntent] = prev[AnchorUserIntent] // the original goal outlives every merge
	case intent != "":
		anchors[AnchorUserIntent] = intent
	}
	if len(toolCount) > 0 || prev[AnchorExecutionProgress] != "" {
		var b strings.Builder
		if p := prev[AnchorExecutionProgress]; p != "" {
			b.WriteString("Earlier: " + clip(oneLine(p), 400) + "\n")
		}
		if len(toolCount) > 0 {
			fmt.Fprintf(&b, "This span: %d tool calls (%s)", sumCounts(toolCount), formatCounts(toolCount))
			if len(lastCalls) > 0 {
				b.WriteString("; latest: " + strings.Join(lastCalls, "; "))
			}
		}
		anchors[AnchorExecutionProgress] = b.String()
	}
	if len(decisions) > 0 {
		anchors[AnchorKeyDecision] = "- " + strings.Join(decisions, "\n- ")
	}
	if len(failures) > 0 {
		anchors[AnchorTriedSolution] = "- " + strings.Join(failures, "\n- ")
	}
	if nextStep != "" {
		anchors[AnchorNextStep] = nextStep
	}

	var out strings.Builder
	out.WriteString("## Anchors\n")
	for _, t := range AnchorTypes {
		c := anchors[t]
		if c == "" {
			c = NotAvailable
		}
		fmt.Fprintf(&out, "- %s: %s\n", t, strings.ReplaceAll(c, "\n", "\n  "))
	}
	out.WriteString("\n## Summary\n")
	out.WriteString(extractiveProse(req, nUser, nAsst, nTool, nOffload))
	return out.String(), nil
}

// extractiveProse is the timeline: one short line per message, the previous summary first,
// bounded to req.MaxSummaryChars by keeping the earliest and latest lines.
func extractiveProse(req SummaryRequest, nUser, nAsst, nTool, nOffload int) string {
	max := req.MaxSummaryChars
	if max <= 0 {
		max = 6000
	}
	head := fmt.Sprintf("Compacted %d messages (%d user, %d assistant, %d tool results, %d offloaded).\n", len(req.Messages), nUser, nAsst, nTool, nOffload)
	if req.PreviousSummary != "" {
		head += "Before that: " + clip(oneLine(req.PreviousSummary), max/3) + "\n"
	}
	budget := max - len(head)
	var b strings.Builder
	b.WriteString(head)
	// Lines are rendered only while they can be shown: from the front while everything might
	// fit, then from the back; a long span costs no more than the summary it yields.
	var front []string
	used := 0
	for i := range req.Messages {
		l := proseLine(&req.Messages[i])
		if used+len(l)+1 > budget {
			break
		}
		used += len(l) + 1
		front = append(front, l)
	}
	if len(front) == len(req.Messages) {
		for _, l := range front {
			b.WriteString(l + "\n")
		}
		return b.String()
	}
	// Keep the first lines up to half the budget and the last ones that fit, mark the elision.
	lo, used := 0, 0
	for lo < len(front) && used+len(front[lo])+1 <= budget/2 {
		used += len(front[lo]) + 1
		lo++
	}
	var back []string
	hi := len(req.Messages)
	for hi > lo {
		l := proseLine(&req.Messages[hi-1])
		if used+len(l)+1 > budget-60 {
			break
		}
		used += len(l) + 1
		back = append(back, l)
		hi--
	}
	for _, l := range front[:lo] {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "- [... %d lines elided ...]\n", hi-lo)
	for i := len(back) - 1; i >= 0; i-- {
		b.WriteString(back[i] + "\n")
	}
	return b.String()
}

// proseLine is one message's line in the timeline.
func proseLine(m *Message) string {
	switch m.Role {
	case RoleUser:
		return "- user: " + clip(firstLine(m.Content), extractLineChars)
	case RoleAssistant:
		l := "- assistant: " + clip(firstLine(m.Content), extractLineChars)
		if len(m.ToolCalls) > 0 {
			names := make([]string, 0, len(m.ToolCalls))
			for _, tc := range m.ToolCalls {
				names = append(names, describeCall(tc))
			}
			l += " [" + strings.Join(names, "; ") + "]"
		}
		return l
	case RoleTool:
		if strings.HasPrefix(m.Content, PlaceholderPrefix) {
			return "  -> offloaded result " + m.ToolCallID + ", readable by its tool_call_id"
		}
		return fmt.Sprintf("  -> %s (%d bytes)", clip(firstLine(m.Content), extractLineChars), len(m.Content))
	default:
		return "- " + string(m.Role) + ": " + clip(firstLine(m.Content), extractLineChars)
	}
}

func describeCall(tc ToolCall) string {
	// Cut before folding white space: arguments can be whole files.
	args := oneLine(truncateUTF8(tc.Function.Arguments, 400))
	return clip(tc.Function.Name+"("+clip(args, 100)+")", 130)
}

var decisionMarkers = [...]string{"i will ", "i'll ", "decided", "instead", "let's ", "the fix ", "approach", "the issue is", "the problem is", "root cause"}

// decisionSentences picks sentences in which the assistant states a choice or a plan.
func decisionSentences(content string) []string {
	markers := decisionMarkers[:]
	lower := strings.ToLower(content)
	any := false
	for _, mk := range markers {
		if strings.Contains(lower, mk) {
			any = true
			break
		}
	}
	if !any { // most messages state no decision: skip splitting them into sentences
		return nil
	}
	var out []string
	for _, s := range splitSentences(content) {
		ls := strings.ToLower(s)
		for _, mk := range markers {
			if strings.Contains(ls, mk) {
				out = append(out, clip(s, extractDecisionChars))
				break
			}
		}
	}
	return out
}

func splitSentences(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || ((s[i] == '.' || s[i] == '!' || s[i] == '?') && (i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\n')) {
			if t := strings.TrimSpace(s[start : i+1]); len(t) > 12 {
				out = append(out, t)
			}
			start = i + 1
		}
	}
	if t := strings.TrimSpace(s[start:]); len(t) > 12 {
		out = append(out, t)
	}
	return out
}

var failureMarkers = [...]string{"Traceback", "Error:", "ERROR", "FAILED", "error:", "Exception", "command not found", "No such file", "exit code 1", "returncode: 1", "failed"}

// failureLine finds the first line of a tool result that says it failed. It searches the
// whole text for each marker rather than splitting it into lines: results can be large.
func failureLine(content string) (string, bool) {
	first := -1
	for _, mk := range failureMarkers {
		limit := content
		if first >= 0 {
			limit = content[:first] // only an earlier hit can win
		}
		if i := strings.Index(limit, mk); i >= 0 {
			first = i
		}
	}
	if first < 0 {
		return "", false
	}
	start := strings.LastIndexByte(content[:first], '\n') + 1
	end := strings.IndexByte(content[first:], '\n')
	if end < 0 {
		end = len(content)
	} else {
		end += first
	}
	return clip(strings.TrimSpace(content[start:end]), extractLineChars), true
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func formatCounts(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s x%d", n, m[n]))
	}
	return strings.Join(parts, ", ")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return truncateUTF8(s, n) + "..."
}
