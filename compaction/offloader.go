package compaction

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/sync/errgroup"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
	"github.com/harness9/compaction-operator/compaction/internal/toolout"
)

// PlaceholderPrefix starts the text that replaces an offloaded tool result. Content that
// starts with it is never offloaded again (the OffloadHook may have offloaded it at source).
const PlaceholderPrefix = "[Offloaded tool result]"

// PlaceholderReadBack is the last line of a placeholder: where the full result is. A program
// that shows the placeholder to a model with a way to read it back (compaction-proxy's
// read-back URL) replaces this line, and only this line, with that way.
const PlaceholderReadBack = "[the full result is stored: read it back by its tool_call_id]"

// ReadBackPrefix starts the line that marks a tool result as an offloaded result read back
// (compaction-proxy's read-back route begins its answer with it). Reading a result back is
// never offloaded again: neither compaction nor the OffloadHook offloads a result marked so,
// when the marker starts one of its first lines (a tool may print a line of its own, such as
// the command it ran, before the output). Summarization may still summarize it.
const ReadBackPrefix = "[Offloaded tool result, read back]"

// readBackScanBytes is how far into a result IsReadBack looks for the marker.
const readBackScanBytes = 1024

// IsReadBack reports whether content is an offloaded result read back: a line among its
// first readBackScanBytes bytes starts with ReadBackPrefix.
func IsReadBack(content string) bool {
	head := content[:min(len(content), readBackScanBytes)]
	for {
		if strings.HasPrefix(head, ReadBackPrefix) {
			return true
		}
		i := strings.IndexByte(head, '\n')
		if i < 0 {
			return false
		}
		head = head[i+1:]
	}
}

// maxPreviewLineBytes and maxPreviewBytes keep a preview small even when the result is one
// huge line (minified JSON, a binary dump).
const (
	maxPreviewLineBytes = 300
	maxPreviewBytes     = 3000
)

// Offloader moves large tool results into a ToolResultStore and replaces them with a
// placeholder holding a preview and the reference to read them back (spec 3.3). It is
// idempotent per tool call ID: a result offloaded once is not written again. Safe for
// concurrent use.
type Offloader struct {
	store        ToolResultStore
	sessionID    string
	threshold    int
	previewLines int

	mu     sync.Mutex
	cache  map[string]OffloadEntry
	writes int // store writes so far, so callers see change without copying the cache
	// rendered keeps each cached entry's placeholder, so a cache hit is a lookup, not a
	// render (which counts the lines of the whole result).
	rendered map[string]string
	// measured keeps what the placeholder of a result offloadSaving measured shows, for the
	// offload that usually follows in the same compaction: rendering it reads the whole
	// result. Bounded by maxMeasured; an entry is used once.
	measured *simplelru.LRU[string, measuredShown]

	// imageThreshold is the base64 size over which an image is offloaded; 0: never.
	imageThreshold int
	// images finds the cached entry of an offloaded image by its stored form's size and CRC.
	images map[imageKey]string
	// imageGen counts changes to images; scans remembers what messages hold (scanImages).
	imageGen int
	scans    *simplelru.LRU[partsKey, imageScan]
}

// NewOffloader returns an offloader for one session. threshold is in bytes.
func NewOffloader(store ToolResultStore, sessionID string, threshold, previewLines int) *Offloader {
	return &Offloader{store: store, sessionID: sessionID, threshold: threshold, previewLines: previewLines,
		cache: map[string]OffloadEntry{}, rendered: map[string]string{}, measured: newLRU[string, measuredShown](maxMeasured),
		images: map[imageKey]string{}, scans: newLRU[partsKey, imageScan](maxImageScans)}
}

// newLRU is a least-recently-used cache of size entries (a positive constant), for use
// under the Offloader's lock.
func newLRU[K comparable, V any](size int) *simplelru.LRU[K, V] {
	c, err := simplelru.NewLRU[K, V](size, nil)
	if err != nil {
		panic(fmt.Sprintf("offloader cache of %d entries: %v", size, err)) // only for size <= 0
	}
	return c
}

// WithImages makes o offload images whose base64 data is longer than threshold bytes as
// well (0 or less: none), and returns o.
func (o *Offloader) WithImages(threshold int) *Offloader {
	o.imageThreshold = max(threshold, 0)
	return o
}

