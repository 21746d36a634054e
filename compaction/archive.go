package compaction

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// This file holds the archive: what the watermark passes (the messages a summary, or an
// Emergency truncation, replaced) is written to the session's ArchiveStore, one object per
// compaction, and read or searched back by index (ScanArchive).

// HistoryReadBack is the last line of a compaction message when the session keeps an
// archive: the summarized messages can be searched and read back (the compaction API's
// history routes). A program that knows how to reach them (the proxy's loopback history
// route) replaces it with its own instructions.
const HistoryReadBack = "[the messages summarized here are archived: search them by their words, or read them back by index, through the session's history route]"

// archiveSpan writes the raw messages the watermark passed in this compaction, as the agent
// sent them with the results offloaded so far shown as their placeholders (what the
// summarizer read; large results are in the tool-result store already, not stored twice),
// and names the object in rec. Fail-open like an offload: a failed write is named in
// rec.Error and the compaction goes on. Soft followed by Full in one turn writes one object
// for both spans. Only turns that move the watermark get here: None and Warn never do.
func (c *ProgressiveCompactor) archiveSpan(ctx context.Context, t *turn, rec *CompactionRecord) {
	if c.archive == nil || c.cfg.RawHistory {
		return
	}
	from, to := t.base, c.state.Watermark
	n := to - from
	if n <= 0 || n > len(t.rest) {
		return // not a span of this turn's messages (cannot happen: advance moves within t.rest)
	}
	body, err := c.archiveEncoding.take(from, to)
	if body == nil && err == nil {
		body, err = appendJSONL(c.shown(t.rest[:n]))
	}
	if err != nil {
		rec.addError("archive of messages %d-%d: %v", from, to, err)
		return
	}
	ref, err := c.archive.PutArchive(ctx, c.sessionID, from, to, body)
	if err != nil {
		rec.addError("archive of messages %d-%d: %v", from, to, err)
		return
	}
	rec.Archive, rec.ArchiveFrom = ref, from
}

// encodeAhead starts encoding the archive of t.rest[:n], the span summarizeSpan is about
// to summarize, beside the summary: on a second core, a long span's archive (megabytes of
// JSON) is ready when archiveSpan needs it instead of after the summary. Nothing the
// summary does changes what the span shows (its results are offloaded before).
func (c *ProgressiveCompactor) encodeAhead(t *turn, n int) {
	if c.archive == nil || c.cfg.RawHistory || n <= 0 || n > len(t.rest) {
		return
	}
	c.archiveEncoding.wait() // a span of the same turn before it (Soft, then Full): not archived alone
	span := c.shown(t.rest[:n])
	e := &c.archiveEncoding
	e.from, e.to, e.done = t.base, t.base+n, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		e.body, e.err = appendJSONL(span)
	}(e.done)
}

// archiveEncoding is an archive encoded ahead of archiveSpan (see encodeAhead).
type archiveEncoding struct {
	from, to int
	done     chan struct{} // closed when body and err are set; nil when none was started
	body     []byte
	err      error
}

// take returns the encoding of messages [from, to) when one was started for exactly them
// (nil and nil otherwise), and forgets it.
func (e *archiveEncoding) take(from, to int) ([]byte, error) {
	if e.done == nil {
		return nil, nil
	}
	<-e.done
	match := e.from == from && e.to == to
	body, err := e.body, e.err
	*e = archiveEncoding{}
	if !match {
		return nil, nil
	}
	return body, err
}

// wait waits for an encoding started ahead, so that no turn ends with one still running,
// and forgets it.
func (e *archiveEncoding) wait() {
	if e.done != nil {
		<-e.done
	}
	*e = archiveEncoding{}
}

// ArchivedMessage is one message read back from a session's archive.
type ArchivedMessage struct {
	// Index is the message's index in the agent's raw history.
	Index int
	// Span is the archive it was read from.
	Span    ArchiveSpan
	Message Message
	// Raw is the message's JSON as stored; valid only while the callback runs.
	Raw []byte
}

