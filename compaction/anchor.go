package compaction

import "strings"

// AnchorType is one of the five kinds of information a summary must keep.
type AnchorType string

// The five anchor types of the spec, in the order they are shown.
const (
	AnchorUserIntent        AnchorType = "user_intent"
	AnchorExecutionProgress AnchorType = "execution_progress"
	AnchorKeyDecision       AnchorType = "key_decision"
	AnchorTriedSolution     AnchorType = "tried_solution"
	AnchorNextStep          AnchorType = "next_step"
)

// AnchorTypes lists the five types in their canonical order.
var AnchorTypes = [...]AnchorType{AnchorUserIntent, AnchorExecutionProgress, AnchorKeyDecision, AnchorTriedSolution, AnchorNextStep}

// notAvailable is the content of an anchor the summary did not provide.
const notAvailable = "N/A"

// maxAnchorChars bounds one anchor's content so anchors stay small in context and status.
const maxAnchorChars = 2000

// maxDecisionChars bounds key_decision and tried_solution, which keep more, shorter items
// than the others: the decisions and failed attempts of a long session are spread over it,
// each is a sentence or an error line, and an agent that forgets them repeats them.
const maxDecisionChars = 3000

// anchorMaxChars is the bound of an anchor of type t.
func anchorMaxChars(t AnchorType) int {
	if t == AnchorKeyDecision || t == AnchorTriedSolution {
		return maxDecisionChars
	}
	return maxAnchorChars
}

// Anchor is one piece of structured, programmatically checkable summary.
type Anchor struct {
	Type    AnchorType `json:"type"`
	Content string     `json:"content"`
}

// Available reports whether the anchor carries information.
func (a Anchor) Available() bool {
	c := strings.TrimSpace(a.Content)
	return c != "" && !strings.EqualFold(c, notAvailable)
}

// CountAvailable is the number of anchors that carry information.
func CountAvailable(anchors []Anchor) int {
	n := 0
	for _, a := range anchors {
		if a.Available() {
			n++
		}
	}
	return n
}
