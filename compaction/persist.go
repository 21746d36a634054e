package compaction

import (
	"context"
	"errors"
	"fmt"
)

// This file holds the session state's load, revalidation and save.

// loadState reads the persisted state once (on every call with revalidate); a missing state
// is an empty one. d is the call's delta (nil for a full history).
func (c *ProgressiveCompactor) loadState(ctx context.Context, d *Delta) error {
	if c.revalidate && c.states != nil {
		return c.refreshState(ctx, d)
	}
	if c.stateLoaded {
		return nil
	}
	if c.state == nil {
		c.state = &State{}
	}
	if c.states == nil {
		c.stateLoaded = true
		return nil
	}
	st, err := c.states.LoadState(ctx, c.sessionID)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	default:
		c.state = st
		c.state.Calibration = clampCalibration(st.Calibration)
		c.savedCalibration = c.state.Calibration
		if c.offloader != nil {
			c.offloader.Seed(st.Offloaded)
		}
	}
	c.stateLoaded = true
	return nil
}

// refreshState starts a call from the stored state: the copy kept from the last call while
// the store says it is current (or, with WithStateTrust, while d continues from it and the
// store confirmed it recently), else the stored state read again. The offloader starts from
// the state's offloads, as a new compactor's would.
func (c *ProgressiveCompactor) refreshState(ctx context.Context, d *Delta) error {
	var st *State
	var err error
	rv, ok := c.states.(StateRevalidator)
	switch {
	case c.trusted(d):
		st = c.stored
	case ok && c.stored != nil && c.stored.Version != "":
		st, err = rv.LoadStateIfChanged(ctx, c.sessionID, c.stored.Version)
		if err == nil && st == nil {
			st = c.stored
		}
		c.confirmedAt = c.now()
	default:
		st, err = c.states.LoadState(ctx, c.sessionID)
		c.confirmedAt = c.now()
	}
	if errors.Is(err, ErrNotFound) {
		st, err = &State{}, nil
		c.storedAbsent = true
	} else if st != c.stored {
		c.storedAbsent = false
	}
	if err != nil {
		c.stored, c.state, c.stateLoaded, c.storedAbsent = nil, &State{}, false, false
		c.resetOffloader(nil)
		return err
	}
	if st != c.stored {
		st.Calibration = clampCalibration(st.Calibration)
		c.stored = st
	}
	c.state, c.stateLoaded = c.stored.clone(), true
	c.savedCalibration = c.stored.Calibration
	c.resetOffloader(c.stored.Offloaded)
	return nil
}

// trusted reports whether a call with delta d may start from the kept state without asking
// the store (WithStateTrust): a delta call that continues from the kept state, or a call
// with the full history (d nil) while the kept state has not moved the watermark (the store
// said there is no state yet, or only offloads were saved). A caller that got an answer
// which moved the watermark sends a delta from it, so a full history from it means none did.
// Only a versioned store (a StateRevalidator) is trusted: its writes are conditional, so a
// save made from a kept state another process has since replaced fails instead of
// overwriting it.
func (c *ProgressiveCompactor) trusted(d *Delta) bool {
	if c.trustFor <= 0 || c.stored == nil || c.now().Sub(c.confirmedAt) >= c.trustFor {
		return false
	}
	if _, versioned := c.states.(StateRevalidator); !versioned {
		return false
	}
	if d == nil || d.Seen > 0 {
		return c.storedAbsent || (c.stored.Version != "" && c.stored.Watermark == 0)
	}
	return c.stored.Version != "" && d.Watermark == c.stored.Watermark && d.PrefixHash == c.stored.PrefixHash
}

// resetOffloader gives the compactor a new offloader that knows entries.
func (c *ProgressiveCompactor) resetOffloader(entries map[string]OffloadEntry) {
	if c.store == nil {
		return
	}
	c.offloader = NewOffloader(c.store, c.sessionID, c.cfg.OffloadThreshold, c.cfg.PreviewLines).WithImages(c.cfg.ImageOffloadThreshold)
	c.offloader.Seed(entries)
}

// saveState persists the state. A failure fails open (the record says so), except a
// conflict: another compaction saved first, so this one's merge must not overwrite it. The
// in-memory state is then dropped, to be reloaded by the next call, and ErrStateConflict
// returned before anything is recorded.
func (c *ProgressiveCompactor) saveState(ctx context.Context, rec *CompactionRecord) error {
	c.state.UpdatedAt = c.now()
	if c.offloader != nil {
		c.state.Offloaded = c.offloader.Entries()
	}
	err := c.states.SaveState(ctx, c.sessionID, c.state)
	if err == nil {
		c.savedCalibration = c.state.Calibration
		if c.revalidate {
			c.stored, c.storedAbsent = c.state.clone(), false
			c.confirmedAt = c.now()
		}
	}
	switch {
	case errors.Is(err, ErrConflict):
		c.state, c.stateLoaded, c.stored, c.storedAbsent = &State{}, false, nil, false
		return fmt.Errorf("%w: %v", ErrStateConflict, err)
	case err != nil:
		rec.addError("state save: %v", err)
	}
	return nil
}