// Seed marks entries as already offloaded, for example from persisted state.
func (o *Offloader) Seed(entries map[string]OffloadEntry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, v := range entries {
		o.cache[k] = v
		if v.Kind == OffloadKindImage {
			o.images[imageKey{v.Bytes, v.CRC32C}] = k
			o.imageGen++
		}
	}
}

// Entries returns a copy of every offloaded entry.
func (o *Offloader) Entries() map[string]OffloadEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]OffloadEntry, len(o.cache))
	for k, v := range o.cache {
		out[k] = v
	}
	return out
}

// maxRefBytes is room left in the size check for the reference a store returns.
const maxRefBytes = 512

// cachedPlaceholder returns the rendered placeholder of a result offloaded before, when its
// size and CRC still match.
func (o *Offloader) cachedPlaceholder(m *Message) (string, bool) {
	if m.ToolCallID == "" || m.Role != RoleTool {
		return "", false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	entry, ok := o.cache[m.ToolCallID]
	ph, rendered := o.rendered[m.ToolCallID]
	if !ok || !rendered || !entry.matches(m.Content) {
		return "", false
	}
	return ph, true
}

// Writes is the number of results this offloader has written to the store.
func (o *Offloader) Writes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.writes
}

// Retain drops every cached entry whose ID is not in keep. The cache only has to know the
// results still in the view: one behind the watermark is never offloaded again, so pruning
// keeps the cache, and the persisted state, bounded by the window instead of growing with
// the session.
func (o *Offloader) Retain(keep map[string]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id := range o.cache {
		if !keep[id] {
			if e := o.cache[id]; e.Kind == OffloadKindImage {
				delete(o.images, imageKey{e.Bytes, e.CRC32C})
				o.imageGen++
			}
			delete(o.cache, id)
			delete(o.rendered, id)
		}
	}
}

// shouldOffload applies the spec's skip conditions (no tool call ID, at or under the
// threshold, already a placeholder, an offloaded result read back) and one of its own: the
// placeholder must be smaller than the result, which a very low threshold could otherwise
// break.
func (o *Offloader) shouldOffload(m *Message, threshold int) bool {
	if m.ToolCallID == "" || len(m.Content) <= threshold || strings.HasPrefix(m.Content, PlaceholderPrefix) || IsReadBack(m.Content) {
		return false
	}
	fixed := placeholderOverhead + len(m.ToolCallID) + maxRefBytes
	if fixed+maxShownBytes < len(m.Content) {
		return true // smaller whatever it shows: no need to render it
	}
	return fixed+len(placeholderShown(m.Content, o.previewLines)) < len(m.Content)
}

// maxShownBytes bounds what placeholderShown returns: the preview (which stops past
// maxPreviewBytes, so one line more), the failure lines (invalid UTF-8 made valid can double
// a cut line; 60 bytes a line cover the rest), the last lines, the notes of cut lines and
// the headings (TestPlaceholderBoundsHold).
const maxShownBytes = maxPreviewBytes + (1+previewTailLines)*(maxPreviewLineBytes+60) +
	toolout.KeyLines*(2*toolout.KeyLineBytes+60) + 200

// placeholderOverhead bounds the fixed text of a placeholder: labels, numbers, notes.
const placeholderOverhead = 256

// offload returns the placeholder for m, writing the content to the store unless the ID was
// offloaded before. created is false for a cache hit.
func (o *Offloader) offload(ctx context.Context, m *Message) (placeholder string, entry OffloadEntry, created bool, err error) {
	o.mu.Lock()
	cached, ok := o.cache[m.ToolCallID]
	ph, rendered := o.rendered[m.ToolCallID]
	o.mu.Unlock()
	if ok && cached.matches(m.Content) {
		if !rendered { // seeded from persisted state
			ph = Placeholder(m.ToolCallID, m.Content, cached.Ref, o.previewLines)
			o.mu.Lock()
			o.rendered[m.ToolCallID] = ph
			o.mu.Unlock()
		}
		return ph, cached, false, nil
	}
	ref, err := o.store.PutToolResult(ctx, o.sessionID, m.ToolCallID, m.Content)
	if err != nil {
		return "", OffloadEntry{}, false, fmt.Errorf("offload %s: %w", m.ToolCallID, err)
	}
	entry = OffloadEntry{ToolCallID: m.ToolCallID, Bytes: len(m.Content), CRC32C: contentCRC(m.Content), Ref: ref}
	ph = placeholderOf(m.ToolCallID, m.Content, ref, o.shownOf(m, entry.CRC32C))
	o.mu.Lock()
	o.cache[m.ToolCallID] = entry
	o.rendered[m.ToolCallID] = ph
	o.writes++
	o.mu.Unlock()
	return ph, entry, true, nil
}

