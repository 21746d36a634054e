package compaction

import (
	"context"
	"encoding/json"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/prose"
	"github.com/harness9/compaction-operator/compaction/internal/shellscan"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
	"github.com/harness9/compaction-operator/compaction/internal/toolargs"
)

// ExtractiveSummarizer is the default summarizer: deterministic, no network, no model. It
// builds the five anchors and a prose timeline from the messages themselves, so everything
// works, and is testable, with no LLM:
//   - user_intent: the task (the last user message before the first assistant message, so
//     a demonstration shown before it is skipped) as its title and key requirement lines,
//     then each later user instruction, a repeated one once;
//   - execution_progress: the files read, edited, created and deleted (from the tool calls'
//     arguments and the diffs the tools printed), the tool calls made and the outcome of
//     the commands that ran something (exit code, test counts, error line);
//   - key_decision: sentences that state a choice or a reason, not "Let's run the test:";
//   - tried_solution: what failed, with the error line the tool printed;
//   - next_step: the assistant's latest stated plan.
//
// It describes only the span it is given: the engine merges the result into the session's
// anchors with mergeAnchors. The previous summary's timeline is carried over, bounded.
//
// The zero value reads every message on every call; the compactor's own remembers what it
// read of each message (see extractMemo), as the session's summaries read most of them again.
type ExtractiveSummarizer struct {
	memo *extractMemo
}

// Name is "extractive".
func (ExtractiveSummarizer) Name() string { return "extractive" }

// Lengths and counts the extractive summary keeps.
const (
	extractLineChars   = 160      // a line of the timeline
	extractItemChars   = 240      // an anchor item
	extractShortTask   = 300      // a task this short is kept whole
	extractTaskChars   = 650      // the task's title and requirement lines
	extractInstrChars  = 350      // the harness's instructions after the problem statement
	extractFollowChars = 200      // a later user instruction
	extractMaxItems    = 6        // outcomes, failures and decisions per span of up to extractItemsPer*6 messages
	extractItemsPer    = 8        // a longer span keeps one more of each per this many messages
	extractMaxItemsCap = 15       // and at most this many
	extractArgBytes    = 4 << 10  // the head of a tool call's arguments that is read
	extractTextBytes   = 16 << 10 // the head of a message's text that is read
	extractDiffBytes   = 64 << 10 // the head of a diff that is read for file names
	extractMaxResults  = 150      // tool results read backwards for outcomes and failures
)

// Summarize renders the anchors and summary in the documented format.
func (e ExtractiveSummarizer) Summarize(ctx context.Context, req SummaryRequest) (string, error) {
	r, err := e.SummarizeResult(ctx, req)
	if err != nil {
		return "", err
	}
	return FormatSummary(r.Anchors, r.Prose), nil
}

// SummarizeResult answers the anchors and prose as values: the engine takes them as they
// are, with nothing rendered to text and parsed back.
func (e ExtractiveSummarizer) SummarizeResult(ctx context.Context, req SummaryRequest) (SummaryResult, error) {
	if err := ctx.Err(); err != nil {
		return SummaryResult{}, err
	}
	x := newExtraction(&req, e.memo)
	x.read(len(req.Messages) >= concurrentSpan && runtime.GOMAXPROCS(0) > 1)
	return x.result(), nil
}

// result is what the extraction read, as the summarizer answers it. The merge with nothing
// bounds and de-duplicates the items exactly as the engine's merge will, so the text
// Summarize writes parses back to these values.
func (x *extraction) result() SummaryResult {
	return SummaryResult{
		Anchors: x.memo.mergeAnchors(nil, x.anchors()),
		Prose:   strings.TrimSpace(extractiveProse(x.req, x.nUser, x.nAsst, x.nTool, x.nOffload)),
	}
}

// extraction is the state of one Summarize call.
type extraction struct {
	req       *SummaryRequest
	memo      *extractMemo
	calls     map[string]*ToolCall
	editFile  map[string]string // SWE-agent "edit N:M" calls: the file they edited
	pending   map[string][]trailEntry
	scripts   map[string]bool // calls that ran several commands: a failing exit code is the last one's
	counts    callCounts
	trail     fileTrail
	openFile  string // the file a SWE-agent-style editor has open
	task      string
	preamble  []string // short user messages before the task: context, or the task itself
	followUps []string
	nUser     int
	nAsst     int
	nTool     int
	nOffload  int
	outcomes  []string
	failures  []string
	decisions []string
	nextStep  string
	maxItems  int // outcomes, failures and decisions kept

	// What backward found, named by name once forward is done: a SWE-agent edit is named
	// after the file forward saw open.
	outcomeCalls []callItem
	failureCalls []callItem
	lastCalls    []*ToolCall // the last call made, and earlier ones while it may have no name
	lastNamed    bool        // the latest of lastCalls has a name
	latest       string      // the last thing the assistant said
}

