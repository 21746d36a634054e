// Package synth generates deterministic, realistic coding-agent histories in the compaction
// engine's message format, for tests, benchmarks and the sample transcripts in testdata/.
//
// A history reads like a real agent run on a fictional Python project: a system prompt, a
// user's bug report with a goal, then assistant turns that reason and call tools (bash:
// grep, find, cat, pytest, git; str_replace_editor: view, str_replace, insert), tool
// results (file listings, source code, pytest logs with tracebacks), a wrong first fix that
// fails, a stated change of approach ("I'll ... instead"), the right fix, passing tests and
// a final answer. Long histories fix one bug after another: each full test run reveals the
// next failure.
//
// GenerateWithFacts also returns the facts the history plants (the task, the user's
// constraints, the files edited, the failure of the wrong first fix, the change of approach,
// where the work stands at the end): the probes compactctl eval checks a compacted view for.
//
// Generation is a pure function of Options: the same options give the same messages, byte
// for byte. Every history passes compaction.Validate; tool results always follow the
// assistant message that made their calls, in call order.
package synth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
)

// Options controls a generated history. The zero value is usable.
type Options struct {
	// Seed selects the project, the bugs, the wording and the sizes.
	Seed int64
	// Messages is the approximate number of messages (default 60). The result has at
	// least Messages messages (at least 5) and at most a few more: generation stops after
	// the turn that reaches the count, then adds the final answer.
	Messages int
	// AvgBytes is the average message size the generator steers to, counted as
	// compaction.Message.Chars counts it (content plus tool-call names and arguments).
	// Default 2000. Very small values are not reachable: tool output has a natural minimum.
	AvgBytes int
	// BigResultEvery makes every Nth tool result (N, 2N, ...) large: 5 KB to 50 KB (a whole
	// module, a verbose test run, a grep that went through .venv, a git log). 0: none.
	BigResultEvery int
	// ParallelCalls makes some assistant turns call 2 or 3 tools at once, answered by
	// consecutive tool messages in call order.
	ParallelCalls bool
	// UserInterjections puts user messages between tool turns (new constraints, questions,
	// follow-up requests), which the assistant acknowledges in its next turn.
	UserInterjections bool
	// TextOnlyTurns adds assistant turns with no tool calls (analysis, progress notes), each
	// followed by the harness's "please continue" user message, as agent harnesses do.
	TextOnlyTurns bool
}

// Defaults and bounds of generated sizes.
const (
	DefaultMessages   = 60
	DefaultAvgBytes   = 2000
	MinBigResultBytes = 5 << 10
	MaxBigResultBytes = 50 << 10
)

func (o Options) withDefaults() Options {
	if o.Messages <= 0 {
		o.Messages = DefaultMessages
	}
	if o.Messages < 5 {
		o.Messages = 5
	}
	if o.AvgBytes <= 0 {
		o.AvgBytes = DefaultAvgBytes
	}
	if o.BigResultEvery < 0 {
		o.BigResultEvery = 0
	}
	return o
}

// Generate returns a new history for opts.
func Generate(opts Options) []compaction.Message {
	msgs, _ := GenerateWithFacts(opts)
	return msgs
}

// Categories of the facts a history plants; they are compactctl eval's probe categories.
const (
	FactTask       = "task"       // the bug report's title
	FactConstraint = "constraint" // a rule the user gave: in the task, or in a later interjection
	FactArtifact   = "artifact"   // a file the agent edited
	FactDecision   = "decision"   // a change of approach ("I'll ... instead")
	FactError      = "error"      // the failure the wrong first fix still produced
	FactNext       = "next"       // the state at the end: the test still failing, or the last function fixed
)

// Fact is something a generated history states that an agent continuing the task needs to
// see. Text is a verbatim snippet of a message before the final answer (content, or a tool
// call's name or arguments), so it can be searched for in a compacted view.
type Fact struct {
	ID       string `json:"id"`
	Category string `json:"category"`
	Text     string `json:"text"`
}

