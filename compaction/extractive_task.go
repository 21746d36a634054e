package compaction

import (
	"regexp"
	"slices"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/prose"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// Harness markup in a task: where the harness's instructions after the problem statement
// start, and a tag alone on its line (also skipped in the timeline).
var (
	instructionsStart = regexp.MustCompile(`(?i)^(?:</?instructions>|</pr_description>|</issue_description>|</issue>|INSTRUCTIONS:?|#+ *(?:task )?instructions)$`)
	tagLine           = regexp.MustCompile(`^</?[A-Za-z_][\w-]*>$`)
)

// taskItems is the task as user_intent items: a short task whole; a long one as its title
// and its key requirement lines (those under an "Expected behavior"-like heading, those that
// say must/should/do not, API names), within extractTaskChars, and the key lines of the
// harness's instructions after the problem statement, within extractInstrChars.
func taskItems(text string) []string {
	text = textcut.Head(text, 4*extractTextBytes)
	if one := textcut.OneLine(text); len(one) <= extractShortTask {
		return []string{one}
	}
	type cand struct {
		idx, score int
		instr      bool
		text       string
	}
	var cands []cand
	title := ""
	inFence, instr, inExample := false, false, false
	section := ""
	for i, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		if strings.HasPrefix(l, "```") || strings.HasPrefix(l, "~~~") {
			inFence = !inFence
			continue
		}
		if inFence || l == "" {
			continue
		}
		if instructionsStart.MatchString(l) {
			instr, section = true, ""
			continue
		}
		if tagLine.MatchString(l) {
			// A harness's example responses are not requirements.
			if strings.Contains(strings.ToLower(l), "example") {
				inExample = !strings.HasPrefix(l, "</")
			}
			continue
		}
		if inExample {
			continue
		}
		if h, ok := strings.CutPrefix(l, "#"); ok {
			h = strings.Trim(strings.TrimLeft(h, "#"), " *")
			if title == "" && !instr && len(strings.Fields(h)) >= 3 {
				title = h
			} else {
				section = strings.ToLower(h)
			}
			continue
		}
		if bold := strings.Trim(l, "*_:"); strings.HasPrefix(l, "**") && strings.HasSuffix(strings.TrimRight(l, ":"), "**") || strings.HasSuffix(l, ":") && len(strings.Fields(l)) <= 6 {
			section = strings.ToLower(bold)
			continue
		}
		body := prose.TrimListMarker(l)
		if body == "" {
			continue
		}
		if title == "" && !instr && len(strings.Fields(body)) >= 3 && !strings.HasSuffix(body, ":") {
			title = body
			continue
		}
		if !prose.StartsLikeProse(body) || len(strings.Fields(body)) < 4 || strings.HasSuffix(body, "?") {
			continue // example output, tables, prompts, questions
		}
		if score := prose.RequirementScore(section, body); score >= 2 {
			cands = append(cands, cand{i, score, instr, textcut.Clip(textcut.OneLine(body), extractItemChars-20)})
		}
	}
	items := []string{}
	used := 0
	if title != "" {
		title = textcut.Clip(textcut.OneLine(title), 200)
		items = append(items, title)
		used += len(title)
	}
	// The best-scored lines that fit, shown in their order in the task.
	order := slices.Clone(cands)
	slices.SortStableFunc(order, func(a, b cand) int { return b.score - a.score })
	var picked []cand
	instrUsed := 0
	seen := map[string]bool{itemKey(AnchorUserIntent, title): true}
	for _, c := range order {
		k := itemKey(AnchorUserIntent, c.text)
		if seen[k] || !c.instr && used+len(c.text) > extractTaskChars || c.instr && instrUsed+len(c.text) > extractInstrChars {
			continue
		}
		seen[k] = true
		if c.instr {
			instrUsed += len(c.text)
		} else {
			used += len(c.text)
		}
		picked = append(picked, c)
	}
	slices.SortFunc(picked, func(a, b cand) int { return a.idx - b.idx })
	for _, c := range picked {
		items = append(items, c.text)
	}
	if len(items) == 0 {
		items = append(items, textcut.Clip(textcut.OneLine(text), extractShortTask))
	}
	return items
}