// callItem is an outcome or a failure of a call, before the call is named.
type callItem struct {
	tc   *ToolCall
	text string // what follows the call's name
}

type trailEntry struct {
	kind int
	path string
}

func newExtraction(req *SummaryRequest, memo *extractMemo) *extraction {
	// One summary of a long span (a Full compaction) keeps as much as several short ones would.
	maxItems := min(max(extractMaxItems, len(req.Messages)/extractItemsPer), extractMaxItemsCap)
	nCalls := 0
	for i := range req.Messages {
		nCalls += len(req.Messages[i].ToolCalls)
	}
	// Filled here, not by forward: backward looks up the call of each result it reads.
	calls := make(map[string]*ToolCall, nCalls)
	for i := range req.Messages {
		if m := &req.Messages[i]; m.Role == RoleAssistant {
			for j := range m.ToolCalls {
				calls[m.ToolCalls[j].ID] = &m.ToolCalls[j]
			}
		}
	}
	return &extraction{req: req, memo: memo, maxItems: maxItems, calls: calls, editFile: map[string]string{}, pending: map[string][]trailEntry{}, scripts: map[string]bool{}}
}

// concurrentSpan is the span from which forward and backward run on two cores: each then
// reads hundreds of microseconds' worth of messages, far more than a goroutine costs.
const concurrentSpan = 64

// read runs forward and backward, which share only what newExtraction prepared, then names
// the calls backward found. A first Full compaction of a long session reads a thousand
// messages both ways: concurrently, on two cores, they take the time of one.
func (x *extraction) read(concurrent bool) {
	if !concurrent {
		x.forward()
		x.backward()
	} else {
		done := make(chan struct{})
		go func() {
			defer close(done)
			x.backward()
		}()
		x.forward()
		<-done
	}
	x.name()
}

// forward reads every message once: counts, the task and later instructions, the tool
// calls and the files they touched. Per message it reads at most a bounded head of the text,
// arguments and results (a diff's file names excepted), so a span costs what its number of
// messages does, not its bytes.
func (x *extraction) forward() {
	msgs := x.req.Messages
	taskKnown := false
	for _, a := range x.req.PreviousAnchors {
		if a.Type == AnchorUserIntent && a.Available() {
			taskKnown = true // the task is in an earlier span: every user message here is later
		}
	}
	firstAsst := len(msgs)
	for i := range msgs {
		if msgs[i].Role == RoleAssistant {
			firstAsst = i
			break
		}
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case RoleUser:
			x.nUser++
			text := messageText(m)
			if strings.TrimSpace(text) == "" || strings.HasPrefix(text, CompactionHeader) {
				continue
			}
			if !taskKnown && i < firstAsst {
				// The last one before the first answer: a demonstration comes first. A short
				// message before the task is kept too.
				if x.task != "" && len(x.task) <= extractShortTask {
					x.preamble = append(x.preamble, textcut.OneLine(x.task))
				}
				x.task = text
				continue
			}
			if it, ok := followUpItem(text); ok {
				x.followUps = append(x.followUps, it)
			}
		case RoleAssistant:
			x.nAsst++
			for j := range m.ToolCalls {
				x.noteCall(&m.ToolCalls[j])
			}
		case RoleTool:
			x.nTool++
			if strings.HasPrefix(m.Content, PlaceholderPrefix) {
				x.nOffload++
			}
			x.noteResult(m)
		}
	}
	for _, id := range sortedKeys(x.pending) { // calls whose result is not in the span
		for _, e := range x.pending[id] {
			x.addTrail(e)
		}
	}
}

// messageText is a message's text: its content, or the text parts of a multimodal one.
func messageText(m *Message) string {
	if m.Content != "" || len(m.ContentParts) == 0 {
		return m.Content
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.ContentParts, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Text != "" {
			b.WriteString(p.Text + "\n")
		}
	}
	return b.String()
}

