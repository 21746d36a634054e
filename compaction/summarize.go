package compaction

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// This file holds the summarization of a span of the head into the compaction message.

// summarizeSpan is the Soft/Full flow: memory extraction, offload, summarization with the
// incremental merge, the compaction message in place of span, and the watermark advanced
// past span.
func (c *ProgressiveCompactor) summarizeSpan(ctx context.Context, t *turn, span, kept, tail []Message, rec *CompactionRecord) []Message {
	rec.PreservedTail = len(kept) + len(tail)
	if len(span) == 0 {
		return concat(t.system, t.carried, kept, tail)
	}
	if c.extractor != nil {
		if err := c.extractor.Extract(ctx, c.sessionID, span); err != nil {
			c.log.V(1).Info("long-term memory extraction failed; skipped", "session", c.sessionID, "error", err.Error())
		}
	}
	offloaded := c.offload(ctx, t, span, rec)
	c.encodeAhead(t, len(span))
	pins := c.pinsAfter(ctx, t, len(span), rec)
	var msg Message
	var merged []Anchor
	var summary string
	var err error
	late := false
	prevAnchors, prevSummary, base := c.state.LastAnchors, c.state.LastSummary, c.state.PrefixHash
	name := c.summarizer.Name()
	if c.offTurn() {
		msg, merged, summary, late, err = c.summarizeOffTurn(ctx, t, span, offloaded, pins, rec)
		prevAnchors, prevSummary = c.state.LastAnchors, c.state.LastSummary // a late summary merged
		if rec.PreparedCovered > 0 || late {
			name = (ExtractiveSummarizer{}).Name()
		}
	} else {
		summarizer, paid := c.summarizerFor(ctx, rec)
		name = summarizer.Name()
		msg, merged, summary, err = c.summarize(ctx, summarizer, offloaded, pins, rec, paid)
	}
	if err != nil {
		rec.addError("summarizer %s failed: %v; fell back to budget truncation", name, err)
		// Closed first, so the fallback's repair has no unanswered call to drop.
		forced := c.fallback.Compact(closeView(concat(t.system, offloaded, kept, tail)))
		rec.PreservedTail = preservedCount(forced)
		return concat(t.system, t.carried, forced[len(t.system):])
	}
	// Pins stay in the view either way; what the summary replaces is the old compaction
	// message and the span.
	replaced := c.compactionChars(t) + charsOf(offloaded)
	if added := msg.Chars() + charsOf(pinMessages(pins)) - charsOf(pinMessages(c.state.Pins)); added >= replaced {
		// Summarizing would grow the context: keep the span verbatim (already offloaded).
		rec.addError("summary (%d bytes) not smaller than the %d messages (%d bytes) it would replace; kept them", msg.Chars(), len(span), replaced)
		return concat(t.system, t.carried, offloaded, kept, tail)
	}
	rec.Anchors, rec.SummaryText, rec.Summarized = merged, summary, len(span)
	c.state.LastAnchors, c.state.LastSummary = merged, summary
	c.advance(t, len(span), msg.Content, pins)
	if late {
		c.startLate(t.base, offloaded, prevAnchors, prevSummary, base, rec)
	}
	return concat(t.system, pinMessages(pins), []Message{msg}, kept, tail)
}

// summarize runs s on the span and builds the compaction message from its output merged
// with the session's anchors. An error means there is no usable summary.
//
// A call of the session's summarizer (count) is counted in the record with its tokens: as
// its server reported them, or estimated from the request and the answer.
func (c *ProgressiveCompactor) summarize(ctx context.Context, s Summarizer, span []Message, pins []Pin, rec *CompactionRecord, count bool) (Message, []Anchor, string, error) {
	merged, summary, err := c.summarizeOnto(ctx, s, span, rec, count, c.state.LastAnchors, c.state.LastSummary)
	if err != nil {
		return Message{}, nil, "", err
	}
	msg, merged, summary := c.summaryMessage(ctx, span, pins, merged, summary)
	return msg, merged, summary, nil
}

