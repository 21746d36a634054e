package compaction

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// Pin kinds, in the order the pin budget serves them.
const (
	PinKindTask        = "task"        // the user message the agent first answered
	PinKindMarked      = "marked"      // a message the agent marked "pinned": true
	PinKindInstruction = "instruction" // a later user message
	PinKindPreamble    = "preamble"    // a user message before the task (a demonstration, context)
)

// Pin is a message kept byte-for-byte in every view once a compaction has covered it, right
// after the system messages. A pin over the budget is kept as its head and tail, its full
// text offloaded and readable back by FullTextID.
type Pin struct {
	// Index is the message's position in the raw history.
	Index int    `json:"index"`
	Kind  string `json:"kind"`
	// Key is the message's normalized text: a text pinned once is not pinned again (an
	// agent harness repeating the same reminder).
	Key     string  `json:"key"`
	Message Message `json:"message"`
	// Bytes is the size of the original content; more than Message's when shortened.
	Bytes int `json:"bytes"`
	// FullTextID names the offloaded full text of a shortened pin (empty otherwise).
	FullTextID string `json:"fullTextID,omitempty"`
}

// Shortened reports whether the pin holds only the head and tail of its message.
func (p *Pin) Shortened() bool { return p.Bytes > len(p.Message.Content) }

// minPinBytes is the least a shortened pin keeps: less would not show what it was.
const minPinBytes = 1024

// pinIDPrefix names the offloaded full text of a shortened pin, by raw-history index.
const pinIDPrefix = "pinned-message-"

// pinMessages are the pins as they open every view.
func pinMessages(pins []Pin) []Message {
	if len(pins) == 0 {
		return nil
	}
	out := make([]Message, len(pins))
	for i := range pins {
		out[i] = pins[i].Message
	}
	return out
}

// pinStats is what a record says of the pins: how many, their estimated tokens and a hash
// of their bytes, so anyone can check that pins never change.
func pinStats(pins []Pin) (n, tokens int, hash string) {
	if len(pins) == 0 {
		return 0, 0, ""
	}
	h := sha256.New()
	for i := range pins {
		hashMessage(h, &pins[i].Message)
	}
	return len(pins), EstimateTokens(pinMessages(pins)), hex.EncodeToString(h.Sum(nil)[:16])
}

// pinKey normalizes a text for de-duplication: case, white space and digits ("found 2
// actions", "found 3 actions") do not make a reminder new.
func pinKey(m *Message) string {
	var b strings.Builder
	space := false
	text := m.Content
	if text == "" {
		text = string(m.ContentParts)
	}
	for _, r := range text {
		switch {
		case unicode.IsSpace(r):
			space = true
			continue
		case unicode.IsDigit(r):
			r = '#'
		default:
			r = unicode.ToLower(r)
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
		if b.Len() >= 512 { // enough to tell texts apart
			break
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:12])
}

// taskIndex is the raw index of the task in rest (raw index base): the last user message
// before the first assistant message, or the first user message when no assistant message
// has come yet. -1 when rest has no user message.
func taskIndex(rest []Message, base int) int {
	task, sawAssistant := -1, false
	for i := range rest {
		switch {
		case rest[i].Role == RoleAssistant:
			if task >= 0 {
				return task
			}
			sawAssistant = true
		case pinnable(&rest[i]) && (!sawAssistant || task < 0):
			task = base + i
			if sawAssistant {
				return task
			}
		}
	}
	return task
}

// pinnable is a user message with something in it that the engine did not write.
func pinnable(m *Message) bool {
	if m.Role != RoleUser || isCompactionMessage(m) {
		return false
	}
	return strings.TrimSpace(m.Content) != "" || len(m.ContentParts) > 0
}

// pinCandidates are the messages of span (raw index base) that cfg's rule pins.
func pinCandidates(cfg Config, span []Message, base, task int) []Pin {
	if cfg.PinRule == PinNone {
		return nil
	}
	var out []Pin
	for i := range span {
		m := &span[i]
		idx := base + i
		kind := ""
		switch {
		case m.Pinned && (m.Role == RoleUser || m.Role == RoleAssistant) && len(m.ToolCalls) == 0:
			kind = PinKindMarked
		case !pinnable(m) || cfg.PinRule == PinMarked:
		case idx == task:
			kind = PinKindTask
		case cfg.PinRule == PinTask:
		case task >= 0 && idx < task:
			kind = PinKindPreamble
		default:
			kind = PinKindInstruction
		}
		if kind == "" {
			continue
		}
		msg := m.Clone()
		msg.Pinned = false
		out = append(out, Pin{Index: idx, Kind: kind, Key: pinKey(m), Message: msg, Bytes: len(m.Content)})
	}
	return out
}

// selectPins chooses, from the session's pins and new candidates, the ones that fit the
// budget (bytes): the task first, then marked messages, later instructions and preamble
// messages, newest first within a kind. A pin that does not fit whole is shortened to its
// head and tail with its full text offloaded, while at least minPinBytes of budget are left;
// otherwise it is left to the summary, which covers it anyway. The result is in history order.
func (c *ProgressiveCompactor) selectPins(ctx context.Context, pins, candidates []Pin, budget int, rec *CompactionRecord) []Pin {
	seen := make(map[string]bool, len(pins))
	all := make([]Pin, 0, len(pins)+len(candidates))
	for _, p := range pins {
		seen[p.Key] = true
		all = append(all, p)
	}
	for _, p := range candidates {
		if p.Kind != PinKindMarked && p.Kind != PinKindTask && seen[p.Key] {
			continue // already pinned once
		}
		seen[p.Key] = true
		all = append(all, p)
	}
	rank := map[string]int{PinKindTask: 0, PinKindMarked: 1, PinKindInstruction: 2, PinKindPreamble: 3}
	sort.SliceStable(all, func(i, j int) bool {
		if rank[all[i].Kind] != rank[all[j].Kind] {
			return rank[all[i].Kind] < rank[all[j].Kind]
		}
		return all[i].Index > all[j].Index
	})
	left := budget
	kept := make([]Pin, 0, len(all))
	for _, p := range all {
		size := p.Message.Chars()
		switch {
		case size <= left:
		case (left >= minPinBytes || p.Kind == PinKindTask && left > 0) && !p.Shortened() && p.Message.ContentParts == nil && p.Kind != PinKindPreamble:
			// The task is kept, shortened, whatever is left of the budget.
			// A preamble (a demonstration, pasted context) is pinned whole or not at all:
			// its head and tail alone would spend the budget on little.
			p = c.shortenPin(ctx, p, left, rec)
			size = p.Message.Chars()
		default:
			continue
		}
		left -= size
		kept = append(kept, p)
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Index < kept[j].Index })
	return kept
}