// ApplyKnown returns msgs with every result and image offloaded before replaced by its
// placeholder, without writing anything: what was offloaded once is shown the same way in
// every later view, whatever the tier, so the view (and a provider's prompt cache of it)
// does not change back and forth. msgs itself is returned when nothing is replaced.
func (o *Offloader) ApplyKnown(msgs []Message) []Message {
	msgs = o.applyKnownResults(msgs)
	o.mu.Lock()
	images := len(o.images)
	o.mu.Unlock()
	if images == 0 {
		return msgs
	}
	var out []Message
	for i := range msgs {
		parts := o.scanImages(&msgs[i]).parts
		if parts == nil {
			continue
		}
		if out == nil {
			out = make([]Message, len(msgs))
			copy(out, msgs)
		}
		out[i] = msgs[i].Clone()
		out[i].ContentParts = parts
	}
	if out == nil {
		return msgs
	}
	return out
}

func (o *Offloader) applyKnownResults(msgs []Message) []Message {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.cache) == 0 {
		return msgs
	}
	var out []Message
	for i := range msgs {
		m := &msgs[i]
		if m.Role != RoleTool || m.ToolCallID == "" {
			continue
		}
		entry, ok := o.cache[m.ToolCallID]
		if !ok || !entry.matches(m.Content) {
			continue
		}
		ph, rendered := o.rendered[m.ToolCallID]
		if !rendered { // seeded from persisted state
			ph = Placeholder(m.ToolCallID, m.Content, entry.Ref, o.previewLines)
			o.rendered[m.ToolCallID] = ph
		}
		if out == nil {
			out = make([]Message, len(msgs))
			copy(out, msgs)
		}
		out[i] = m.Clone()
		out[i].Content = ph
	}
	if out == nil {
		return msgs
	}
	return out
}

// offloadSaving estimates, without writing, how many bytes offloading m now would take out
// of the view: 0 when it would not be offloaded (known already, small, or a placeholder).
func (o *Offloader) offloadSaving(m *Message) int {
	if m.ContentParts != nil {
		return o.imageSaving(m)
	}
	if m.Role != RoleTool {
		return 0
	}
	o.mu.Lock()
	_, known := o.cache[m.ToolCallID]
	o.mu.Unlock()
	if known || !o.shouldOffload(m, o.threshold) {
		return 0
	}
	// The reference is not known before the write; stores return short ones.
	shown := placeholderShown(m.Content, o.previewLines)
	o.mu.Lock()
	o.measured.Add(m.ToolCallID, measuredShown{len(m.Content), contentCRC(m.Content), shown})
	o.mu.Unlock()
	return len(m.Content) - len(placeholderOf(m.ToolCallID, m.Content, strings.Repeat("r", 96), shown))
}

// offloadSavingAtLeast is a lower bound of offloadSaving(m) for a result over the threshold
// that takes no rendering: what its content exceeds the largest placeholder it could have
// by. ok is false for a result too close to that size to tell without rendering.
func (o *Offloader) offloadSavingAtLeast(m *Message) (saving int, ok bool) {
	largest := placeholderOverhead + len(m.ToolCallID) + maxRefBytes + maxShownBytes
	if len(m.Content) <= largest {
		return 0, false
	}
	o.mu.Lock()
	_, known := o.cache[m.ToolCallID]
	o.mu.Unlock()
	if known || !o.shouldOffload(m, o.threshold) {
		return 0, true
	}
	return len(m.Content) - largest, true
}

// offloadSavings is the sum of offloadSaving over msgs, or, unless exact, a lower bound of
// it that renders only the placeholders of results close to the threshold. Those rendered
// are rendered on every core: each reads its whole result for failure lines, and a first
// Full compaction of a long session renders dozens.
func (o *Offloader) offloadSavings(msgs []Message, exact bool) int {
	saved := make([]int, len(msgs))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range msgs {
		m := &msgs[i]
		if m.ContentParts != nil || m.Role != RoleTool || len(m.Content) <= o.threshold {
			saved[i] = o.offloadSaving(m) // images (their scans are remembered), or nothing
			continue
		}
		if !exact {
			if b, ok := o.offloadSavingAtLeast(m); ok {
				saved[i] = b
				continue
			}
		}
		g.Go(func() error {
			saved[i] = o.offloadSaving(m)
			return nil
		})
	}
	_ = g.Wait() // the functions return no error
	total := 0
	for _, n := range saved {
		total += n
	}
	return total
}