// GenerateWithFacts returns the history Generate returns for opts, byte for byte, and the
// facts it planted, in the order they entered the history. Recording facts draws nothing
// from the random stream, so it cannot change the history.
func GenerateWithFacts(opts Options) ([]compaction.Message, []Fact) {
	g := newGen(opts.withDefaults())
	g.run()
	return g.out, g.facts
}

// Bytes is the total size of msgs as the token estimate counts it (EstimateTokens * 4,
// before the division).
func Bytes(msgs []compaction.Message) int {
	n := 0
	for i := range msgs {
		n += msgs[i].Chars()
	}
	return n
}

type msg = compaction.Message

const (
	roleAssistant = compaction.RoleAssistant
	roleTool      = compaction.RoleTool
	roleUser      = compaction.RoleUser
)

type gen struct {
	opts Options
	r    *rand.Rand
	out  []compaction.Message

	ids      map[string]bool
	idStyle  int // 0 OpenAI call_, 1 Anthropic toolu_01, 2 DeepSeek call_00_
	obsStyle int // 0 <returncode>, 1 OBSERVATION:, 2 plain
	editTool string
	pyVer    string

	dom      domain
	root     string // absolute repository path
	sources  []*module
	tests    []*module
	bigMods  []*module
	names    map[string]bool
	tplOrder []int
	bugs     []*bugSite // every bug, in episode order
	main     *bugSite

	// accounting for the size controller
	bytes, toolBytes, toolMsgs, otherBytes, otherMsgs int
	results                                           int // tool results emitted
	bigBytes, requested, requestedN                   int // big result bytes; sum and count of normal targets

	ack         string // acknowledgement of the last user interjection, for the next turn
	ackFact     *Fact  // the fact the ack states, planted when the ack is emitted
	facts       []Fact
	factIDs     map[string]bool
	interjected bool
	textOnly    bool
	reproDone   bool
	wrapIdx     int
	fillerIdx   int
	saidIdx     map[int]bool // interjections already used
}

func newGen(opts Options) *gen {
	seed := uint64(opts.Seed)
	g := &gen{
		opts:    opts,
		r:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		ids:     map[string]bool{},
		names:   map[string]bool{},
		saidIdx: map[int]bool{},
		factIDs: map[string]bool{},
	}
	g.idStyle = g.r.IntN(3)
	g.obsStyle = g.r.IntN(3)
	g.editTool = "str_replace_editor"
	g.pyVer = g.pick([]string{"3.10.14", "3.11.9", "3.12.4"})
	g.dom = domains[g.r.IntN(len(domains))]
	g.root = g.pick([]string{"/workspace/" + g.dom.repo, "/testbed", "/repo", "/home/agent/" + g.dom.repo})
	g.tplOrder = g.r.Perm(len(bugTemplates))
	g.buildModules()
	return g
}

// ---- random helpers ----

func (g *gen) pick(xs []string) string       { return xs[g.r.IntN(len(xs))] }
func (g *gen) chance(p float64) bool         { return g.r.Float64() < p }
func (g *gen) between(lo, hi int) int        { return lo + g.r.IntN(hi-lo+1) }
func (g *gen) remaining() int                { return g.opts.Messages - 1 - len(g.out) }
func (g *gen) full() bool                    { return g.remaining() <= 0 }
func (g *gen) abs(m *module) string          { return g.root + "/" + m.path }
func clampF(v, lo, hi float64) float64       { return math.Max(lo, math.Min(hi, v)) }
func pickR(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func (g *gen) alnum(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[g.r.IntN(len(alnum))]
	}
	return string(b)
}

func (g *gen) hex(n int) string {
	const h = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = h[g.r.IntN(16)]
	}
	return string(b)
}

// newID returns a tool call ID in the session's provider style, unique in the history.
func (g *gen) newID() string {
	for {
		var id string
		switch g.idStyle {
		case 0:
			id = "call_" + g.alnum(24)
		case 1:
			id = "toolu_01" + g.alnum(22)
		default:
			id = "call_00_" + g.alnum(24)
		}
		if !g.ids[id] {
			g.ids[id] = true
			return id
		}
	}
}

// ---- size control ----

// slot describes the tool result a call will produce: big (5-50 KB) or a normal size to aim at.
type slot struct {
	big    bool
	target int
}

