package compaction

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/harness9/compaction-operator/compaction/internal/prose"
	"github.com/harness9/compaction-operator/compaction/internal/shellscan"
	"github.com/harness9/compaction-operator/compaction/internal/textcut"
	"github.com/harness9/compaction-operator/compaction/internal/toolargs"
	"github.com/harness9/compaction-operator/compaction/internal/toolout"
)

// extractMemo remembers what the extractive summarizer read from each message: a session's
// compactions summarize the same messages turn after turn (a Soft one the older half, the
// Full one after it all of them, a summary prepared ahead again), and reading a message's
// calls, result and sentences was almost all of a summary's cost. What it read is a pure
// function of the message's text, so it is kept by a hash of that text; the values are
// copies of short strings, never the messages themselves, so memory stays bounded by the
// number of entries whatever the messages' size.
type extractMemo struct {
	mu      sync.Mutex
	seed    maphash.Seed
	entries *simplelru.LRU[memoKey, any]
}

// maxExtractMemo bounds extractMemo's entries (a few hundred bytes each): a head of about
// 4,000 messages, half of them tool calls and results, is read from the memo whole.
const maxExtractMemo = 8192

// memoKey is a text's 64-bit hash (seeded per memo) and length, and what was read of it.
type memoKey struct {
	hash uint64
	n    int
	kind memoKind
}

type memoKind uint8

const (
	memoCall memoKind = iota
	memoRuns
	memoShort
	memoResult
	memoRead
	memoReadRuns
	memoPlan
	memoDecisions
	memoItemKey
	memoAnchorsLen
)

func newExtractMemo() *extractMemo {
	entries, err := simplelru.NewLRU[memoKey, any](maxExtractMemo, nil)
	if err != nil {
		panic(err) // only for a size that is not positive
	}
	return &extractMemo{seed: maphash.MakeSeed(), entries: entries}
}

// memoGet returns what read returns for the text of parts, from the memo when it has it. A
// nil memo reads every time. own copies what the memo keeps out of the text it was read from
// (nil: nothing to copy), so a kept value holds no request's memory.
func memoGet[V any](m *extractMemo, kind memoKind, parts []string, read func() V, own func(V) V) V {
	if m == nil {
		return read()
	}
	var h maphash.Hash
	h.SetSeed(m.seed)
	n := 0
	for _, p := range parts {
		// Each part after its length, so no two lists of parts write the same bytes (with
		// a separator, "a\x00b" alone would read as "a" then "b").
		var size [8]byte
		binary.LittleEndian.PutUint64(size[:], uint64(len(p)))
		_, _ = h.Write(size[:]) // never fails
		_, _ = h.WriteString(p)
		n += len(p) + len(size)
	}
	k := memoKey{h.Sum64(), n, kind}
	m.mu.Lock()
	v, ok := m.entries.Get(k)
	m.mu.Unlock()
	if ok {
		return v.(V)
	}
	out := read()
	if own != nil {
		out = own(out)
	}
	m.mu.Lock()
	m.entries.Add(k, out)
	m.mu.Unlock()
	return out
}

// callPlan is what a tool call's name and arguments say, before the state of the span
// (the file an editor has open, the results that follow) is applied.
type callPlan struct {
	countName string
	entries   []trailEntry // the files it reads or writes, applied when its result shows success
	swe       int          // sweNone, sweOpens (open and create: the file an editor has open) or sweEdits
	open      string
	shell     bool // a shell command: whether it is a script of several commands is known
	script    bool
}

// callName is how an anchor item names a call: short, unless the call may be SWE-agent's
// edit (editCmd, or an edit noted for its ID), then its first line and the file.
type callName struct {
	fixed     bool
	short     string
	editCmd   bool
	firstLine string
}

const (
	sweNone = iota
	sweOpens
	sweEdits
)

func (m *extractMemo) call(tc *ToolCall) callPlan {
	args := textcut.Head(tc.Function.Arguments, extractArgBytes)
	return memoGet(m, memoCall, []string{tc.Function.Name, args}, func() callPlan { return planCall(tc.Function.Name, args) }, callPlan.clone)
}

// runs is runsCommand of a call's arguments.
func (m *extractMemo) runs(tc *ToolCall) bool {
	args := textcut.Head(tc.Function.Arguments, extractArgBytes)
	return memoGet(m, memoRuns, []string{args}, func() bool { return runsCommand(args) }, nil)
}

// name is how an anchor item names a call (see callName).
func (m *extractMemo) name(tc *ToolCall) callName {
	args := textcut.Head(tc.Function.Arguments, extractArgBytes)
	return memoGet(m, memoShort, []string{tc.Function.Name, args}, func() callName { return nameCall(tc.Function.Name, args) }, func(n callName) callName {
		n.short, n.firstLine = strings.Clone(n.short), strings.Clone(n.firstLine)
		return n
	})
}

// nameCall reads a call's name and the head of its arguments (describeCall reads their
// first 400 bytes, which the head holds).
func nameCall(name, args string) callName {
	cmd, _ := toolargs.StringField(args, "command", "cmd")
	path, hasPath := toolargs.StringField(args, "path", "file_path", "filename", "file")
	var n callName
	switch {
	case hasPath:
		n.fixed, n.short = true, textcut.Clip(strings.TrimSpace(name+" "+shellscan.FirstWord(cmd)+" "+path), 140)
	case cmd == "":
		n.fixed, n.short = true, describeCall(ToolCall{Function: FunctionCall{Name: name, Arguments: args}})
	default:
		n.editCmd = shellscan.FirstWord(cmd) == sweEdit
		n.firstLine = textcut.FirstLine(cmd)
		n.short = textcut.Clip(strings.Join(shellscan.CommandLines(cmd, 3), "; "), 120)
	}
	return n
}