// measuredShown is what a result's placeholder shows, for the result of that size and CRC.
type measuredShown struct {
	bytes int
	crc   uint32
	shown string
}

// maxMeasured bounds Offloader.measured: a head's results over the threshold.
const maxMeasured = 4096

// shownOf is what m's placeholder shows: measured by offloadSaving, or rendered now.
func (o *Offloader) shownOf(m *Message, crc uint32) string {
	o.mu.Lock()
	ms, ok := o.measured.Get(m.ToolCallID)
	o.measured.Remove(m.ToolCallID)
	o.mu.Unlock()
	if ok && ms.bytes == len(m.Content) && ms.crc == crc {
		return ms.shown
	}
	return placeholderShown(m.Content, o.previewLines)
}

// offloadConcurrency bounds the store writes one compaction runs at once: an object store
// answers each write after a network round trip, so writing a head's results one by one
// would add those round trips up.
const offloadConcurrency = 8

// OffloadMessages returns a copy of msgs where every tool result over the threshold is
// replaced by its placeholder, and every image over the image threshold too (WithImages).
// New writes are added to rec.Offloaded, in message order; a failed write keeps the
// original and is appended to rec.Error (fail-open).
func (o *Offloader) OffloadMessages(ctx context.Context, msgs []Message, rec *CompactionRecord) []Message {
	return o.offloadMessages(ctx, msgs, -1, rec)
}

// offloadMessages is OffloadMessages of msgs that start at index base of the conversation
// (-1: unknown), which image placeholders name.
func (o *Offloader) offloadMessages(ctx context.Context, msgs []Message, base int, rec *CompactionRecord) []Message {
	out := make([]Message, len(msgs))
	copy(out, msgs)
	var todo []int
	for i := range out {
		if out[i].ContentParts != nil && o.imageThreshold > 0 {
			at := -1
			if base >= 0 {
				at = base + i
			}
			parts, created, err := o.offloadImages(ctx, &out[i], at)
			if err != nil {
				rec.addError("%v", err)
			}
			if parts != nil {
				out[i] = out[i].Clone()
				out[i].ContentParts = parts
			}
			rec.Offloaded = append(rec.Offloaded, created...)
			continue
		}
		if ph, ok := o.cachedPlaceholder(&out[i]); ok { // the common case on later turns
			out[i] = out[i].Clone()
			out[i].Content = ph
			continue
		}
		if o.shouldOffload(&out[i], o.threshold) {
			todo = append(todo, i)
		}
	}
	type result struct {
		ph      string
		entry   OffloadEntry
		created bool
		err     error
	}
	results := make([]result, len(todo))
	var g errgroup.Group
	g.SetLimit(offloadConcurrency)
	for k, i := range todo {
		g.Go(func() error {
			r := &results[k]
			r.ph, r.entry, r.created, r.err = o.offload(ctx, &out[i])
			return nil // each write's error is its own result's: one failing stops no other
		})
	}
	_ = g.Wait()
	for k, i := range todo {
		r := results[k]
		if r.err != nil {
			rec.addError("%v", r.err)
			continue
		}
		out[i] = out[i].Clone()
		out[i].Content = r.ph
		if r.created {
			rec.Offloaded = append(rec.Offloaded, r.entry)
		}
	}
	return out
}

// Hook is the spec's OffloadHook: called after a tool runs and before its result enters the
// history, it offloads results longer than hookThreshold at source. It returns the message
// to put in the history (the placeholder, or m unchanged) and the entry when it offloaded.
// Unlike compaction-time offload it reports a write error, so the caller decides.
func (o *Offloader) Hook(ctx context.Context, m Message, hookThreshold int) (Message, *OffloadEntry, error) {
	if !o.shouldOffload(&m, hookThreshold) {
		return m, nil, nil
	}
	ph, entry, _, err := o.offload(ctx, &m)
	if err != nil {
		return m, nil, err
	}
	m = m.Clone()
	m.Content = ph
	return m, &entry, nil
}

