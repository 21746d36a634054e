package compaction

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/prose"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
	"github.com/harness9/compaction-operator/compaction/internal/toolout"
)

// extractiveProse is the timeline: one short line per message, after the lines of the
// previous summary's timeline, bounded to req.MaxSummaryChars by keeping the earliest and the
// latest lines. The previous summary's lines are carried over as lines, never nested.
func extractiveProse(req *SummaryRequest, nUser, nAsst, nTool, nOffload int) string {
	max := req.MaxSummaryChars
	if max <= 0 {
		max = 6000
	}
	prevLines, earlier, elided := previousTimeline(req.PreviousSummary)
	head := fmt.Sprintf("Compacted %d messages (%d user, %d assistant, %d tool results, %d offloaded)", len(req.Messages), nUser, nAsst, nTool, nOffload)
	if earlier > 0 {
		head += fmt.Sprintf("; %d before that", earlier)
	}
	head += ".\n"
	n := len(prevLines) + len(req.Messages)
	line := func(i int) string {
		if i < len(prevLines) {
			return prevLines[i]
		}
		return proseLine(&req.Messages[i-len(prevLines)])
	}
	budget := max - len(head)
	var b strings.Builder
	b.WriteString(head)
	// Lines are rendered only while they can be shown: from the front while everything might
	// fit, then from the back; a long span costs no more than the summary it yields.
	var front []string
	used := 0
	for i := range n {
		l := line(i)
		if used+len(l)+1 > budget {
			break
		}
		used += len(l) + 1
		front = append(front, l)
	}
	if len(front) == n && elided == 0 {
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
	hi := n
	for hi > lo {
		l := line(hi - 1)
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
	if gone := elided + hi - lo; gone > 0 {
		fmt.Fprintf(&b, "- [... %d lines elided ...]\n", gone)
	}
	for i := len(back) - 1; i >= 0; i-- {
		b.WriteString(back[i] + "\n")
	}
	return b.String()
}

// The lines of a timeline this summarizer wrote that are not message lines: its head and
// its elision marker.
var (
	proseHead    = regexp.MustCompile(`^Compacted (\d+) messages \([^)]*\)(?:; (\d+) before that)?\.$`)
	proseElision = regexp.MustCompile(`^- \[\.\.\. (\d+) lines elided \.\.\.\]$`)
)

// previousTimeline splits a previous summary into its timeline lines, the messages it said
// it covered and the lines it had elided. The summary may be an LLM's prose: its lines are
// kept as they are, clipped.
func previousTimeline(prev string) (lines []string, covered, elided int) {
	for l := range strings.SplitSeq(strings.TrimSpace(prev), "\n") {
		l = strings.TrimRight(l, " \t\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		if m := proseHead.FindStringSubmatch(l); m != nil {
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			covered += a + b
			continue
		}
		if m := proseElision.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			elided += n
			continue
		}
		if rest, ok := strings.CutPrefix(l, "Before that: "); ok { // the old format's nesting
			l = "- earlier: " + rest
		}
		if len(l) > 2*extractLineChars { // clipped, not trimmed: "  -> result" lines stay indented
			l = textcut.Head(l, 2*extractLineChars) + "..."
		}
		lines = append(lines, l)
	}
	return lines, covered, elided
}

// proseLine is one message's line in the timeline.
func proseLine(m *Message) string {
	switch m.Role {
	case RoleUser:
		return "- user: " + textcut.Clip(firstTextLine(messageText(m)), extractLineChars)
	case RoleAssistant:
		l := "- assistant: " + textcut.Clip(firstTextLine(prose.CleanAssistant(textcut.Head(m.Content, 2048))), extractLineChars)
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
		c := textcut.Head(m.Content, 2048)
		exit := ""
		if code, rest, ok := toolout.LeadingReturnCode(c); ok {
			exit, c = "exit "+code+": ", rest
		}
		return fmt.Sprintf("  -> %s%s (%d bytes)", exit, textcut.Clip(firstOutputLine(c), extractLineChars), len(m.Content))
	default:
		return "- " + string(m.Role) + ": " + textcut.Clip(textcut.FirstLine(m.Content), extractLineChars)
	}
}

func describeCall(tc ToolCall) string {
	// Cut before folding white space: arguments can be whole files.
	args := textcut.OneLine(textcut.Head(tc.Function.Arguments, 400))
	return textcut.Clip(tc.Function.Name+"("+textcut.Clip(args, 100)+")", 130)
}

// firstTextLine is the first line of s that is not markup such as "<uploaded_files>" or a
// path alone.
func firstTextLine(s string) string {
	s = textcut.Head(s, 2048)
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !tagLine.MatchString(l) && strings.Contains(l, " ") {
			return l
		}
	}
	return textcut.FirstLine(s)
}

// firstOutputLine is the first line of a tool result that is not harness markup.
func firstOutputLine(s string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "OBSERVATION:" && !tagLine.MatchString(l) {
			return strings.TrimSpace(strings.TrimPrefix(l, "OBSERVATION:"))
		}
	}
	return ""
}