// followUpItem is a later user message as a user_intent item. A short question ("Any
// progress?") states no instruction and is skipped.
func followUpItem(text string) (string, bool) {
	t := textcut.OneLine(textcut.Head(text, 4*extractFollowChars))
	if len(t) < 40 && strings.HasSuffix(t, "?") {
		return "", false
	}
	return "later: " + textcut.Clip(t, extractFollowChars), t != ""
}

func countName(name string) string {
	name = strings.Map(func(r rune) rune {
		if r == '_' || r == '.' || r == ':' || r == '/' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)
	if name == "" {
		return "unnamed"
	}
	return name
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (x *extraction) addTrail(e trailEntry) {
	if e.path == "" || len(e.path) > 200 || strings.ContainsAny(e.path, "\n;,") {
		return // the trail's item could not be read back
	}
	if e.kind == trailCreated && (x.trail.has(trailRead, e.path) || x.trail.has(trailEdited, e.path)) {
		e.kind = trailEdited // written over a file the agent had seen: an edit
	}
	x.trail.add(e.kind, e.path)
}

// noteCall counts a tool call and records the files it reads or writes, applied when its
// result shows that it did not fail.
func (x *extraction) noteCall(tc *ToolCall) {
	p := x.memo.call(tc)
	x.counts.add(p.countName, 1)
	if len(p.entries) > 0 {
		x.pending[tc.ID] = append(x.pending[tc.ID], p.entries...)
	}
	switch p.swe {
	case sweOpens:
		x.openFile = p.open
	case sweEdits:
		x.editFile[tc.ID] = x.openFile // the result may name the file: see noteResult
	}
	if p.shell {
		x.scripts[tc.ID] = p.script
	}
}

// editorKind classifies a file tool's call (str_replace_editor and the like) by its name
// and sub-command.
func editorKind(name, sub, path string) (int, bool) {
	op := strings.ToLower(sub) + " " + name
	switch {
	case strings.Contains(op, "create"), strings.Contains(op, "write"):
		return trailCreated, true
	case strings.Contains(op, "view"), strings.Contains(op, "read"), strings.Contains(op, "open"), strings.Contains(op, "cat"), strings.Contains(op, "show"):
		base := path[strings.LastIndexByte(path, '/')+1:]
		return trailRead, strings.Contains(base, ".") // a directory listing is no file read
	case strings.Contains(op, "replace"), strings.Contains(op, "insert"), strings.Contains(op, "edit"), strings.Contains(op, "patch"), strings.Contains(op, "append"), strings.Contains(op, "update"), strings.Contains(op, "modify"):
		return trailEdited, true
	}
	return 0, false
}

// readVerbs print files named as arguments.
var readVerbs = map[string]bool{"cat": true, "nl": true, "head": true, "tail": true, "less": true, "more": true, "bat": true}

// planShell reads a shell command for the files it reads and writes: cat/nl/head/tail and
// sed -n read, sed -i edits, redirections write, rm deletes, a Python script given inline
// edits what it open()s for writing; and the SWE-agent commands open, create and edit.
func (p *callPlan) planShell(cmd string) {
	first, _, _ := strings.Cut(cmd, "\n")
	if w := strings.Fields(first); len(w) > 0 {
		switch w[0] {
		case sweOpen, sweCreate:
			if len(w) > 1 {
				kind := trailRead
				if w[0] == sweCreate {
					kind = trailCreated
				}
				p.entries = append(p.entries, trailEntry{kind, shellscan.Unquote(w[1])})
				p.swe, p.open = sweOpens, shellscan.Unquote(w[1])
			}
			return
		case sweEdit:
			p.swe = sweEdits
			return
		}
	}
	commands := 0
	for _, l := range shellscan.Lines(cmd, 200) {
		for _, sc := range shellscan.SplitSimple(l.Text) {
			if w := shellscan.Words(sc); len(w) > 0 {
				p.noteSimple(w, l.Body)
				commands++
			}
		}
	}
	p.shell, p.script = true, commands > 1
}

// SWE-agent's file commands that open, create and edit a file.
const (
	sweOpen   = "open"
	sweCreate = "create"
	sweEdit   = "edit"
)

func (p *callPlan) noteSimple(words []string, body string) {
	words = shellscan.StripCommandPrefix(words)
	if len(words) == 0 {
		return
	}
	verb := words[0][strings.LastIndexByte(words[0], '/')+1:]
	args, script := p.noteRedirects(words)
	switch {
	case readVerbs[verb]:
		p.addFiles(trailRead, shellscan.NonOptions(args))
	case verb == "sed":
		inPlace, files := shellscan.SedFiles(args)
		if inPlace {
			p.addFiles(trailEdited, files)
		} else {
			p.addFiles(trailRead, files)
		}
	case verb == "rm":
		p.addFiles(trailDeleted, shellscan.NonOptions(args))
	case verb == "touch":
		p.addFiles(trailCreated, shellscan.NonOptions(args))
	case strings.HasPrefix(verb, "python"):
		code := body
		for i, a := range args {
			if a == "-c" && i+1 < len(args) {
				code = args[i+1]
			}
		}
		p.notePyWrites(code)
	}
	if script && body != "" && !strings.HasPrefix(verb, "python") {
		p.notePyWrites(body)
	}
}

// noteRedirects notes the files a simple command's output redirections write, and returns
// its other arguments and whether it writes a Python script (from a heredoc: what that
// script writes is edited when it runs).
func (p *callPlan) noteRedirects(words []string) (args []string, script bool) {
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case w == ">" || w == ">>" || w == "1>" || w == "1>>":
			if i+1 < len(words) {
				p.noteWrite(words[i+1])
				script = script || strings.HasSuffix(words[i+1], ".py")
				i++
			}
		case strings.HasPrefix(w, ">") || strings.HasPrefix(w, "1>"):
			p.noteWrite(strings.TrimLeft(w, "1>"))
			script = script || strings.HasSuffix(w, ".py")
		case w == "<" || w == "<<" || w == "<<-" || w == "2>" || w == "2>>" || w == "&>":
			i++
		case strings.HasPrefix(w, "<") || strings.HasPrefix(w, "2>") || strings.HasPrefix(w, "&>"):
		default:
			args = append(args, w)
		}
	}
	return args, script
}

