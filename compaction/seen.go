package compaction

import (
	"context"
	"fmt"
	"time"
)

// This file holds the seen delta: before its first summary, a conversation's view is its raw
// history, and a caller need not send that history again every turn.

// seenPrefix is the raw history the compactor's last call answered with itself: a turn that
// compacted nothing, before the watermark first moved, whose view was the history unchanged
// (every tool call answered, nothing shown as an offload placeholder, nothing pinned). The
// caller's next call may send only what follows it (Delta.Seen), while the stored state is
// still the one it was answered on.
type seenPrefix struct {
	n      int    // messages of the history
	system int    // leading system messages among them
	hash   string // PrefixHash(system messages, n, last message)
	chars  int    // their estimated characters (Message.Chars)
	// The stored state the call was answered on: its version, or absent.
	version string
	absent  bool
}

// noteSeen remembers the history of a call with the full history (d nil) whose view is that
// history itself, for a seen delta next. Only a compactor kept between requests
// (WithStateRevalidation) gives one: it alone knows which stored state it answered on.
func (c *ProgressiveCompactor) noteSeen(msgs, view []Message, t *turn, stateOK bool, rec *CompactionRecord) {
	if !c.revalidate || c.cfg.RawHistory || !stateOK || c.stored == nil || c.state.Watermark != 0 ||
		len(t.carried) > 0 || len(msgs) == 0 || !sameMessages(view, msgs) {
		return
	}
	n := len(msgs)
	c.seen = seenPrefix{n: n, system: len(t.system), hash: PrefixHash(t.system, n, &msgs[n-1]), chars: charsOf(msgs),
		version: c.stored.Version, absent: c.storedAbsent}
	rec.Seen, rec.SeenHash = c.seen.n, c.seen.hash
}

// sameMessages reports whether a and b are the same slice of messages (not merely equal
// ones): what the engine returns when it changed nothing.
func sameMessages(a, b []Message) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// compactSeen serves a seen delta: msgs holds the history's leading system messages and
// the messages after its first d.Seen, which the compactor's last call answered as they
// are. It returns the view's messages after those d.Seen (the view is the caller's first
// d.Seen messages followed by them) when the turn compacts nothing. Anything else needs the
// full history, and wraps ErrStaleWatermark with nothing changed: a seen point that is not
// this compactor's last one (another process answered, or this one forgot it), a stored
// state that changed since, a turn that compacts or is forced, messages that do not
// continue the seen history as a valid one.
func (c *ProgressiveCompactor) compactSeen(ctx context.Context, msgs []Message, d *Delta, force bool) ([]Message, *CompactionRecord, error) {
	startWall := time.Now()
	s := c.seen
	c.seen = seenPrefix{}
	stale := func(why string) ([]Message, *CompactionRecord, error) {
		return nil, nil, fmt.Errorf("%w: %s", ErrStaleWatermark, why)
	}
	switch {
	case force:
		return stale("a forced compaction needs the whole history")
	case s.n == 0 || d.Seen != s.n || d.PrefixHash != s.hash:
		return stale(fmt.Sprintf("request continues %d seen messages (%.12s), the session's last answer saw %d (%.12s)", d.Seen, d.PrefixHash, s.n, s.hash))
	}
	if err := c.loadState(ctx, d); err != nil {
		return nil, nil, fmt.Errorf("load session state: %w", err)
	}
	if c.storedAbsent != s.absent || c.stored.Version != s.version || c.state.Watermark != 0 {
		return stale("the session's state changed since it was seen")
	}
	p := systemPrefixLen(msgs)
	if p != s.system {
		return stale(fmt.Sprintf("request has %d leading system messages, the seen history %d", p, s.system))
	}
	// The seen history answered every tool call it made: no result after it is late.
	if err := validate(msgs[p:], nil); err != nil {
		return stale(fmt.Sprintf("the messages after the seen history: %v", err))
	}
	part := closeView(c.shown(msgs[p:]))
	ts := c.now()
	rec := &CompactionRecord{ID: newRecordID(ts), SessionID: c.sessionID, Timestamp: ts, Anchors: []Anchor{}, Offloaded: []OffloadEntry{},
		PromptTokens: d.PromptTokens}
	factor := c.calibrate(d.PromptTokens, rec)
	c.factor = factor
	defer func() { c.factor = 1 }()
	rec.TokensBefore, rec.MsgsBefore = (s.chars+charsOf(part))/4, s.n+len(part)
	rec.HistoryTokens = (s.chars + charsOf(msgs[p:])) / 4
	rec.Calibration = factor
	rec.UsageBefore = c.cfg.Usage(calibrated(rec.TokensBefore, factor))
	if rec.Tier = c.cfg.DetermineTier(calibrated(rec.TokensBefore, factor)); rec.Tier != TierNone {
		return stale(fmt.Sprintf("the turn enters %s", rec.Tier))
	}
	rec.TokensAfter, rec.MsgsAfter, rec.PreservedTail = rec.TokensBefore, rec.MsgsBefore, s.n-s.system+len(msgs)-p
	c.finishUsage(rec, factor)
	if c.calibrationMoved() && c.states != nil {
		if err := c.saveState(ctx, rec); err != nil {
			return nil, nil, err
		}
	}
	rec.DurationMs = msSince(startWall)
	if !sameMessages(part, msgs[p:]) || rec.Error != "" {
		return part, rec, nil // the view changed what was sent: the next call sends it all
	}
	if n := s.n + len(part); n > s.n {
		s.n, s.hash, s.chars = n, PrefixHash(msgs[:p], n, &msgs[len(msgs)-1]), s.chars+charsOf(part)
	}
	s.version, s.absent = c.stored.Version, c.storedAbsent
	c.seen = s
	rec.Seen, rec.SeenHash = s.n, s.hash
	return part[:len(part):len(part)], rec, nil
}