// planCall reads a call's name and the head of its arguments.
func planCall(name, args string) callPlan {
	p := callPlan{countName: countName(name)}
	lower := strings.ToLower(name)
	cmd, _ := toolargs.StringField(args, "command", "cmd")
	path, hasPath := toolargs.StringField(args, "path", "file_path", "filename", "file")
	switch {
	case hasPath && path != "":
		if kind, ok := editorKind(lower, cmd, path); ok {
			p.entries = append(p.entries, trailEntry{kind, path})
		}
	case cmd != "":
		p.planShell(cmd)
	}
	return p
}

// clone copies the plan's strings, which may be slices of a request's arguments: the memo
// keeps only what it read.
func (p callPlan) clone() callPlan {
	p.entries = slices.Clone(p.entries)
	for i := range p.entries {
		p.entries[i].path = strings.Clone(p.entries[i].path)
	}
	p.countName, p.open = strings.Clone(p.countName), strings.Clone(p.open)
	return p
}

// resultFacts is what a tool result's text says, before the state of the span (whether
// its call was a script, the file an edit changed) is applied.
type resultFacts struct {
	status, exitFailed bool
	footer             string // the file SWE-agent's footer says is open
	header             string // the file SWE-agent's "[File: ...]" header names
	hasHeader          bool
	listing            bool     // a directory listing
	patching           bool     // "patching file " in the first KB: the files patched are read from the first 4 KB
	patched            []string // those files
	diffShort          bool     // "diff --git a/" in the first KB
	diffLong           bool     // in the first 4 KB
	diffs              []string // the files the diff names (when diffLong)
}

func (m *extractMemo) result(content string) resultFacts {
	return memoGet(m, memoResult, []string{content}, func() resultFacts { return readResult(content) }, resultFacts.clone)
}

func readResult(content string) resultFacts {
	f := resultFacts{status: toolout.StatusFailed(content), exitFailed: toolout.ExitFailed(content)}
	if tail := textcut.Tail(content, 512); strings.Contains(tail, "(Open file: ") {
		if o := sweOpenFile.FindStringSubmatch(tail); o != nil && o[1] != "n/a" {
			f.footer = o[1]
		}
	}
	if h := sweFileHeader.FindStringSubmatch(textcut.Head(content, 1024)); h != nil {
		f.header, f.hasHeader = h[1], true
	}
	f.listing = strings.Contains(toolout.StatusLine(content), "files and directories")
	head, long := textcut.Head(content, 1024), textcut.Head(content, 4096)
	if f.patching = strings.Contains(head, "patching file "); f.patching {
		for _, p := range patchedFile.FindAllStringSubmatch(long, 20) {
			f.patched = append(f.patched, p[1])
		}
	}
	// head is a prefix of long: the first "diff --git a/" of long is in head or none is.
	const diffMark = "diff --git a/"
	d := strings.Index(long, diffMark)
	f.diffShort, f.diffLong = d >= 0 && d+len(diffMark) <= len(head), d >= 0
	if f.diffLong {
		f.diffs = toolout.DiffFiles(textcut.Head(content, extractDiffBytes), 200)
	}
	return f
}

// clone copies the facts' strings out of the result's text.
func (f resultFacts) clone() resultFacts {
	f.footer, f.header = strings.Clone(f.footer), strings.Clone(f.header)
	f.patched, f.diffs = cloneStrings(f.patched), cloneStrings(f.diffs)
	return f
}

// readOf is toolout.Read of a result as the summary reads it: an offloaded one's preview.
func (m *extractMemo) readOf(content string, runs bool) toolout.Result {
	kind := memoRead
	if runs {
		kind = memoReadRuns
	}
	return memoGet(m, kind, []string{content}, func() toolout.Result {
		offloaded := strings.HasPrefix(content, PlaceholderPrefix)
		text := content
		if offloaded {
			// Only the preview's first lines are here: an exit code or an error line in
			// them still tells how the command went; the rest is read back by ID.
			text = placeholderPreview(content)
		}
		r := toolout.Read(text, runs)
		if offloaded {
			r.Tests, r.Last = "", ""
		}
		return r
	}, func(r toolout.Result) toolout.Result {
		r.Tests, r.Err, r.Last = strings.Clone(r.Tests), strings.Clone(r.Err), strings.Clone(r.Last)
		r.Failing = cloneStrings(r.Failing)
		return r
	})
}

// plan is prose.StatedPlan of an assistant message's cleaned text.
func (m *extractMemo) plan(content string) string {
	return memoGet(m, memoPlan, []string{content}, func() string { return prose.StatedPlan(prose.CleanAssistant(content)) }, strings.Clone)
}

// decisions is prose.DecisionSentences of an assistant message's cleaned text.
func (m *extractMemo) decisions(content string) []string {
	return memoGet(m, memoDecisions, []string{content}, func() []string { return prose.DecisionSentences(prose.CleanAssistant(content)) }, cloneStrings)
}

func cloneStrings(ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.Clone(s)
	}
	return out
}

// itemKey is itemKey(t, it); the key is a fresh string, not part of it.
func (m *extractMemo) itemKey(t AnchorType, it string) string {
	return memoGet(m, memoItemKey, []string{string(t), it}, func() string { return itemKey(t, it) }, nil)
}

// anchorsLen is the length of anchors as a summary prompt shows them: formatted after a
// merge with nothing.
func (m *extractMemo) anchorsLen(anchors []Anchor) int {
	parts := make([]string, 0, 2*len(anchors))
	for _, a := range anchors {
		parts = append(parts, string(a.Type), a.Content)
	}
	return memoGet(m, memoAnchorsLen, parts, func() int { return len(formatAnchors(m.mergeAnchors(nil, anchors))) }, nil)
}
