package compactapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/harness9/compaction-operator/compaction"
)

// Defaults of the summarizer budgets shared by sessions (Config.SummarizerNamespaceSessions
// and Config.SummarizerPolicySessions): a namespace's sessions together get at most 20
// sessions' summarizer.maxCallsPerHour an hour, a policy's (all namespaces) 100.
const (
	DefaultSummarizerNamespaceSessions = 20
	DefaultSummarizerPolicySessions    = 100
	// sharedBudgetKeys bounds the namespaces and policies whose calls a replica counts (a
	// window is 60 counters); one evicted starts over.
	sharedBudgetKeys = 10000
)

// sharedBudgets count the paid summarizer calls of each namespace and each policy on this
// replica, in windows of an hour by the minute, on top of each session's stored budget
// (compaction.StateBudget): one session per pod, or many policies of one tenant, cannot
// multiply summarizer.maxCallsPerHour past these. The counts are this replica's only: with
// R replicas serving a namespace, it may make up to R times as many calls (the session's own
// budget is exact across replicas).
type sharedBudgets struct {
	// namespaceSessions and policySessions are how many sessions' maxCallsPerHour a
	// namespace's and a policy's sessions share; <= 0 does not limit.
	namespaceSessions, policySessions int
	mu                                sync.Mutex
	windows                           *lru.Cache[string, *callWindow]
}

func newSharedBudgets(namespaceSessions, policySessions int) *sharedBudgets {
	w, _ := lru.New[string, *callWindow](sharedBudgetKeys) // fails only for a size <= 0
	return &sharedBudgets{namespaceSessions: namespaceSessions, policySessions: policySessions, windows: w}
}

// callWindow counts calls per minute over the last hour.
type callWindow struct {
	count [60]int
	at    [60]int64 // the Unix minute count[i] counts
}

func (w *callWindow) total(minute int64) int {
	n := 0
	for i := range w.count {
		if minute-w.at[i] < 60 {
			n += w.count[i]
		}
	}
	return n
}

// next is when the oldest counted minute leaves the window.
func (w *callWindow) next(minute int64) time.Time {
	oldest := minute
	for i := range w.count {
		if minute-w.at[i] < 60 && w.count[i] > 0 && w.at[i] < oldest {
			oldest = w.at[i]
		}
	}
	return time.Unix((oldest+60)*60, 0)
}

func (w *callWindow) add(minute int64, d int) {
	i := minute % 60
	if w.at[i] != minute {
		if d < 0 {
			return
		}
		w.at[i], w.count[i] = minute, 0
	}
	w.count[i] = max(w.count[i]+d, 0)
}

// sharedLimit is one of the windows a call is charged to.
type sharedLimit struct {
	key, what string
	sessions  int
}

// reserve counts a call at now in each of limits' windows, unless one of them already holds
// its sessions times limit calls: then nothing is counted and the error says which.
// release takes the call back.
func (b *sharedBudgets) reserve(now time.Time, limit int, limits ...sharedLimit) (release func(), err error) {
	minute := now.Unix() / 60
	b.mu.Lock()
	defer b.mu.Unlock()
	var ws []*callWindow
	for _, l := range limits {
		if l.sessions <= 0 {
			continue
		}
		w, ok := b.windows.Get(l.key)
		if !ok {
			w = &callWindow{}
			b.windows.Add(l.key, w)
		}
		if most := l.sessions * limit; w.total(minute) >= most {
			return nil, fmt.Errorf("the summarizer budget %s share (%d sessions' maxCallsPerHour: %d calls per hour on this replica) is used up until %s",
				l.what, l.sessions, most, w.next(minute).UTC().Format(time.RFC3339))
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		w.add(minute, 1)
	}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, w := range ws {
			w.add(minute, -1)
		}
	}, nil
}

// layeredBudget is a session's stored budget, charged only when its namespace's and its
// policy's windows on this replica have room; a call the session's budget refuses is taken
// back from them.
type layeredBudget struct {
	session compaction.SummarizerBudget
	shared  *sharedBudgets
	limits  []sharedLimit
}

func (b *layeredBudget) Charge(ctx context.Context, now time.Time, limit int) (bool, time.Time, error) {
	release, err := b.shared.reserve(now, limit, b.limits...)
	if err != nil {
		// An error, not a "no": the record then says which budget is used up, not the
		// session's own.
		return false, time.Time{}, err
	}
	ok, next, err := b.session.Charge(ctx, now, limit)
	if !ok || err != nil {
		release()
	}
	return ok, next, err
}

// summarizerBudget is sess's summarizer budget: its stored one, within its namespace's and
// its policy's shares on this replica.
func (s *Server) summarizerBudget(sess *session) (compaction.SummarizerBudget, error) {
	budget, err := compaction.NewStateBudget(sess.store, sess.id)
	if err != nil || s.sharedBudgets == nil {
		return budget, err
	}
	ns := sess.obj.Namespace
	return &layeredBudget{session: budget, shared: s.sharedBudgets, limits: []sharedLimit{
		{key: "namespace\x00" + ns, what: fmt.Sprintf("the sessions of namespace %q", ns), sessions: s.sharedBudgets.namespaceSessions},
		{key: "policy\x00" + sess.policy, what: fmt.Sprintf("the sessions of policy %s", sess.policy), sessions: s.sharedBudgets.policySessions},
	}}, nil
}
