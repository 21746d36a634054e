package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

func testDeleteSession(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	// "abc" is a prefix of the others, as a string and as a key: deleting it must leave them.
	victim := prefixVictim
	survivors := []string{"abcd", "abc.json", "abc-", "abc_1"}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	populate := func(sid string) {
		t.Helper()
		for _, id := range []string{callID, slashCallID} {
			if _, err := s.PutToolResult(ctx, sid, id, sid+" "+id); err != nil {
				t.Fatalf("PutToolResult(%s): %v", sid, err)
			}
		}
		for i := range 3 {
			if err := s.AppendRecord(ctx, NewRecord(t, sid, now.Add(time.Duration(i)*time.Second), i)); err != nil {
				t.Fatalf("AppendRecord(%s): %v", sid, err)
			}
		}
		if err := s.SaveState(ctx, sid, &compaction.State{LastSummary: sid, UpdatedAt: now}); err != nil {
			t.Fatalf("SaveState(%s): %v", sid, err)
		}
	}
	populate(victim)
	for _, sid := range survivors {
		populate(sid)
	}

	// At least the two results, the state and one record object.
	n, err := s.DeleteSession(ctx, victim)
	if err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if n < 4 {
		t.Errorf("DeleteSession removed %d objects, want at least 4", n)
	}
	for _, id := range []string{callID, slashCallID} {
		if _, err := s.GetToolResult(ctx, victim, id); !errors.Is(err, compaction.ErrNotFound) {
			t.Errorf("after DeleteSession GetToolResult(%s): err = %v, want ErrNotFound", id, err)
		}
	}
	if _, err := s.LoadState(ctx, victim); !errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("after DeleteSession LoadState: err = %v, want ErrNotFound", err)
	}
	if got := ReadRecords(t, s, victim); len(got) != 0 {
		t.Errorf("after DeleteSession %d records remain", len(got))
	}

	for _, sid := range survivors {
		for _, id := range []string{callID, slashCallID} {
			got, err := s.GetToolResult(ctx, sid, id)
			if err != nil || string(got) != sid+" "+id {
				t.Errorf("survivor %s lost tool result %s: %q, %v", sid, id, got, err)
			}
		}
		st, err := s.LoadState(ctx, sid)
		if err != nil || st.LastSummary != sid {
			t.Errorf("survivor %s lost its state: %+v, %v", sid, st, err)
		}
		if got := ReadRecords(t, s, sid); len(got) != 3 {
			t.Errorf("survivor %s has %d records, want 3", sid, len(got))
		}
	}

	// Deleting again finds nothing, and the ID is usable afterwards.
	if n, err := s.DeleteSession(ctx, victim); err != nil || n != 0 {
		t.Errorf("second DeleteSession = %d, %v; want 0, nil", n, err)
	}
	if err := s.AppendRecord(ctx, NewRecord(t, victim, now, 9)); err != nil {
		t.Fatalf("AppendRecord after DeleteSession: %v", err)
	}
	if got := ReadRecords(t, s, victim); len(got) != 1 {
		t.Errorf("after re-use %d records, want 1", len(got))
	}
}

