package compactapi

import (
	"crypto/sha256"
	"net/http"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/compaction/summarize/openai"
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
	key        engineKey
	c          *compaction.ProgressiveCompactor
	summarizer compaction.Summarizer
}

// engineKey is what a session's engine is built from, compared on every request: a struct of
// values, so the comparison allocates nothing (a formatted string cost 2% of the API's CPU).
// The API key enters as its hash, and the temperature by value (the pointer is new on every
// request).
type engineKey struct {
	cfg            compaction.Config
	openAI         bool
	sum            openai.Config
	temperature    float64
	hasTemperature bool
	apiKey         [sha256.Size]byte
	store          *s3.Store
}

func newEngines() *expirable.LRU[string, *engine] {
	return expirable.NewLRU[string, *engine](engineSessions, nil, engineIdle)
}

// keyOf is what sess's engine is built from.
func keyOf(sess *session) engineKey {
	k := engineKey{cfg: sess.cfg, openAI: sess.sumOpenAI, sum: sess.sumCfg, store: sess.store}
	if k.sum.APIKey != "" {
		k.apiKey = sha256.Sum256([]byte(k.sum.APIKey))
		k.sum.APIKey = ""
	}
	if t := k.sum.Temperature; t != nil {
		k.temperature, k.hasTemperature, k.sum.Temperature = *t, true, nil
	}
	return k
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