// HistoryQuery says which archived messages ScanArchive reads.
type HistoryQuery struct {
	// From and To bound the raw-history indices: From <= index < To; To <= 0 is no bound.
	From, To int
	// Match, when set, keeps only the messages it matches.
	Match *HistoryMatcher
	// MaxScanBytes stops the scan once it has read this many bytes of archives (0: no
	// bound), so one search costs at most that much storage reading whatever the
	// session's size; ScanResult.Next says where to go on.
	MaxScanBytes int64
	// MaxLineBytes bounds one archived message (default 32 MiB): a longer
	// one is an error wrapping ErrObjectTooLarge, read no further than that.
	MaxLineBytes int
}

// defaultMaxArchiveLine bounds one archived message when HistoryQuery.MaxLineBytes is 0: a
// message is part of one request, which no API or proxy takes larger than 32 MiB.
const defaultMaxArchiveLine = 32 << 20

// ScanResult says how far ScanArchive got.
type ScanResult struct {
	// Next is the index after the last message the scan read: From of a next scan that goes
	// on where this one stopped.
	Next int
	// Stopped is set when the scan ended before the end of the range: the callback asked
	// (ErrStopListing) or MaxScanBytes was reached.
	Stopped bool
	// ScannedBytes is how much archive data it read.
	ScannedBytes int64
}

// ScanArchive calls fn, in index order, for each archived message of the session within
// q's range (and matched by q.Match). Each index is read once: archives overlap only after a
// reset (the session compacted again from an earlier watermark), and the first archive
// listed (the lowest From, then the lowest To) gives the index's message. fn returning
// ErrStopListing ends the scan without an error and without taking that message (Next is its
// index); any other error of fn is returned. Memory is bounded by one message
// (q.MaxLineBytes), whatever the archive's size.
func ScanArchive(ctx context.Context, store ArchiveStore, sessionID string, q HistoryQuery, fn func(*ArchivedMessage) error) (ScanResult, error) {
	res := ScanResult{Next: max(q.From, 0)}
	if store == nil {
		return res, errors.New("the session's store keeps no archive")
	}
	maxLine := q.MaxLineBytes
	if maxLine <= 0 {
		maxLine = defaultMaxArchiveLine
	}
	upper := q.To
	if upper <= 0 {
		upper = MaxArchiveIndex
	}
	// next: the lowest index not read yet. Archives come by From, so an index below it was
	// read from an earlier one (or is below the range).
	next := res.Next
	err := store.ListArchives(ctx, sessionID, func(span ArchiveSpan) error {
		if span.From >= upper || next >= upper {
			return ErrStopListing // every archive after this one starts later still
		}
		if span.To <= next {
			return nil
		}
		if q.MaxScanBytes > 0 && res.ScannedBytes >= q.MaxScanBytes {
			res.Stopped = true
			return ErrStopListing
		}
		n, last, stop, err := scanOne(ctx, store, sessionID, span, next, upper, maxLine, q.Match, fn)
		res.ScannedBytes += n
		if err != nil {
			return err
		}
		next = max(next, last)
		if stop {
			res.Stopped = true
			return ErrStopListing
		}
		return nil
	})
	res.Next = next
	if errors.Is(err, ErrStopListing) {
		err = nil
	}
	if err != nil {
		return res, fmt.Errorf("scan the archive of session %s: %w", sessionID, err)
	}
	return res, nil
}

