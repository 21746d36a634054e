package compaction

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
)

// This file holds the turn: how a request (a full history or a delta) is resolved against
// the session's state into system messages, pins, the compaction message and the rest, and
// how the watermark advances.

// turn is one request resolved against the session's watermark.
type turn struct {
	system  []Message // leading system messages
	carried []Message // the pins and the compaction message; empty when the watermark is 0
	rest    []Message // raw messages after the watermark (after the system messages when 0)
	base    int       // raw-history index of rest[0]
	// historyTokens is the estimate of the full raw history, -1 for a delta request.
	historyTokens int
	// whole is the caller's history when the view is exactly that history (no watermark).
	whole []Message
}

// indexOf is the conversation index of msgs[0], when msgs is a part of t.rest; -1 otherwise.
func (t *turn) indexOf(msgs []Message) int {
	if len(msgs) == 0 {
		return -1
	}
	for i := range t.rest {
		if &t.rest[i] == &msgs[0] {
			return t.base + i
		}
	}
	return -1
}

func (t *turn) view() []Message {
	if t.whole != nil {
		return t.whole
	}
	return concat(t.system, t.carried, t.rest)
}

// resolve validates msgs and builds the turn. The state is not changed here, so an invalid
// request leaves everything as it was; reset reports that the stored prefix no longer matches.
func (c *ProgressiveCompactor) resolve(msgs []Message, d *Delta) (t turn, reset bool, err error) {
	p := systemPrefixLen(msgs)
	w, hash := c.state.Watermark, c.state.PrefixHash
	if d != nil {
		if d.Watermark != w || d.PrefixHash != hash {
			return turn{}, false, fmt.Errorf("%w: request has watermark %d (%.12s), session has %d (%.12s)", ErrStaleWatermark, d.Watermark, d.PrefixHash, w, hash)
		}
		if err := validate(msgs, c.state.OpenCalls); err != nil {
			return turn{}, false, fmt.Errorf("invalid history: %w", err)
		}
		return turn{system: msgs[:p], carried: c.carried(), rest: msgs[p:], base: w, historyTokens: -1}, false, nil
	}
	if c.cfg.RawHistory {
		w = 0
	}
	if w > 0 && w >= p && w <= len(msgs) && PrefixHash(msgs[:p], w, &msgs[w-1]) == hash {
		if err := validate(concat(msgs[:p], msgs[w:]), c.state.OpenCalls); err != nil {
			return turn{}, false, fmt.Errorf("invalid history: %w", adjustIndex(err, p, w))
		}
		return turn{system: msgs[:p], carried: c.carried(), rest: msgs[w:], base: w, historyTokens: EstimateTokens(msgs)}, false, nil
	}
	if err := Validate(msgs); err != nil {
		return turn{}, false, fmt.Errorf("invalid history: %w", err)
	}
	return turn{system: msgs[:p], rest: msgs[p:], base: p, historyTokens: EstimateTokens(msgs), whole: msgs}, w > 0 && !c.cfg.RawHistory, nil
}

// adjustIndex maps a validation error's index in [system, rest] back to the full history.
func adjustIndex(err error, p, w int) error {
	var ve *ValidationError
	if errors.As(err, &ve) && ve.Index >= p {
		return &ValidationError{Index: ve.Index - p + w, Reason: ve.Reason}
	}
	return err
}

// carried is what opens every view after the system messages once a compaction covered
// part of the history: the pins, then the compaction message (with a note when a state
// written by an older version says an emergency truncation dropped messages unsummarized).
func (c *ProgressiveCompactor) carried() []Message {
	if c.state.Watermark == 0 || c.state.CompactionMessage == "" {
		return nil
	}
	content := c.state.CompactionMessage
	if c.state.Dropped > 0 {
		content = strings.TrimRight(content, "\n") + fmt.Sprintf("\n\nNote: %d messages were dropped by emergency truncation without being summarized.\n", c.state.Dropped)
	}
	return append(pinMessages(c.state.Pins), Message{Role: RoleUser, Content: content})
}

// advance moves the watermark past the first n messages of t.rest, which msgContent and
// pins now stand for, and fingerprints the new prefix.
func (c *ProgressiveCompactor) advance(t *turn, n int, msgContent string, pins []Pin) {
	if c.cfg.RawHistory {
		return
	}
	w := t.base + n
	if c.state.Watermark > 0 {
		c.state.Lineage = append(c.state.Lineage, c.state.PrefixHash)
		if len(c.state.Lineage) > keptLineage {
			c.state.Lineage = c.state.Lineage[len(c.state.Lineage)-keptLineage:]
		}
	}
	c.state.Watermark = w
	c.state.PrefixHash = PrefixHash(t.system, w, &t.rest[n-1])
	c.state.CompactionMessage = msgContent
	c.state.Pins = pins
	c.state.OpenCalls = openCalls(c.state.OpenCalls, t.rest[:n])
}

// PrefixHash fingerprints the part of a history a watermark covers: the watermark itself,
// the system messages and the last covered message. That detects an agent that reset,
// truncated or replaced its history in constant time per turn, whatever the session's length,
// and it can be computed from a delta request, which holds those messages but not the
// middle. An edit deep inside the summarized part goes unnoticed, and does not matter: the
// summary already stands for those messages.
func PrefixHash(system []Message, watermark int, last *Message) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "watermark=%d\n", watermark) // hash writes never fail
	for i := range system {
		hashMessage(h, &system[i])
	}
	hashMessage(h, last)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func hashMessage(h hash.Hash, m *Message) {
	field := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		_, _ = h.Write(n[:])
		_, _ = io.WriteString(h, s) // hash writes never fail
	}
	field(string(m.Role))
	field(m.Content)
	field(string(m.ContentParts))
	field(m.ToolCallID)
	for _, tc := range m.ToolCalls {
		field(tc.ID)
		field(tc.Function.Name)
		field(tc.Function.Arguments)
	}
}