// addFiles queues the files that look like paths as kind, pending call id's result.
func (p *callPlan) addFiles(kind int, files []string) {
	for _, f := range files {
		if shellscan.LooksLikePath(f) {
			p.entries = append(p.entries, trailEntry{kind, f})
		}
	}
}

// notePyWrites notes the files Python code opens for writing as edited.
func (p *callPlan) notePyWrites(code string) {
	p.addFiles(trailEdited, shellscan.PythonWrites(code))
}

func (p *callPlan) noteWrite(target string) {
	if target == "" || target == "/dev/null" || strings.HasPrefix(target, "&") || !shellscan.LooksLikePath(target) {
		return
	}
	p.entries = append(p.entries, trailEntry{trailCreated, target})
}

var (
	sweFileHeader = regexp.MustCompile(`^\[File: ([^\n]+?) \(\d+ lines total\)\]`)
	sweOpenFile   = regexp.MustCompile(`\(Open file: ([^\n)]+)\)`)
	patchedFile   = regexp.MustCompile(`(?m)^patching file '?([^'\r\n]+?)'?\r?$`)
)

// noteResult applies the pending trail entries of the call a result answers, unless the
// result says the call failed, and reads the files a diff or patch in it names.
func (x *extraction) noteResult(m *Message) {
	f := x.memo.result(m.Content)
	failed := f.status || f.exitFailed && !x.scripts[m.ToolCallID]
	if file, ok := x.editFile[m.ToolCallID]; ok {
		// The file an edit changed: the result's header names it, else its footer (the
		// file open when it ran), else the file opened last in this span.
		if f.hasHeader {
			file = f.header
		} else if f.footer != "" {
			file = f.footer
		}
		x.editFile[m.ToolCallID] = file
		if file != "" && !failed {
			x.addTrail(trailEntry{trailEdited, file})
		}
	}
	for _, e := range x.pending[m.ToolCallID] {
		if e.kind == trailRead && !f.status && !f.listing || e.kind != trailRead && !failed {
			x.addTrail(e)
		}
	}
	delete(x.pending, m.ToolCallID)
	if f.footer != "" {
		x.openFile = f.footer
	}
	// A patch's files are read from the first 4 KB, and then so is a diff's header.
	diff := f.diffShort
	if !failed && f.patching {
		for _, p := range f.patched {
			x.addTrail(trailEntry{trailEdited, p})
		}
		diff = f.diffLong
	}
	if diff {
		for _, d := range f.diffs {
			x.addTrail(trailEntry{trailEdited, d})
		}
	}
}

