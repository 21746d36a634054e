package compaction

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file holds the undo of compaction: a reset forgets a session's compaction state, so
// its next turn starts again from the agent's own full history. Nothing of the agent's is
// lost: the engine never changed the history, and the archive (what summaries replaced) and
// the records stay.

// maxResetAttempts bounds the reruns of a reset whose state another compaction saved first.
const maxResetAttempts = 5

// ResetState forgets the compaction state of session sessionID (a ConversationSessionID for
// one conversation) in states: the watermark, summary, anchors, pins and offload index go, so
// the next turn's view is built from the agent's full history, as before its first
// compaction. What belongs to the session rather than to the history stays: the calibration
// and the summarizer calls of the last hour (a reset must not refill the summarizer budget).
// The write is conditional on the state read, and read again when another compaction saved
// first. A Reset record (Tier None, WatermarkBefore the forgotten watermark) is appended to
// records when it is not nil; a failure to append it fails open (it is returned as
// recordErr, the state is reset). Tool results and archives are kept.
func ResetState(ctx context.Context, states StateStore, records RecordStore, sessionID string, now time.Time) (rec *CompactionRecord, recordErr error, err error) {
	if err := ValidateSessionID(sessionID); err != nil {
		return nil, nil, err
	}
	if states == nil {
		return nil, nil, errors.New("reset: no state store")
	}
	rec = newResetRecord(sessionID, now)
	for attempt := 1; ; attempt++ {
		st, err := states.LoadState(ctx, sessionID)
		if errors.Is(err, ErrNotFound) {
			rec.Notes = append(rec.Notes, "reset: no compaction state (never compacted, or reset already): nothing to forget")
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reset session %s: load state: %w", sessionID, err)
		}
		rec.WatermarkBefore = st.Watermark
		err = states.SaveState(ctx, sessionID, resetState(st, now))
		if errors.Is(err, ErrConflict) && attempt < maxResetAttempts {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reset session %s: save state: %w", sessionID, err)
		}
		rec.Notes = append(rec.Notes, fmt.Sprintf("reset: compaction state forgotten (watermark %d -> 0): the next turn starts from the full history; archives and tool results are kept", st.Watermark))
		break
	}
	if records != nil {
		if err := records.AppendRecord(ctx, rec); err != nil {
			recordErr = fmt.Errorf("reset session %s: append its record: %w", sessionID, err)
		}
	}
	return rec, recordErr, nil
}

// resetState is the state st becomes on a reset: the session's own (calibration, summarizer
// calls) kept, the version kept so the write replaces st only.
func resetState(st *State, now time.Time) *State {
	return &State{Calibration: st.Calibration, SummarizerCalls: append([]time.Time(nil), st.SummarizerCalls...), Version: st.Version, UpdatedAt: now}
}

func newResetRecord(sessionID string, now time.Time) *CompactionRecord {
	return &CompactionRecord{ID: newRecordID(now), SessionID: sessionID, Timestamp: now, Tier: TierNone, Reset: true,
		Anchors: []Anchor{}, Offloaded: []OffloadEntry{}, HistoryTokens: -1}
}

// Reset is ResetState for the compactor's session, which also drops what the compactor
// keeps of it in memory, so its next call starts from the agent's full history. A compactor
// without a state store forgets its in-memory state and records the reset when it has a
// record store.
func (c *ProgressiveCompactor) Reset(ctx context.Context) (*CompactionRecord, error) {
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.release()
	now := c.now()
	var rec *CompactionRecord
	if c.states != nil {
		var recordErr, err error
		rec, recordErr, err = ResetState(ctx, c.states, c.records, c.sessionID, now)
		if err != nil {
			return nil, err
		}
		if recordErr != nil {
			c.log.Error(recordErr, "persisting the reset record failed", "session", c.sessionID)
		}
	} else {
		rec = newResetRecord(c.sessionID, now)
		if c.state != nil {
			rec.WatermarkBefore = c.state.Watermark
		}
		rec.Notes = append(rec.Notes, fmt.Sprintf("reset: compaction state forgotten (watermark %d -> 0)", rec.WatermarkBefore))
		if c.records != nil {
			if err := c.records.AppendRecord(ctx, rec); err != nil {
				c.log.Error(err, "persisting the reset record failed", "session", c.sessionID)
			}
		}
	}
	if c.state != nil && c.states == nil {
		c.state = resetState(c.state, now)
	} else {
		// Read again on the next call: the stored state is the one to start from.
		c.state, c.stateLoaded = nil, false
	}
	c.stored, c.storedAbsent, c.confirmedAt = nil, false, time.Time{}
	c.seen = seenPrefix{}
	c.lastViewTokens = 0
	c.resetOffloader(nil)
	return rec, nil
}