// slotAt returns the slot of the i-th call of the next turn (0-based).
func (g *gen) slotAt(i int) slot {
	n := g.results + i + 1
	if g.opts.BigResultEvery > 0 && n%g.opts.BigResultEvery == 0 {
		return slot{big: true, target: g.between(MinBigResultBytes+512, MaxBigResultBytes-1024)}
	}
	t := g.normalTarget()
	g.requested += t
	g.requestedN++
	return slot{target: t}
}

// normalTarget is the size the next ordinary tool result should have so the history's
// average lands on AvgBytes: the bytes still to spend, minus the expected big results and
// non-tool messages, spread over the expected remaining ordinary results, with a
// heavy-tailed jitter (real tool output is mostly short with a few long ones).
func (g *gen) normalTarget() int {
	total := float64(g.opts.Messages) * float64(g.opts.AvgBytes)
	rem := math.Max(1, float64(g.opts.Messages-len(g.out)))
	toolFrac := 0.45
	if len(g.out) > 30 {
		toolFrac = clampF(float64(g.toolMsgs)/float64(len(g.out)), 0.2, 0.7)
	}
	avgOther := math.Min(900, float64(g.opts.AvgBytes)*0.35+150)
	if g.otherMsgs > 8 {
		avgOther = float64(g.otherBytes) / float64(g.otherMsgs)
	}
	remTools := rem * toolFrac
	remBig := 0.0
	if g.opts.BigResultEvery > 0 {
		remBig = remTools / float64(g.opts.BigResultEvery)
	}
	avgBig := float64(MinBigResultBytes+MaxBigResultBytes) / 2
	budget := total - float64(g.bytes) - remBig*avgBig - rem*(1-toolFrac)*avgOther
	per := budget / math.Max(1, remTools-remBig)
	// Many results have a natural size (an edit, a commit) or a cap; ask the others for
	// more in proportion to how far realized sizes fell short of requested ones.
	if g.requestedN > 20 && g.requested > 0 {
		eff := float64(g.toolBytes-g.bigBytes) / float64(g.requested)
		per /= clampF(eff, 0.4, 1.0)
	}
	hi := math.Max(12000, 3*float64(g.opts.AvgBytes))
	per = clampF(per, 120, hi)
	jitter := math.Exp(g.r.NormFloat64()*0.8 - 0.32) // mean 1
	return int(clampF(per*jitter, 60, hi*1.4))
}

// assistantTarget is the size to pad an assistant message to.
func (g *gen) assistantTarget() int {
	base := clampF(float64(g.opts.AvgBytes)*0.22, 90, 1400)
	return int(clampF(base*math.Exp(g.r.NormFloat64()*0.6-0.18), 40, 3500))
}

// ---- emitting messages ----

func (g *gen) emit(m compaction.Message) {
	g.out = append(g.out, m)
	n := m.Chars()
	g.bytes += n
	if m.Role == compaction.RoleTool {
		g.toolBytes += n
		g.toolMsgs++
		g.results++
		if g.opts.BigResultEvery > 0 && g.results%g.opts.BigResultEvery == 0 {
			g.bigBytes += n
		}
	} else if m.Role != compaction.RoleSystem {
		g.otherBytes += n
		g.otherMsgs++
	}
}

// call is one tool call of an assistant turn and the result it gets.
type call struct {
	name   string
	args   string
	result string
	say    string // a sentence the assistant says about this call (when it differs from the plan)
}

// turn emits an assistant message with text and calls, then one tool message per call.
func (g *gen) turn(text string, calls ...call) {
	silent := len(calls) > 0 && g.ack == "" && g.chance(0.06) // some models call tools without a word
	if g.ack != "" {
		text = g.ack + " " + text
		g.ack = ""
		g.plantAck()
	}
	for _, c := range calls {
		if c.say != "" {
			text += " " + c.say
			silent = false
		}
	}
	text = g.pad(text, g.assistantTarget())
	if silent {
		text = ""
	}
	m := compaction.Message{Role: compaction.RoleAssistant, Content: text}
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = g.newID()
		m.ToolCalls = append(m.ToolCalls, compaction.ToolCall{ID: ids[i], Type: "function", Function: compaction.FunctionCall{Name: c.name, Arguments: c.args}})
	}
	g.emit(m)
	for i, c := range calls {
		g.emit(compaction.Message{Role: compaction.RoleTool, ToolCallID: ids[i], Content: c.result})
	}
}

