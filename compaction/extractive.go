package compaction

import (
	"context"
	"fmt"
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
		decisions []string
		failures  []string
		nextStep  string
		toolCount = map[string]int{}
		lastCalls []string
		nUser     int
		nAsst     int
		nTool     int
		nOffload  int
	)
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
				lastCalls = appendBounded(lastCalls, describeCall(tc), extractMaxItems)
			}
			for _, s := range decisionSentences(m.Content) {
				decisions = appendBounded(decisions, s, extractMaxItems)
			}
			if t := strings.TrimSpace(m.Content); t != "" {
				nextStep = clip(t, extractDecisionChars*2)
			}
		case RoleTool:
			nTool++
			if strings.HasPrefix(m.Content, PlaceholderPrefix) {
				nOffload++
			}
			if line, ok := failureLine(m.Content); ok {
				what := "a tool call"
				if tc, ok := calls[m.ToolCallID]; ok {
					what = describeCall(tc)
				}
				failures = appendBounded(failures, what+" -> "+line, extractMaxItems)
			}
		}
	}

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
			b.WriteString(fmt.Sprintf("This span: %d tool calls (%s)", sumCounts(toolCount), formatCounts(toolCount)))
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
	out.WriteString(extractiveProse(req, nUser, nAsst, nTool, nOffload, calls))
	return out.String(), nil
}

// extractiveProse is the timeline: one short line per message, the previous summary first,
// bounded to req.MaxSummaryChars by keeping the earliest and latest lines.
func extractiveProse(req SummaryRequest, nUser, nAsst, nTool, nOffload int, calls map[string]ToolCall) string {
	max := req.MaxSummaryChars
	if max <= 0 {
		max = 6000
	}
	head := fmt.Sprintf("Compacted %d messages (%d user, %d assistant, %d tool results, %d offloaded).\n", len(req.Messages), nUser, nAsst, nTool, nOffload)
	if req.PreviousSummary != "" {
		head += "Before that: " + clip(oneLine(req.PreviousSummary), max/3) + "\n"
	}
	var lines []string
	for i := range req.Messages {
		m := &req.Messages[i]
		switch m.Role {
		case RoleUser:
			lines = append(lines, "- user: "+clip(firstLine(m.Content), extractLineChars))
		case RoleAssistant:
			l := "- assistant: " + clip(firstLine(m.Content), extractLineChars)
			if len(m.ToolCalls) > 0 {
				names := make([]string, 0, len(m.ToolCalls))
				for _, tc := range m.ToolCalls {
					names = append(names, describeCall(tc))
				}
				l += " [" + strings.Join(names, "; ") + "]"
			}
			lines = append(lines, l)
		case RoleTool:
			l := fmt.Sprintf("  -> %s (%d bytes)", clip(firstLine(m.Content), extractLineChars), len(m.Content))
			if strings.HasPrefix(m.Content, PlaceholderPrefix) {
				l = "  -> offloaded result " + m.ToolCallID + ", readable by its tool_call_id"
			}
			lines = append(lines, l)
		}
	}
	budget := max - len(head)
	total := 0
	for _, l := range lines {
		total += len(l) + 1
	}
	var b strings.Builder
	b.WriteString(head)
	if total <= budget {
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
		return b.String()
	}
	// Keep the first and last lines that fit, mark the elision.
	lo, hi, used := 0, len(lines), 0
	for lo < hi {
		if used+len(lines[lo])+1 > budget/2 {
			break
		}
		used += len(lines[lo]) + 1
		lo++
	}
	for hi > lo {
		if used+len(lines[hi-1])+1 > budget-60 {
			break
		}
		used += len(lines[hi-1]) + 1
		hi--
	}
	for _, l := range lines[:lo] {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "- [... %d lines elided ...]\n", hi-lo)
	for _, l := range lines[hi:] {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func describeCall(tc ToolCall) string {
	args := oneLine(tc.Function.Arguments)
	return clip(tc.Function.Name+"("+clip(args, 100)+")", 130)
}

// decisionSentences picks sentences in which the assistant states a choice or a plan.
func decisionSentences(content string) []string {
	markers := []string{"i will ", "i'll ", "decided", "instead", "let's ", "the fix ", "approach", "the issue is", "the problem is", "root cause"}
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

// failureLine finds the line of a tool result that says it failed.
func failureLine(content string) (string, bool) {
	markers := []string{"Traceback", "Error:", "ERROR", "FAILED", "error:", "Exception", "command not found", "No such file", "exit code 1", "returncode: 1", "failed"}
	for _, line := range strings.Split(content, "\n") {
		for _, mk := range markers {
			if strings.Contains(line, mk) {
				return clip(strings.TrimSpace(line), extractLineChars), true
			}
		}
	}
	return "", false
}

func appendBounded(list []string, s string, max int) []string {
	list = append(list, s)
	if len(list) > max {
		list = list[len(list)-max:]
	}
	return list
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
