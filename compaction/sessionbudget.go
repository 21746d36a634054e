package compaction

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// SummarizerBudget counts a session's paid summarizer calls where every compactor of the
// session sees them (WithSummarizerBudget): the conversations of one session, served by any
// replica, share one SummarizerCallsPerHour.
type SummarizerBudget interface {
	// Charge counts one call at now when fewer than limit calls were counted in the hour
	// before it, and reports whether it did; when it did not, next is when a call will be
	// allowed again. An error means the budget could not be read or written: nothing is
	// known to be counted, and the caller makes no paid call.
	Charge(ctx context.Context, now time.Time, limit int) (ok bool, next time.Time, err error)
}

// budgetConversation is the reserved conversation ID under which a session keeps its shared
// summarizer budget (SessionBudgetID). It starts with '.', so ValidateConversationID refuses
// it and no caller can name it as a conversation of its own, while it lives under the
// session's objects in every store, so DeleteSession of the session removes it.
const budgetConversation = ".summarizer-budget"

// SessionBudgetID is the ID (a conversation ID no caller can take) under which a
// StateBudget of session sessionID keeps its count. sessionID is a session's own ID, not a
// conversation's.
func SessionBudgetID(sessionID string) string {
	return sessionID + conversationSep + budgetConversation
}

// stateBudgetAttempts bounds the conditional writes of one Charge when other compactions of
// the session charge at the same time.
const stateBudgetAttempts = 5

// StateBudget is a SummarizerBudget kept in a StateStore as the State.SummarizerCalls of
// the session's SessionBudgetID, written conditionally (the state's Version), so two
// replicas charging at once never both take the last call of the hour.
type StateBudget struct {
	store StateStore
	id    string
}

var _ SummarizerBudget = (*StateBudget)(nil)

// NewStateBudget returns the shared budget of session sessionID (its own ID: a conversation's
// is mapped to its session's) in store.
func NewStateBudget(store StateStore, sessionID string) (*StateBudget, error) {
	base, _ := SplitSessionID(sessionID)
	id := SessionBudgetID(base)
	if err := ValidateSessionID(id); err != nil {
		return nil, err
	}
	return &StateBudget{store: store, id: id}, nil
}

// ID is the session ID the budget is stored under.
func (b *StateBudget) ID() string { return b.id }

// Charge implements SummarizerBudget. A stored state written by a store that cannot detect
// conflicts (ErrConflict is never returned) may lose a concurrent charge, never more than
// one per concurrent writer.
func (b *StateBudget) Charge(ctx context.Context, now time.Time, limit int) (bool, time.Time, error) {
	var lastErr error
	for attempt := range stateBudgetAttempts {
		if attempt > 0 {
			// Charges that collided retry apart from each other.
			wait := time.Duration(attempt) * time.Duration(1+rand.IntN(20)) * time.Millisecond // #nosec G404 -- jitter, not a secret
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return false, time.Time{}, fmt.Errorf("charge summarizer budget: %w", ctx.Err())
			}
		}
		st, err := b.store.LoadState(ctx, b.id)
		switch {
		case errors.Is(err, ErrNotFound):
			st = &State{}
		case err != nil:
			return false, time.Time{}, fmt.Errorf("load summarizer budget: %w", err)
		}
		calls := pruneCalls(st.SummarizerCalls, now)
		if limit > 0 && len(calls) >= limit {
			return false, calls[0].Add(time.Hour), nil
		}
		// A copy: the loaded slice may be the store's own.
		st.SummarizerCalls = append(append(make([]time.Time, 0, len(calls)+1), calls...), now)
		st.UpdatedAt = now
		err = b.store.SaveState(ctx, b.id, st)
		if err == nil {
			return true, time.Time{}, nil
		}
		if !errors.Is(err, ErrConflict) {
			return false, time.Time{}, fmt.Errorf("save summarizer budget: %w", err)
		}
		lastErr = err
	}
	return false, time.Time{}, fmt.Errorf("save summarizer budget: %d conflicting writes: %w", stateBudgetAttempts, lastErr)
}

// isBudgetConversation reports whether conv is the reserved budget conversation.
func isBudgetConversation(conv string) bool { return conv == budgetConversation }