// backward reads the span from its end for the latest outcomes, failures, decisions and
// plan, and stops once it has them (or has read extractMaxResults results): a long span
// costs no more than a short one. It may run beside forward (see read), so it reads only
// what newExtraction prepared and writes only its own fields; name finishes its items.
func (x *extraction) backward() {
	msgs := x.req.Messages
	seenFail := map[string]bool{}
	planSearch := 10 // assistant messages searched for the latest stated plan
	results, answers := 0, 0
	for i := len(msgs) - 1; i >= 0; i-- {
		resultsDone := results >= extractMaxResults || len(x.outcomeCalls) >= x.maxItems && len(x.failureCalls) >= x.maxItems
		answersDone := answers >= extractMaxResults || len(x.decisions) >= decisionPool*x.maxItems && planSearch == 0
		if resultsDone && answersDone {
			break
		}
		m := &msgs[i]
		switch m.Role {
		case RoleAssistant:
			if len(m.ToolCalls) > 0 && !x.lastNamed {
				tc := &m.ToolCalls[len(m.ToolCalls)-1]
				x.lastCalls = append(x.lastCalls, tc)
				x.lastNamed = hasName(x.memo.name(tc))
			}
			if answersDone {
				continue
			}
			answers++
			if x.latest == "" {
				x.latest = prose.CleanAssistant(m.Content)
			}
			if planSearch > 0 {
				planSearch--
				if p := x.memo.plan(m.Content); p != "" {
					x.nextStep, planSearch = p, 0
				}
			}
			if len(x.decisions) < decisionPool*x.maxItems {
				ds := x.memo.decisions(m.Content)
				for j := len(ds) - 1; j >= 0 && len(x.decisions) < decisionPool*x.maxItems; j-- {
					x.decisions = append(x.decisions, ds[j])
				}
			}
		case RoleTool:
			if resultsDone {
				continue
			}
			results++
			tc := x.calls[m.ToolCallID]
			if tc == nil {
				continue
			}
			runs := x.memo.runs(tc)
			offloaded := ""
			if strings.HasPrefix(m.Content, PlaceholderPrefix) {
				offloaded = " (full result: " + m.ToolCallID + ")"
			}
			r := x.memo.readOf(m.Content, runs)
			if len(x.outcomeCalls) < x.maxItems && runs {
				if o := r.Outcome(); o != "" {
					x.outcomeCalls = append(x.outcomeCalls, callItem{tc, " -> " + o + offloaded})
				}
			}
			if len(x.failureCalls) < x.maxItems {
				if f := r.Failure(runs); f != "" && !seenFail[strings.ToLower(f)] {
					seenFail[strings.ToLower(f)] = true
					x.failureCalls = append(x.failureCalls, callItem{tc, " -> " + f + offloaded})
				}
			}
		}
	}
	x.decisions = prose.PickDecisions(x.decisions, x.maxItems)
	slices.Reverse(x.decisions)
	if ss := prose.SplitSentences(x.latest); x.nextStep == "" && len(ss) > 0 {
		x.nextStep = textcut.Clip(textcut.OneLine(ss[len(ss)-1]), 320) // no plan stated: what was said last
	}
}

// hasName reports whether shortCall names a call of this callName whatever forward finds:
// the last action is the latest call with a name (one that only runs a comment has none),
// and only a call without a short name may be named after the file forward saw open.
func hasName(n callName) bool { return n.short != "" || n.editCmd }

// name names the calls of backward's outcomes and failures, latest last, and adds the last
// call with a name to the next step.
func (x *extraction) name() {
	for i := len(x.outcomeCalls) - 1; i >= 0; i-- {
		it := x.outcomeCalls[i]
		x.outcomes = append(x.outcomes, textcut.Clip(x.shortCall(it.tc), 120)+it.text)
	}
	for i := len(x.failureCalls) - 1; i >= 0; i-- {
		it := x.failureCalls[i]
		x.failures = append(x.failures, textcut.Clip(x.shortCall(it.tc), 120)+it.text)
	}
	lastAction := ""
	for _, tc := range x.lastCalls {
		if lastAction = x.shortCall(tc); lastAction != "" {
			break
		}
	}
	switch {
	case x.nextStep != "" && lastAction != "":
		x.nextStep = textcut.Clip(x.nextStep, 320) + " (last action: " + textcut.Clip(lastAction, 100) + ")"
	case lastAction != "":
		x.nextStep = "last action: " + textcut.Clip(lastAction, 120)
	}
}

