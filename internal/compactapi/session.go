package compactapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/policy"
)

// session is what a request needs of its AgentSession. Every route gets the session and the
// store at its pinned location, which outlives the policy; the routes that change the session
// (compact, offload) also get the policy's engine configuration and summarizer (withEngine).
// id is the session's metadata.uid.
type session struct {
	obj *compactionv1alpha1.AgentSession
	id  string
	// conversation is the conversation of the session the request is for (the query
	// parameter conversation); empty for the session's default conversation.
	conversation string
	store        policy.SessionStore
	// Set for the routes that change the session only: the engine configuration and what
	// its summarizer is built from. summarizer, when set, is used instead (tests).
	cfg        compaction.Config
	sumSpec    policy.SummarizerSpec
	summarizer compaction.Summarizer
	// policy is the policy's key (policy.Key), for its share of the summarizer budget;
	// set with the engine configuration.
	policy string
	// anchorsInStatus: the policy asks for the anchors in status (conversation content,
	// readable by anyone who may get the session).
	anchorsInStatus bool
}

// storeID is the ID the engine and the store know the request's conversation by: the
// session's UID for its default conversation, else "{uid}/conversations/{conversation}",
// whose objects are under the session's, so the finalizer's DeleteSession(uid) removes
// them too. The session's status, events and metrics stay the session's (by sess.obj).
func (sess *session) storeID() string {
	return compaction.ConversationSessionID(sess.id, sess.conversation)
}

// resolver finds what a request needs of its session: the AgentSession, the store at its
// pinned location and, for the routes that change the session, its policy's engine
// configuration and summarizer. It is a part of its own, not the Server's methods, because
// it reads only these (the cache, pinned locations, Secrets, stores, summarizers and the
// operator's flags) and answers the same way whatever route asks (resolveSession).
type resolver struct {
	// cache reads the session, its policy and namespace, and pinned locations (sharedReader);
	// apiReader reads a location the cache may not have yet (pinned).
	cache, apiReader client.Reader
	secrets          policy.SecretReader
	stores           policy.StoreOpener
	summarizers      policy.SummarizerFactory
	// llm and llmNamespaced send the summarizer's requests of cluster and namespaced
	// policies; nil is the default client.
	llm, llmNamespaced *http.Client
	// locations keeps the sessions' decoded pinned locations (nil: decoded every request).
	locations *policy.DecodedLocations
	// locationIndex holds the pinned locations' ConfigMaps from the cache's informer (nil:
	// read from the cache).
	locationIndex *policy.LocationIndex
	// access is what the operator's flags let policies use.
	access policy.Access
	// metrics times the summarizers built (Metrics.timed).
	metrics *Metrics
}

// lookup resolves a Ready session; withEngine also resolves its policy's engine configuration
// and summarizer, which reads (records, tool results) do not need: they work with the
// summarizer's Secret missing and after the policy is deleted. Expected failures are
// *apiError with their HTTP status.
//
// The session's status is never read for what the request does: the session's ID in storage
// is its metadata.uid (not status.sessionID), and its objects are at the location the
// operator pinned for it (policy.Locations, a ConfigMap only the operator writes), not at
// status.records. Anyone allowed to write agentsessions/status could otherwise make the API
// read, overwrite and offload into another session's objects, or send a Secret of any
// namespace to an endpoint of their choosing.
func (r *resolver) lookup(ctx context.Context, namespace, name string, withEngine bool) (*session, error) {
	sess, err := r.lookupObject(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	pin, err := r.pinned(ctx, sess.obj)
	if err != nil {
		return nil, err
	}
	p, err := r.policyOf(ctx, sess.obj, withEngine)
	if err != nil {
		return nil, err
	}
	// What the operator's flags forbid is refused before any Secret is read.
	if err := r.access.CheckLocation(pin); err != nil {
		return nil, notReady(sess.obj, err)
	}
	if withEngine {
		if err := r.resolveEngine(ctx, sess, p); err != nil {
			return nil, err
		}
	}
	if sess.store, err = r.stores.Open(ctx, r.secrets, pin.Location, r.access.PinEndpoints(pin)); err != nil {
		return nil, &apiError{http.StatusServiceUnavailable, ReasonStorage, err.Error()}
	}
	return sess, nil
}

// lookupObject is the AgentSession, not being deleted: all a route that only writes its
// status (pass-through reports) needs, so a report is taken also while the session is not
// Ready (a proxy whose compactions fail says so).
func (r *resolver) lookupObject(ctx context.Context, namespace, name string) (*session, error) {
	var obj compactionv1alpha1.AgentSession
	if err := (sharedReader{r.cache}).Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &obj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, &apiError{http.StatusNotFound, ReasonNotFound, fmt.Sprintf("AgentSession %s/%s not found", namespace, name)}
		}
		return nil, fmt.Errorf("get AgentSession: %w", err)
	}
	if !obj.DeletionTimestamp.IsZero() {
		return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, fmt.Sprintf("AgentSession %s/%s is being deleted", namespace, name)}
	}
	return &session{obj: &obj, id: string(obj.UID)}, nil
}