// summarizeOnto runs s on the span on top of the previous anchors and prose, and returns
// the anchors merged and the new prose.
func (c *ProgressiveCompactor) summarizeOnto(ctx context.Context, s Summarizer, span []Message, rec *CompactionRecord, count bool, prevAnchors []Anchor, prevSummary string) ([]Anchor, string, error) {
	req := SummaryRequest{
		SessionID: c.sessionID, Tier: rec.Tier, Messages: span,
		PreviousSummary: prevSummary, PreviousAnchors: prevAnchors,
		MaxSummaryChars: c.cfg.MaxSummaryChars,
	}
	if _, ok := s.(ExtractiveSummarizer); ok {
		s = ExtractiveSummarizer{memo: c.extractMemo}
	}
	res, err := Summarize(ctx, s, req)
	if count {
		rec.countSummarizer(c.extractMemo, req, res)
	}
	if err != nil {
		return nil, "", err
	}
	anchors, summary, perr := res.Parsed()
	if perr != nil {
		rec.addError("%v", perr)
	}
	if summary == "" && CountAvailable(anchors) == 0 {
		return nil, "", errors.New("output holds no anchors and no summary")
	}
	return c.extractMemo.mergeAnchors(prevAnchors, anchors), summary, nil
}

// summaryMessage builds the compaction message for span from the merged anchors and the
// prose, and returns it with the anchors and the prose as kept.
func (c *ProgressiveCompactor) summaryMessage(ctx context.Context, span []Message, pins []Pin, merged []Anchor, summary string) (Message, []Anchor, string) {
	// The prose is the supplement: it gives way first when anchors and prose together would
	// take more than a fifth of the window.
	limit := c.cfg.MaxSummaryChars
	// What the pins show verbatim is not repeated in the anchors the view shows.
	shown := withoutPinned(merged, pins)
	rendered := formatAnchors(shown)
	if capBytes := c.windowChars() / 5; capBytes > 0 {
		// Anchors are what an agent continues from: they give way only in a window too small
		// for them (more than a third of it), where they would crowd out the recent messages.
		// (Cut down to the fifth, they lost half the decisions and errors at 8,000 tokens
		// for 10% fewer compactions.)
		rendered = formatAnchorsWithin(shown, c.windowChars()/3)
		limit = min(limit, max(capBytes-len(rendered), minProseChars))
	}
	summary = textcut.Head(summary, limit)
	return c.compactionMessage(ctx, rendered, summary, span), merged, summary
}

// compactionChars is the size of the compaction message that opens t's view (0 for none).
func (c *ProgressiveCompactor) compactionChars(t *turn) int {
	if len(t.carried) == 0 {
		return 0
	}
	return t.carried[len(t.carried)-1].Chars()
}

// compactionMessage builds the single message that stands for the summarized span, from the
// rendered anchors and the prose.
func (c *ProgressiveCompactor) compactionMessage(ctx context.Context, anchors, summary string, span []Message) Message {
	var b strings.Builder
	b.WriteString(CompactionHeader)
	b.WriteString("\nEarlier messages of this conversation were summarized to fit the context window.\n\n## Anchors\n")
	b.WriteString(anchors)
	b.WriteString("\n## Summary\n")
	b.WriteString(strings.TrimSpace(summary))
	b.WriteString("\n")
	if c.todos != nil {
		todos, err := c.todos.Todos(ctx, c.sessionID)
		switch {
		case err != nil:
			c.log.V(1).Info("todo injection failed; skipped", "session", c.sessionID, "error", err.Error())
		case strings.TrimSpace(todos) != "":
			b.WriteString("\n## Todo\n")
			b.WriteString(strings.TrimSpace(todos))
			b.WriteString("\n")
		}
	}
	var ids []string
	for i := range span {
		if span[i].Role == RoleTool && strings.HasPrefix(span[i].Content, PlaceholderPrefix) {
			ids = append(ids, span[i].ToolCallID)
		}
	}
	if len(ids) > 0 {
		const maxListed = 20
		b.WriteString("\n## Offloaded tool results\nRead back by tool_call_id: ")
		if len(ids) > maxListed {
			b.WriteString(strings.Join(ids[len(ids)-maxListed:], ", "))
			fmt.Fprintf(&b, " (and %d earlier)", len(ids)-maxListed)
		} else {
			b.WriteString(strings.Join(ids, ", "))
		}
		b.WriteString("\n")
	}
	if c.archive != nil && !c.cfg.RawHistory {
		// The same line on every compaction message, so the prompt cache holds; the proxy
		// turns it into the command that searches the archive.
		b.WriteString("\n" + HistoryReadBack + "\n")
	}
	return Message{Role: RoleUser, Content: b.String()}
}