// testConversations: a session's conversations (compaction.ConversationSessionID) keep
// their own tool results, records and state, apart from each other and from the session's
// default conversation; DeleteSession of the session removes every one of them, and nothing
// of sessions whose IDs extend the session's, conversations included.
func testConversations(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	now := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	victim := "abc"
	// "abc.json" and "abc.jsonl" end like the victim's state and trail files.
	survivors := []string{"abcd", "abc.json", "abc.jsonl", "abc_conversations"}
	convs := []string{"", "x", "y.1", "conversations"}
	populate := func(session string) {
		t.Helper()
		for i, conv := range convs {
			sid := compaction.ConversationSessionID(session, conv)
			for _, id := range []string{callID, slashCallID} {
				if _, err := s.PutToolResult(ctx, sid, id, sid+" "+id); err != nil {
					t.Fatalf("PutToolResult(%s): %v", sid, err)
				}
			}
			// A different number of records in each, so a trail that mixes them shows.
			for j := range i + 1 {
				rec := NewRecord(t, sid, now.Add(time.Duration(j)*time.Second), j)
				if err := s.AppendRecord(ctx, rec); err != nil {
					t.Fatalf("AppendRecord(%s): %v", sid, err)
				}
			}
			if err := s.SaveState(ctx, sid, &compaction.State{LastSummary: sid, UpdatedAt: now}); err != nil {
				t.Fatalf("SaveState(%s): %v", sid, err)
			}
		}
	}
	intact := func(session string) {
		t.Helper()
		for i, conv := range convs {
			sid := compaction.ConversationSessionID(session, conv)
			for _, id := range []string{callID, slashCallID} {
				if got, err := s.GetToolResult(ctx, sid, id); err != nil || string(got) != sid+" "+id {
					t.Errorf("GetToolResult(%s, %s) = %q, %v; want its own result", sid, id, got, err)
				}
			}
			got := ReadRecords(t, s, sid)
			if len(got) != i+1 {
				t.Errorf("ReadRecords(%s): %d records, want its own %d", sid, len(got), i+1)
			}
			for _, rec := range got {
				if rec.SessionID != sid {
					t.Errorf("ReadRecords(%s) holds a record of %s", sid, rec.SessionID)
				}
			}
			if st, err := s.LoadState(ctx, sid); err != nil || st.LastSummary != sid {
				t.Errorf("LoadState(%s) = %+v, %v; want its own state", sid, st, err)
			}
		}
	}
	populate(victim)
	for _, sid := range survivors {
		populate(sid)
	}
	intact(victim)
	for _, sid := range survivors {
		intact(sid)
	}

	n, err := s.DeleteSession(ctx, victim)
	if err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	// Per conversation two results and the state; records as populated (stores may keep
	// a trail in one object).
	if n < len(convs)*4 {
		t.Errorf("DeleteSession removed %d objects, want at least %d", n, len(convs)*4)
	}
	for _, conv := range convs {
		sid := compaction.ConversationSessionID(victim, conv)
		for _, id := range []string{callID, slashCallID} {
			if _, err := s.GetToolResult(ctx, sid, id); !errors.Is(err, compaction.ErrNotFound) {
				t.Errorf("after DeleteSession GetToolResult(%s, %s): err = %v, want ErrNotFound", sid, id, err)
			}
		}
		if _, err := s.LoadState(ctx, sid); !errors.Is(err, compaction.ErrNotFound) {
			t.Errorf("after DeleteSession LoadState(%s): err = %v, want ErrNotFound", sid, err)
		}
		if got := ReadRecords(t, s, sid); len(got) != 0 {
			t.Errorf("after DeleteSession %s has %d records", sid, len(got))
		}
	}
	for _, sid := range survivors {
		intact(sid)
	}
	if n, err := s.DeleteSession(ctx, victim); err != nil || n != 0 {
		t.Errorf("second DeleteSession = %d, %v; want 0, nil", n, err)
	}
}

// testSessionBudget: a session's shared summarizer budget (compaction.StateBudget, under
// the session's reserved compaction.SessionBudgetID) is stored, counted across budget
// objects of the session, and removed by DeleteSession of the session, and of no other.
func testSessionBudget(t *testing.T, s compaction.Store) {
	ctx := opCtx(t)
	now := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	victim, survivor := "budget-abc", "budget-abcd"
	charge := func(session string, want bool) {
		t.Helper()
		// A new budget each time, as each conversation's engine has its own.
		b, err := compaction.NewStateBudget(s, session)
		if err != nil {
			t.Fatalf("NewStateBudget(%s): %v", session, err)
		}
		if ok, _, err := b.Charge(ctx, now, 1); err != nil || ok != want {
			t.Fatalf("Charge(%s) = %v, %v; want %v", session, ok, err, want)
		}
	}
	for _, sid := range []string{victim, survivor} {
		charge(sid, true)
		charge(compaction.ConversationSessionID(sid, "x"), false) // one budget per session
		if err := s.SaveState(ctx, compaction.ConversationSessionID(sid, "x"), &compaction.State{LastSummary: sid, UpdatedAt: now}); err != nil {
			t.Fatalf("SaveState: %v", err)
		}
	}
	if st, err := s.LoadState(ctx, compaction.SessionBudgetID(victim)); err != nil || len(st.SummarizerCalls) != 1 {
		t.Fatalf("LoadState(budget) = %+v, %v; want one call", st, err)
	}
	n, err := s.DeleteSession(ctx, victim)
	if err != nil || n < 2 {
		t.Fatalf("DeleteSession = %d, %v; want the budget and the conversation's state removed", n, err)
	}
	if _, err := s.LoadState(ctx, compaction.SessionBudgetID(victim)); !errors.Is(err, compaction.ErrNotFound) {
		t.Errorf("after DeleteSession LoadState(budget): err = %v, want ErrNotFound", err)
	}
	charge(victim, true) // a new session of the same ID starts with a full budget
	charge(survivor, false)
	if st, err := s.LoadState(ctx, compaction.SessionBudgetID(survivor)); err != nil || len(st.SummarizerCalls) != 1 {
		t.Errorf("the survivor's budget = %+v, %v; want its one call", st, err)
	}
}

func testDeleteSessionEmpty(t *testing.T, s compaction.Store) {
	n, err := s.DeleteSession(opCtx(t), SessionID(t))
	if err != nil || n != 0 {
		t.Fatalf("DeleteSession of an unknown session = %d, %v; want 0, nil", n, err)
	}
}