// placeholderPreview is the preview an offloaded result's placeholder shows.
func placeholderPreview(ph string) string {
	_, preview, ok := strings.Cut(ph, " lines):\n")
	if !ok {
		return ""
	}
	preview, _, _ = strings.Cut(preview, "[the full result is stored")
	return preview
}

// anchors are the span's items per anchor type, as anchor contents.
func (x *extraction) anchors() []Anchor {
	var intent []string
	intent = append(intent, x.preamble...)
	if x.task != "" {
		intent = append(intent, taskItems(x.task)...)
	}
	intent = append(intent, x.followUps...)
	var progress []string
	if !x.trail.empty() {
		progress = append(progress, x.trail.String())
	}
	if len(x.counts.names) > 0 {
		progress = append(progress, x.counts.String())
	}
	progress = append(progress, x.outcomes...)
	var next []string
	if x.nextStep != "" {
		next = []string{x.nextStep}
	}
	return []Anchor{
		{AnchorUserIntent, itemsContent(intent)},
		{AnchorExecutionProgress, itemsContent(progress)},
		{AnchorKeyDecision, itemsContent(x.decisions)},
		{AnchorTriedSolution, itemsContent(x.failures)},
		{AnchorNextStep, itemsContent(next)},
	}
}

func itemsContent(items []string) string {
	if len(items) == 0 {
		return notAvailable
	}
	return renderItems(items)
}

// shortCall names a call for an anchor item: a shell script's first commands without their
// "cd DIR &&" and heredoc bodies, an editor's sub-command and path, otherwise
// name(arguments).
func (x *extraction) shortCall(tc *ToolCall) string {
	n := x.memo.name(tc)
	if n.fixed {
		return n.short
	}
	if f := x.editFile[tc.ID]; f != "" || n.editCmd {
		return textcut.Clip(n.firstLine+" ("+f+")", 120) // SWE-agent's edit: the rest is the new text
	}
	return n.short
}

// Verbs that only look: their outcome is no progress worth listing.
var lookVerbs = map[string]bool{
	"cat": true, "nl": true, "head": true, "tail": true, "less": true, "more": true, "bat": true, "ls": true, "find": true,
	"grep": true, "rg": true, "ag": true, "wc": true, "pwd": true, "echo": true, "printf": true, "tree": true, "file": true,
	"stat": true, "du": true, "which": true, "type": true, "cd": true, "git": true, "diff": true, "awk": true, "sort": true,
	"uniq": true, "xargs": true, "sed": true, sweOpen: true, "goto": true, "scroll_down": true, "scroll_up": true,
	"search_file": true, "search_dir": true, "find_file": true, "submit": true, sweCreate: true, sweEdit: true,
	"rm": true, "mv": true, "cp": true, "mkdir": true, "touch": true, "chmod": true,
}

// sweCommands are SWE-agent's own file commands, typed into its bash tool.
var sweCommands = map[string]bool{sweOpen: true, sweCreate: true, sweEdit: true, "goto": true, "scroll_down": true, "scroll_up": true,
	"search_file": true, "search_dir": true, "find_file": true, "submit": true}

// runsCommand reports whether a call (the head of its arguments) ran something (a script, tests, a build), not only looked at
// or wrote files.
func runsCommand(args string) bool {
	if _, ok := toolargs.StringField(args, "path", "file_path", "filename", "file"); ok {
		return false
	}
	cmd, ok := toolargs.StringField(args, "command", "cmd", "code")
	if !ok || sweCommands[shellscan.FirstWord(cmd)] {
		return false // SWE-agent's "edit N:M" is followed by the new text, not commands
	}
	for _, line := range shellscan.CommandLines(cmd, 10) {
		for _, sc := range shellscan.SplitSimple(line) {
			w := shellscan.Words(sc)
			for len(w) > 0 && strings.Contains(w[0], "=") && !strings.HasPrefix(w[0], "-") {
				w = w[1:]
			}
			if len(w) > 0 && !lookVerbs[w[0][strings.LastIndexByte(w[0], '/')+1:]] {
				return true
			}
		}
	}
	return false
}

// decisionPool is how many times the kept decisions are read from a span's newest answers:
// the strong ones among them (a change of approach, the located cause) are kept first.
const decisionPool = 4