// plant records a fact once per ID. Call it when the text is in, or about to enter, the
// history: a fact must never name text the history lacks.
func (g *gen) plant(id, category, text string) {
	if g.factIDs[id] {
		return
	}
	g.factIDs[id] = true
	g.facts = append(g.facts, Fact{ID: id, Category: category, Text: text})
}

// setAck sets the acknowledgement the next assistant turn opens with, and the fact it
// states (nil: none).
func (g *gen) setAck(ack string, f *Fact) {
	g.ack, g.ackFact = ack, f
}

// plantAck plants the fact of the ack just emitted: an ack the history never reached
// (generation stopped first) plants nothing.
func (g *gen) plantAck() {
	if f := g.ackFact; f != nil {
		g.ackFact = nil
		g.plant(f.ID, f.Category, f.Text)
	}
}

func (g *gen) user(text string) {
	g.emit(compaction.Message{Role: compaction.RoleUser, Content: text})
}

// jsonArgs encodes tool arguments the way models send them (no HTML escaping).
func jsonArgs(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only plain structs are encoded
	}
	return strings.TrimRight(buf.String(), "\n")
}

type bashArgs struct {
	Command string `json:"command"`
}

type editorArgs struct {
	Command    string  `json:"command"`
	Path       string  `json:"path"`
	ViewRange  []int   `json:"view_range,omitempty"`
	OldStr     *string `json:"old_str,omitempty"`
	NewStr     *string `json:"new_str,omitempty"`
	InsertLine *int    `json:"insert_line,omitempty"`
}

// bash builds a bash call whose output is wrapped in the session's observation style.
func (g *gen) bash(cmd, output string, exit int) call {
	return call{name: "bash", args: jsonArgs(bashArgs{Command: cmd}), result: g.wrapBash(output, exit)}
}

func (g *gen) wrapBash(output string, exit int) string {
	switch g.obsStyle {
	case 0:
		return fmt.Sprintf("<returncode>%d</returncode>\n<output>\n%s</output>", exit, output)
	case 1:
		return fmt.Sprintf("OBSERVATION:\n%s\n[Command finished with exit code %d]", strings.TrimRight(output, "\n"), exit)
	default:
		if exit != 0 {
			return fmt.Sprintf("%s\nExit code: %d", strings.TrimRight(output, "\n"), exit)
		}
		if output == "" {
			return "(no output)"
		}
		return strings.TrimRight(output, "\n")
	}
}

func (g *gen) wrapEditor(s string) string {
	if g.obsStyle == 1 {
		return "OBSERVATION:\n" + s
	}
	return s
}

// fitBig keeps a big result inside [MinBigResultBytes, MaxBigResultBytes].
func fitBig(s string) string {
	if len(s) <= MaxBigResultBytes {
		return s
	}
	const marker = "\n<warning>\nThe output was too long and has been truncated.\n</warning>\n"
	cut := MaxBigResultBytes - len(marker) - 64
	if i := strings.LastIndexByte(s[:cut], '\n'); i > cut/2 {
		cut = i
	}
	return s[:cut] + marker
}

// ---- the session ----

func (g *gen) run() {
	g.emit(compaction.Message{Role: compaction.RoleSystem, Content: g.systemPrompt()})
	g.main = g.newBug(nil)
	g.user(g.taskMessage(g.main))

	b := g.main
	first := true
	for !g.full() {
		if b == nil {
			if g.remaining() < 24 {
				g.wrapUp()
				continue
			}
			b = g.newBug(nil)
		}
		b = g.episode(b, first)
		first = false
	}
	g.plantState()
	g.finalAnswer()
}