// shortenPin keeps the head and tail of a pin within size bytes and offloads its full text,
// so the agent can read it back; without a store (or when the write fails) the note says so.
func (c *ProgressiveCompactor) shortenPin(ctx context.Context, p Pin, size int, rec *CompactionRecord) Pin {
	full := p.Message.Content
	id := fmt.Sprintf("%s%d", pinIDPrefix, p.Index)
	where := "its full text could not be stored"
	if c.store != nil {
		ref, err := c.store.PutToolResult(ctx, c.sessionID, id, full)
		if err != nil {
			rec.addError("offload of pinned message %d: %v", p.Index, err)
		} else {
			where = "read the full text back by tool_call_id " + id
			p.FullTextID = id
			rec.Offloaded = append(rec.Offloaded, OffloadEntry{ToolCallID: id, Bytes: len(full), Ref: ref})
		}
	}
	marker := fmt.Sprintf("\n[... %d bytes of this pinned message omitted to fit the pin budget; %s ...]\n", len(full), where)
	keep := max(size-len(marker), 256)
	head := textcut.Head(full, keep*2/3)
	tail := textcut.Tail(full, keep-len(head))
	p.Message = p.Message.Clone()
	p.Message.Content = head + marker + tail
	return p
}

// withoutPinned returns anchors without the user_intent items that a pin already shows
// word for word (the task's lines, a later instruction): the view carries them once. The
// stored anchors keep them, for a session whose pins change.
func withoutPinned(anchors []Anchor, pins []Pin) []Anchor {
	if len(pins) == 0 {
		return anchors
	}
	out := make([]Anchor, len(anchors))
	copy(out, anchors)
	for i := range out {
		if out[i].Type != AnchorUserIntent || !out[i].Available() {
			continue
		}
		l := splitItems(out[i].Content)
		kept := l.items[:0:0]
		for _, it := range l.items {
			if !pinnedText(it, pins) {
				kept = append(kept, it)
			}
		}
		switch {
		case len(kept) == len(l.items):
		case len(kept) == 0 && l.elided == 0:
			out[i].Content = "(the task and the user's instructions are pinned above)"
		default:
			if l.elided > 0 {
				kept = append(kept, elisionMarker(l.elided))
			}
			out[i].Content = renderItems(kept)
		}
	}
	return out
}

// pinnedText reports whether an anchor item is a pin's text, or the start of it when the
// item was clipped ("..." at the end).
func pinnedText(item string, pins []Pin) bool {
	t := strings.TrimPrefix(item, "later: ")
	t = strings.TrimSpace(strings.TrimSuffix(t, "..."))
	if len(t) < 16 {
		return false
	}
	for i := range pins {
		if !pins[i].Shortened() && strings.Contains(pins[i].Message.Content, t) {
			return true
		}
	}
	return false
}
