package compactapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/harness9/compaction-operator/compaction"
)

// Bounds of the engines a replica keeps.
const (
	// engineSessions bounds the sessions (conversations, each with an engine of its own)
	// whose engine a replica keeps (an engine holds the conversation's state: its anchors,
	// summary and offload index, tens of KiB).
	engineSessions = 4096
	// engineIdle is how long an engine is kept after its session's last compaction.
	engineIdle = 10 * time.Minute
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
	key        string
	c          *compaction.ProgressiveCompactor
	summarizer compaction.Summarizer
}

func newEngines() *expirable.LRU[string, *engine] {
	return expirable.NewLRU[string, *engine](engineSessions, nil, engineIdle)
}

// engineKey identifies what sess's engine is built from. The API key enters as its hash.
func engineKey(sess *session) string {
	sum := sess.sumCfg
	if sum.APIKey != "" {
		h := sha256.Sum256([]byte(sum.APIKey))
		sum.APIKey = hex.EncodeToString(h[:])
	}
	return fmt.Sprintf("%+v|%t|%+v|%p", sess.cfg, sess.sumOpenAI, sum, sess.store)
}

// engineFor returns the engine of the request's conversation of the session, building it
// when the replica has none for the session's current configuration. Concurrent requests
// of a conversation get the same engine; each conversation has its own (they are cached by
// sess.storeID()), so conversations of one session never share a state and compact in
// parallel. They share the session's summarizer budget (compaction.NewStateBudget).
func (s *Server) engineFor(sess *session) (*engine, error) {
	key := engineKey(sess)
	id := sess.storeID()
	s.enginesMu.Lock()
	defer s.enginesMu.Unlock()
	if s.engines != nil {
		if e, ok := s.engines.Get(id); ok && e.key == key {
			s.engines.Add(id, e) // kept engineIdle from now
			return e, nil
		}
	}
	sum := sess.summarizer
	if sum == nil {
		var err error
		if sum, err = s.newSummarizer(sess.sumCfg, sess.sumOpenAI); err != nil {
			return nil, &apiError{code: http.StatusServiceUnavailable, reason: ReasonSessionNotReady, msg: err.Error()}
		}
	}
	log := s.log.WithValues("session", sess.obj.Namespace+"/"+sess.obj.Name)
	if sess.conversation != "" {
		log = log.WithValues("conversation", sess.conversation)
	}
	// One summarizer budget for the whole session: every conversation's engine (the default
	// one's too), on every replica, charges the same object in the session's store, so
	// summarizer.maxCallsPerHour holds for the session, however many conversations it uses.
	budget, err := compaction.NewStateBudget(sess.store, sess.id)
	if err != nil {
		return nil, &apiError{code: http.StatusInternalServerError, reason: ReasonInternal, msg: "the session's summarizer budget: " + err.Error()}
	}
	c, err := compaction.NewProgressiveCompactor(sess.cfg,
		compaction.WithStore(sess.store), compaction.WithSessionID(id), compaction.WithSummarizerBudget(budget),
		compaction.WithSummarizer(sum), compaction.WithLastViewTokens(s.lastViewTokens(id)),
		compaction.WithLogger(log), compaction.WithStateRevalidation(), compaction.WithStateTrust(s.cfg.StateTrust))
	if err != nil {
		return nil, &apiError{code: http.StatusConflict, reason: ReasonSessionNotReady, msg: "the session's policy does not make a valid configuration: " + err.Error()}
	}
	e := &engine{key: key, c: c, summarizer: sum}
	if s.engines != nil {
		s.engines.Add(id, e)
	}
	return e, nil
}