// scanOne reads one archive and calls fn for its messages with from <= index < to. It
// returns the bytes it read, the index after the last message it is done with (where a next
// scan goes on), and whether fn stopped the scan.
func scanOne(ctx context.Context, store ArchiveStore, sessionID string, span ArchiveSpan, from, to, maxLine int,
	match *HistoryMatcher, fn func(*ArchivedMessage) error) (read int64, last int, stop bool, err error) {
	end := min(span.To, to)
	rc, err := store.OpenArchive(ctx, sessionID, span.From, span.To)
	if errors.Is(err, ErrNotFound) {
		return 0, end, false, nil // deleted between the listing and the read
	}
	if err != nil {
		return 0, from, false, err
	}
	defer func() { _ = rc.Close() }() // a read stream: closing it only releases its connection
	br := bufio.NewReaderSize(rc, 64<<10)
	for index := span.From; index < end; index++ {
		line, err := readArchiveLine(br, maxLine)
		read += int64(len(line))
		if errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) == 0 {
			// Shorter than its name says (written by something else): what it holds is read.
			return read, end, false, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return read, max(index, from), false, fmt.Errorf("archive %s, message %d: %w", span, index, err)
		}
		if index < from {
			continue
		}
		am := ArchivedMessage{Index: index, Span: span, Raw: bytes.TrimSpace(line)}
		if err := json.Unmarshal(am.Raw, &am.Message); err != nil {
			return read, index, false, fmt.Errorf("archive %s, message %d: %w", span, index, err)
		}
		if match != nil && !match.Match(&am.Message) {
			continue
		}
		if err := fn(&am); err != nil {
			if errors.Is(err, ErrStopListing) {
				return read, index, true, nil
			}
			return read, index, false, err
		}
	}
	return read, end, false, nil
}

// readArchiveLine reads one line (without its '\n'), failing with ErrObjectTooLarge past max
// bytes.
func readArchiveLine(br *bufio.Reader, maxBytes int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxBytes+1 {
			return nil, fmt.Errorf("a message is longer than %d bytes: %w", maxBytes, ErrObjectTooLarge)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return line, err
		}
	}
}

// MaxHistoryQueryBytes bounds the text of a history search.
const MaxHistoryQueryBytes = 1024

// HistoryMatcher finds archived messages by their text: the content, the text of content
// parts, tool calls' IDs, names and arguments, the tool call ID and the name.
type HistoryMatcher struct {
	re *regexp.Regexp
}

// NewHistoryMatcher matches q as a case-insensitive substring, or, with regex, as a Go
// (RE2) regular expression, also case-insensitive ("(?-i)" in the pattern turns that off).
// RE2 runs in time linear in the text, so no pattern can make a search slow. An empty or
// over-long q, or a pattern that does not compile, is an error that says why.
func NewHistoryMatcher(q string, regex bool) (*HistoryMatcher, error) {
	if q == "" {
		return nil, errors.New("empty search text")
	}
	if len(q) > MaxHistoryQueryBytes {
		return nil, fmt.Errorf("search text is %d bytes, longer than %d", len(q), MaxHistoryQueryBytes)
	}
	pattern := regexp.QuoteMeta(q)
	if regex {
		pattern = q
	}
	re, err := regexp.Compile("(?i)" + pattern)
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression: %w", err)
	}
	return &HistoryMatcher{re: re}, nil
}

// Match reports whether m's text matches.
func (h *HistoryMatcher) Match(m *Message) bool {
	if h.re.MatchString(m.Content) || (m.ToolCallID != "" && h.re.MatchString(m.ToolCallID)) || (m.Name != "" && h.re.MatchString(m.Name)) {
		return true
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		if h.re.MatchString(tc.Function.Name) || h.re.MatchString(tc.Function.Arguments) || h.re.MatchString(tc.ID) {
			return true
		}
	}
	return len(m.ContentParts) > 0 && h.re.MatchString(partsText(m.ContentParts))
}

// partsText is the text of the text parts of content sent as parts (OpenAI "text" and
// "input_text", Anthropic "text" blocks: every part's "text" string), one part a line.
// Images and other binary parts are left out: a search is for words.
func partsText(raw json.RawMessage) string {
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Text != "" {
			b.WriteString(p.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