// policyOf is the session's policy, or nil when it is gone and required is false: the
// pinned location is kept so the session's objects outlive their policy. A cluster policy is
// only for the namespaces its namespaceSelector selects: checked on every request, as a
// namespace can be relabelled after its sessions became Ready.
func (r *resolver) policyOf(ctx context.Context, obj *compactionv1alpha1.AgentSession, required bool) (*policy.Policy, error) {
	reader := sharedReader{r.cache}
	p, err := policy.Get(ctx, reader, obj.Namespace, obj.Spec.PolicyRef)
	switch {
	case errors.Is(err, policy.ErrNotFound) && !required:
		return nil, nil
	case errors.Is(err, policy.ErrNotFound):
		return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, err.Error()}
	case err != nil:
		return nil, err
	}
	if err := p.CheckNamespace(ctx, reader, obj.Namespace); err != nil {
		if errors.Is(err, policy.ErrNamespaceNotAllowed) || errors.Is(err, policy.ErrInvalidNamespaceSelector) {
			return nil, &apiError{http.StatusForbidden, ReasonNamespaceNotAllowed, err.Error()}
		}
		return nil, err
	}
	return p, nil
}

// notReady is the 409 for a session its policy or the operator's flags do not let be served.
func notReady(obj *compactionv1alpha1.AgentSession, err error) error {
	return &apiError{http.StatusConflict, ReasonSessionNotReady, fmt.Sprintf("AgentSession %s/%s is not Ready: %v", obj.Namespace, obj.Name, err)}
}

// sessionGone forgets a deleted session (its UID) on this replica: its summarizations off
// the turn are cancelled and store nothing (the session's objects are being deleted, and a
// summary written after that would outlive them), and its engines are dropped.
func (s *Server) sessionGone(uid string) {
	if s.background != nil {
		s.background.forget(uid)
	}
	if s.engines != nil {
		s.engines.RemoveGroup(0, uid)
	}
}

// sharedReader reads objects from the manager's cache without deep-copying them: what it
// returns shares its maps and slices with the cache, and must only be read. A request reads
// the session (twice, with checkOwner), its policy, the policy's namespace and the pinned
// location on every turn, and changes none of them (status writes start from a copy of their
// own, see applyStatus): the copies were about 2% of the manager's CPU under hack/loadtest.
type sharedReader struct{ client.Reader }

func (r sharedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return r.Reader.Get(ctx, key, obj, append(opts, client.UnsafeDisableDeepCopy)...)
}

// pinned is the session's pinned location: a session that was never Ready has none, and is
// not served. A session that was Ready once is served even when the storage probe fails now,
// so an outage fails open in the engine (records say what failed) instead of refusing the
// agent's turn.
func (r *resolver) pinned(ctx context.Context, obj *compactionv1alpha1.AgentSession) (*policy.Pinned, error) {
	ready := meta.FindStatusCondition(obj.Status.Conditions, compactionv1alpha1.ConditionReady)
	locations := policy.Locations{Namespace: r.access.ClusterResourceNamespace, Reader: sharedReader{r.cache}, Decoded: r.locations, Index: r.locationIndex}
	if ready != nil && ready.Status == metav1.ConditionTrue {
		// The session says it is Ready: its location may have been pinned a moment ago and
		// not be in the cache yet. (The condition only decides whether to ask the API
		// server; what is used is the ConfigMap.)
		locations.APIReader = r.apiReader
	}
	pin, err := locations.Get(ctx, obj)
	switch {
	case errors.Is(err, policy.ErrInvalidLocation):
		return nil, notReady(obj, err)
	case err != nil:
		return nil, err
	case pin == nil:
		msg := fmt.Sprintf("AgentSession %s/%s is not Ready", obj.Namespace, obj.Name)
		if ready != nil {
			msg += ": " + ready.Reason + ": " + ready.Message
		}
		return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, msg}
	}
	return pin, nil
}

// resolveEngine fills what the routes that change the session need of its policy p: the
// engine configuration and the summarizer.
func (r *resolver) resolveEngine(ctx context.Context, sess *session, p *policy.Policy) error {
	obj := sess.obj
	if err := r.access.Check(p); err != nil {
		return notReady(obj, err)
	}
	cfg, err := policy.EngineConfig(p.Spec, obj.Spec.ContextWindow)
	if err != nil {
		return notReady(obj, err)
	}
	// The summarizer itself is built with the session's engine (engineFor), once per engine.
	spec, err := p.SummarizerSpec(ctx, r.secrets, r.access.ClusterResourceNamespace, r.llmFor(p.Kind))
	if err != nil {
		return &apiError{http.StatusServiceUnavailable, ReasonSessionNotReady, err.Error()}
	}
	sess.cfg, sess.sumSpec, sess.policy = cfg, spec, p.Key()
	sess.anchorsInStatus = p.Spec.AnchorsInStatus == compactionv1alpha1.AnchorsInclude
	return nil
}

// llmFor is the summarizer's HTTP client for a policy of kind: its connections are checked
// against that kind's list.
func (r *resolver) llmFor(kind compactionv1alpha1.PolicyKind) *http.Client {
	if kind == compactionv1alpha1.PolicyKindCluster {
		return r.llm
	}
	return cmp.Or(r.llmNamespaced, r.llm)
}

// summarizerFor builds the policy's summarizer on this process's HTTP client. The API key
// is read through the short-lived Secret cache, so a rotated key is used within its TTL.
func (r *resolver) summarizerFor(ctx context.Context, p *policy.Policy) (compaction.Summarizer, error) {
	spec, err := p.SummarizerSpec(ctx, r.secrets, r.access.ClusterResourceNamespace, r.llmFor(p.Kind))
	if err != nil {
		return nil, err
	}
	return r.newSummarizer(spec)
}

// newSummarizer builds spec's summarizer, timed for the metrics.
func (r *resolver) newSummarizer(spec policy.SummarizerSpec) (compaction.Summarizer, error) {
	sum, err := r.summarizers(spec)
	if err != nil {
		return nil, err
	}
	return r.metrics.timed(sum), nil
}

// apiError is an answer with a status other than 500.
type apiError struct {
	code   int
	reason string
	msg    string
}

func (e *apiError) Error() string { return e.msg }
