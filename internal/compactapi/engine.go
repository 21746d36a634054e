package compactapi

import (
	"context"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/sharelru"
)

// Bounds of the engines a replica keeps.
const (
	// engineSessions bounds the sessions (conversations, each with an engine of its own)
	// whose engine a replica keeps (an engine holds the conversation's state: its anchors,
	// summary and offload index, tens of KiB).
	engineSessions = 4096
	// engineIdle is how long an engine is kept after its session's last compaction.
	engineIdle = 10 * time.Minute
	// sessionEngines caps the engines of one AgentSession (its conversations) on a replica:
	// a session's next conversation evicts the engine of its own least recently used one,
	// never another session's. An evicted conversation still works: its next turn builds
	// its engine again from the stored state (one more storage read).
	sessionEngines = 64
	// namespaceEngines caps the engines of one namespace's sessions on a replica (a quarter
	// of engineSessions): a tenant with many sessions (one per pod) evicts its own engines
	// past it, so it takes at most a quarter of the replica's engines from the others.
	namespaceEngines = engineSessions / 4
)

// engine is a session's compactor, kept on this replica between its requests so a turn does
// not build a compactor, validate its configuration and read the session's state again. The
// state is the stored one: the compactor revalidates its copy with one conditional read
// (compaction.WithStateRevalidation), so what other replicas saved is seen, except on a turn
// that continues from this replica's own answer within Config.StateTrust
// (compaction.WithStateTrust); its conditional write never overwrites a newer state.
// Correctness comes from the store's versions, never from this cache.
type engine struct {
	// key is what the engine was built from: another key (the policy, the session's window,
	// the summarizer's settings or key, the store changed) replaces it.
	key        engineKey
	c          *compaction.ProgressiveCompactor
	summarizer compaction.Summarizer
}

// engineKey is what a session's engine is built from, compared on every request: a struct of
// values, so the comparison allocates nothing (a formatted string cost 2% of the API's CPU).
type engineKey struct {
	cfg   compaction.Config
	sum   policy.SummarizerSpec
	store policy.SessionStore
	// policy: another policy charges another share of the summarizer budget.
	policy string
}

// newEngines is the replica's engines by conversation (storeID), each in its session's and
// its namespace's share (engineFor).
func newEngines() *sharelru.Cache[string, *engine] {
	return sharelru.New[string, *engine](engineSessions, engineIdle, sessionEngines, namespaceEngines)
}

// keyOf is what sess's engine is built from.
func keyOf(sess *session) engineKey {
	return engineKey{cfg: sess.cfg, sum: sess.sumSpec, store: sess.store, policy: sess.policy}
}

// engineFor returns the engine of the request's conversation of the session, building it
// when the replica has none for the session's current configuration. Concurrent requests
// of a conversation get the same engine; each conversation has its own (they are cached by
// sess.storeID()), so conversations of one session never share a state and compact in
// parallel. They share the session's summarizer budget (compaction.NewStateBudget).
func (s *Server) engineFor(sess *session) (*engine, error) {
	key := keyOf(sess)
	id := sess.storeID()
	s.enginesMu.Lock()
	defer s.enginesMu.Unlock()
	if s.engines != nil {
		// Get keeps it engineIdle from now.
		if e, ok := s.engines.Get(id); ok && e.key == key {
			return e, nil
		}
	}
	sum := sess.summarizer
	if sum == nil {
		var err error
		if sum, err = s.sessions.newSummarizer(sess.sumSpec); err != nil {
			return nil, &apiError{code: http.StatusServiceUnavailable, reason: ReasonSessionNotReady, msg: err.Error()}
		}
	}
	log := s.log.WithValues("session", sess.obj.Namespace+"/"+sess.obj.Name)
	if sess.conversation != "" {
		log = log.WithValues("conversation", sess.conversation)
	}
	// One summarizer budget for the whole session: every conversation's engine (the default
	// one's too), on every replica, charges the same object in the session's store, so
	// summarizer.maxCallsPerHour holds for the session, however many conversations it uses;
	// and within its namespace's and its policy's shares on this replica, so one session
	// per pod does not multiply it either.
	budget, err := s.summarizerBudget(sess)
	if err != nil {
		return nil, &apiError{code: http.StatusInternalServerError, reason: ReasonInternal, msg: "the session's summarizer budget: " + err.Error()}
	}
	opts := []compaction.Option{
		compaction.WithStore(sess.store), compaction.WithSessionID(id), compaction.WithSummarizerBudget(budget),
		compaction.WithSummarizer(sum), compaction.WithLastViewTokens(s.lastViewTokens(id)),
		compaction.WithLogger(log), compaction.WithStateRevalidation(), compaction.WithStateTrust(s.cfg.StateTrust),
	}
	if s.background != nil && s.cfg.SummariesOffTurn {
		// A deleted session's work must be cancelled: the sessions are watched before the
		// first work can be taken. s.cache is the manager's cache (its informers); a plain
		// reader (some tests) has none to watch. The informer is not waited for (the
		// context only bounds that wait): it runs on the manager's cache.
		if inf, ok := s.cache.(cache.Informers); ok {
			if err := s.background.watch(context.Background(), inf, s.sessionGone); err != nil {
				// Fail open: the turn is served; the watch is tried again with the next engine.
				s.log.Error(err, "deleted sessions' summaries off the turn will not be cancelled")
			}
		}
		// An LLM summarizer is never waited for on the turn: see compaction.WithBackground.
		opts = append(opts, compaction.WithBackground(s.background))
	}
	c, err := compaction.NewProgressiveCompactor(sess.cfg, opts...)
	if err != nil {
		return nil, &apiError{code: http.StatusConflict, reason: ReasonSessionNotReady, msg: "the session's policy does not make a valid configuration: " + err.Error()}
	}
	e := &engine{key: key, c: c, summarizer: sum}
	if s.engines != nil {
		s.engines.Add(id, e, sess.id, sess.obj.Namespace)
	}
	return e, nil
}