// plantState plants where the work stands before the final answer: the failing test of the
// first bug still open, or else the function fixed last. Only a name the history shows counts.
func (g *gen) plantState() {
	var open, fixed *bugSite
	for _, b := range g.bugs {
		if open == nil && b.state < 2 && (b.announced || b.edits > 0 || b == g.main) {
			open = b
		}
		if b.state == 2 {
			fixed = b
		}
	}
	switch {
	case open != nil && g.shows(open.test):
		g.plant("state", FactNext, open.test)
	case open == nil && fixed != nil && g.shows(fixed.fn):
		g.plant("state", FactNext, fixed.fn)
	}
}

// shows reports whether text occurs in a message of the history so far.
func (g *gen) shows(text string) bool {
	for i := range g.out {
		m := &g.out[i]
		if strings.Contains(m.Content, text) {
			return true
		}
		for _, tc := range m.ToolCalls {
			if strings.Contains(tc.Function.Arguments, text) {
				return true
			}
		}
	}
	return false
}

// episode runs the story of one bug and returns the next bug when the final test run of
// the episode revealed it.
func (g *gen) episode(b *bugSite, first bool) *bugSite {
	var next *bugSite
	steps := []func(){}
	if first {
		steps = append(steps, g.stepExplore)
		if g.chance(0.35) {
			steps = append(steps, g.stepInstall)
		}
	}
	steps = append(steps, func() { g.stepGrep(b) })
	par := g.opts.ParallelCalls && g.chance(0.6)
	steps = append(steps, func() { g.stepReadModule(b, par) })
	if !par {
		steps = append(steps, func() { g.stepReadTest(b) })
	}
	if first && g.opts.UserInterjections {
		steps = append(steps, func() {
			if !g.interjected {
				g.interject(b)
			}
		})
	}
	if first && g.chance(0.3) {
		steps = append(steps, func() { g.stepPytestMissing(b) })
	}
	steps = append(steps, func() { g.stepRunTest(b, b.currentFailure()) })
	repro := g.chance(0.45)
	if repro {
		steps = append(steps, func() { g.stepRepro(b, false) })
	}
	if g.opts.TextOnlyTurns && (first || g.chance(0.45)) {
		steps = append(steps, func() { g.textOnlyAnalysis(b) })
	}
	if g.chance(0.8) {
		steps = append(steps,
			func() { g.stepEdit(b, 1) },
			func() { g.stepRunTest(b, b.currentFailure()) },
		)
	}
	steps = append(steps,
		func() { g.stepEdit(b, 2) },
		func() { g.stepRunTest(b, nil) },
	)
	if repro && g.chance(0.6) {
		steps = append(steps, func() { g.stepRepro(b, true) })
	}
	if g.chance(0.4) {
		steps = append(steps, func() { g.stepAddTest(b) }, func() { g.stepRunTest(b, nil) })
	}
	steps = append(steps, func() {
		if g.remaining() > 40 {
			next = g.newBug(b)
		}
		g.stepFullSuite(b, next)
	})
	if g.chance(0.5) {
		steps = append(steps, g.stepDiff)
	}
	steps = append(steps, func() {
		if next != nil {
			g.stepCommit(b)
		}
	})
	for _, s := range steps {
		if g.full() {
			return next
		}
		g.extras(b)
		if g.full() {
			return next
		}
		s()
	}
	return next
}

// extras randomly puts a user interjection or a text-only turn between tool turns.
func (g *gen) extras(b *bugSite) {
	if len(g.out) < 4 || g.remaining() < 3 {
		return
	}
	if g.opts.UserInterjections && g.chance(0.07) {
		g.interject(b)
		return
	}
	if g.opts.TextOnlyTurns && g.chance(0.05) {
		g.textOnlyProgress(b)
	}
}

// wrapUp emits one closing step when there is too little room for another bug.
func (g *gen) wrapUp() {
	steps := []func(){g.stepLint, g.stepFullSuiteFinal, g.stepDiff, g.stepCleanup, g.stepTypecheck, g.stepStatus}
	s := steps[g.wrapIdx%len(steps)]
	g.wrapIdx++
	g.extras(g.lastBug())
	if !g.full() {
		s()
	}
}

func (g *gen) lastBug() *bugSite { return g.bugs[len(g.bugs)-1] }