// Placeholder renders the text that stands in for an offloaded result: its size, the first
// previewLines lines, the failure and error lines between them and the last lines (each
// line bounded) and the reference to read the full text back.
func Placeholder(toolCallID, content, ref string, previewLines int) string {
	return placeholderOf(toolCallID, content, ref, placeholderShown(content, previewLines))
}

// placeholderOf is Placeholder with what it shows already rendered.
func placeholderOf(toolCallID, content, ref, shown string) string {
	total := strings.Count(content, "\n")
	if !strings.HasSuffix(content, "\n") {
		total++
	}
	var b strings.Builder
	b.WriteString(PlaceholderPrefix)
	fmt.Fprintf(&b, "\ntool_call_id: %s\nsize: %d bytes, %d lines\nref: %s\n", toolCallID, len(content), total, ref)
	b.WriteString(shown)
	b.WriteString(PlaceholderReadBack)
	return b.String()
}

// placeholderShown is the part of a placeholder that shows content: the first previewLines
// lines, the failure and error lines after them (a test log names its failing tests in
// the middle) and the last previewTailLines lines, or "" when previewLines is not positive.
func placeholderShown(content string, previewLines int) string {
	if previewLines <= 0 {
		return ""
	}
	total := strings.Count(content, "\n")
	if !strings.HasSuffix(content, "\n") {
		total++
	}
	var b strings.Builder
	preview, shown, headEnd := previewOf(content, previewLines)
	fmt.Fprintf(&b, "preview (first %d of %d lines):\n%s", shown, total, preview)
	last, n, tailStart := lastLinesOf(content, min(previewTailLines, total-shown))
	if n == 0 {
		return b.String()
	}
	if lines, left := toolout.FailureLines(content, headEnd, tailStart, preview+last); len(lines) > 0 {
		if left > 0 {
			fmt.Fprintf(&b, "[...]\nfailure and error lines (%d shown, %d more not shown):\n", len(lines), left)
		} else {
			fmt.Fprintf(&b, "[...]\nfailure and error lines (%d):\n", len(lines))
		}
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	// Test summaries and the error that ends a traceback are at the end.
	fmt.Fprintf(&b, "[...]\nlast %d lines:\n%s", n, last)
	return b.String()
}

// previewTailLines is how many closing lines of an offloaded result its placeholder shows
// after the leading preview.
const previewTailLines = 3

// lastLinesOf returns the last n lines of content (a trailing newline ends the last line),
// each cut to maxPreviewLineBytes, how many it holds and the byte offset where the first of
// them starts (len(content) when it holds none). It reads only those lines.
func lastLinesOf(content string, n int) (string, int, int) {
	if n <= 0 {
		return "", 0, len(content)
	}
	rest := strings.TrimRight(content, "\n")
	start := len(rest)
	lines := make([]string, 0, n)
	for len(lines) < n && rest != "" {
		line := rest
		if i := strings.LastIndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[i+1:], rest[:i]
			start = i + 1
		} else {
			rest, start = "", 0
		}
		if len(line) > maxPreviewLineBytes {
			line = textcut.Head(line, maxPreviewLineBytes) + fmt.Sprintf(" [... %d more bytes on this line]", len(line)-maxPreviewLineBytes)
		}
		lines = append(lines, line)
	}
	var b strings.Builder
	for i := len(lines) - 1; i >= 0; i-- {
		b.WriteString(lines[i])
		b.WriteByte('\n')
	}
	return b.String(), len(lines), start
}

// previewOf returns the first n lines of content, each cut to maxPreviewLineBytes and all
// together stopping past maxPreviewBytes, how many lines it holds and the byte offset just
// after them. It reads only the lines it shows.
func previewOf(content string, n int) (string, int, int) {
	var b strings.Builder
	shown := 0
	rest := content
	for shown < n && rest != "" && b.Len() < maxPreviewBytes {
		line := rest
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		if len(line) > maxPreviewLineBytes {
			line = textcut.Head(line, maxPreviewLineBytes) + fmt.Sprintf(" [... %d more bytes on this line]", len(line)-maxPreviewLineBytes)
		}
		b.WriteString(line)
		b.WriteByte('\n')
		shown++
	}
	return b.String(), shown, len(content) - len(rest)
}
