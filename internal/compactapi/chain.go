package compactapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/harness9/compaction-operator/internal/compactapi/authz"
)

// A route is an ordered chain of steps, each doing one thing to the request before its
// handler runs: authenticate, authorize, isolate the agents, read the conversation, limit
// (media type, size, in-flight share), resolve the session, read the body. The order is the
// API's contract: a caller without access learns nothing (not even whether the session
// exists or its body is acceptable), and the body is read and parsed before the session's
// engine is waited for, so a slow or stalled upload, or a malformed body, never holds up the
// session's other requests. The compactions of a session are serialized by its engine
// (compaction.ProgressiveCompactor); offloads need no order (the store keeps the first
// result of a tool call ID).

// call is one request on its way through a route's chain: what each step found, for the
// steps after it and the handler.
type call struct {
	w *statusWriter
	r *http.Request
	// namespace and name are the session's, from the path.
	namespace, name string
	log             *requestLog
	user            authenticationv1.UserInfo
	conversation    string
	// share is the request's share of the in-flight budget, released when it ends.
	share *inflight
	sess  *session
	body  []byte
}

// step is one step of a route's chain; an error answers the request and ends it.
type step func(c *call) error

// routeSpec describes a route.
type routeSpec struct {
	// name is the route's label in metrics and logs.
	name string
	// verb and subresource are what the caller must be allowed on the agentsessions
	// subresource (SubjectAccessReview).
	verb, subresource string
	needs             needs
	// maxBody bounds the body below Config.MaxBodyBytes (0: that bound).
	maxBody int64
}

// needs is what a route needs of its session.
type needs int

const (
	// needsStore: the session and the store at its pinned location (reads).
	needsStore needs = iota
	// needsEngine: also the policy's engine configuration and summarizer (the routes that
	// change the session's objects).
	needsEngine
	// needsSession: the AgentSession object only (routes that only write its status).
	needsSession
)

// route serves h behind the chain spec asks for, with the request deadline and metrics.
// parse is nil for routes without a body.
func route[Req any](s *Server, spec routeSpec,
	parse func(body []byte) (Req, error), h func(w http.ResponseWriter, r *http.Request, sess *session, req Req) error) http.Handler {
	maxBody := s.cfg.MaxBodyBytes
	if spec.maxBody > 0 && (maxBody <= 0 || spec.maxBody < maxBody) {
		maxBody = spec.maxBody
	}
	// The steps read the server's parts when a request comes, not when the route is made.
	chain := []step{
		authenticate(s),
		authorize(s, spec.verb, spec.subresource),
		isolateAgents(s),
		readConversation,
		limit(s, spec.name, maxBody, parse != nil),
		resolveSession(s, spec.needs),
	}
	if parse != nil {
		chain = append(chain, readBody(s, spec.name, maxBody))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, end := s.begin(w, r, spec.name)
		defer end()
		for _, st := range chain {
			if err := st(c); err != nil {
				s.fail(c.w, c.log, err)
				return
			}
		}
		var req Req
		if parse != nil {
			var err error
			if req, err = parse(c.body); err != nil {
				s.fail(c.w, c.log, err)
				return
			}
		}
		if err := h(c.w, c.r, c.sess, req); err != nil {
			s.fail(c.w, c.log, err)
		}
	})
}

// begin starts a call of the route named name: its deadline, and end counts it in the
// metrics and gives its in-flight share back.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, name string) (c *call, end func()) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	ns, sessionName := r.PathValue("namespace"), r.PathValue("name")
	c = &call{
		w: &statusWriter{ResponseWriter: w}, r: r.WithContext(ctx), namespace: ns, name: sessionName,
		log: &requestLog{kv: []any{routeLabel, name, "session", ns + "/" + sessionName}},
	}
	return c, func() {
		if c.share != nil {
			c.share.release()
		}
		cancel()
		s.metrics.Requests.WithLabelValues(name, strconv.Itoa(c.w.statusCode())).Inc()
		s.metrics.RequestDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	}
}

// authenticate reviews the bearer token (TokenReview): the caller.
func authenticate(s *Server) step {
	return func(c *call) error {
		token, err := authz.BearerToken(c.r)
		if err != nil {
			return err
		}
		if c.user, err = s.auth.Authenticate(c.r.Context(), token); err != nil {
			return err
		}
		return nil
	}
}

// authorize checks that the caller may verb the session's subresource (SubjectAccessReview).
func authorize(s *Server, verb, subresource string) step {
	return func(c *call) error {
		if err := s.auth.Authorize(c.r.Context(), c.user, verb, "agentsessions/"+subresource, c.namespace, c.name); err != nil {
			return err
		}
		c.log.with("user", c.user.Username)
		return nil
	}
}

// isolateAgents keeps an agent to its own sessions within the namespace (Server.checkOwner).
func isolateAgents(s *Server) step {
	return func(c *call) error { return s.checkOwner(c.r.Context(), c.user, c.namespace, c.name) }
}

// readConversation reads the conversation the request is for. Authorization is per session:
// any caller of the session may use any of its conversations (they separate an agent's
// conversations, not tenants).
func readConversation(c *call) error {
	conversation, err := conversationOf(c.r)
	if err != nil {
		return err
	}
	c.conversation = conversation
	if conversation != "" {
		c.log.with("conversation", conversation)
	}
	return nil
}

// limit takes the request's share of the in-flight budget within its caller's. A body (when
// the route takes one) must be JSON within maxBody, checked before the session is looked up
// or the body read; it will be read into memory, so it counts from the start, at its
// declared size or, sent without one, the most it may be.
func limit(s *Server, route string, maxBody int64, hasBody bool) step {
	return func(c *call) error {
		declared := int64(0)
		if hasBody {
			if err := requireJSON(c.r.Header); err != nil {
				c.w.Header().Set("Accept", jsonMediaType)
				return err
			}
			if c.r.ContentLength > maxBody {
				return &http.MaxBytesError{Limit: maxBody}
			}
			declared = c.r.ContentLength
			if declared < 0 {
				declared = maxBody
			}
		}
		share, err := s.inflight.admit(authz.CallerOf(c.user), s.inflight.weight(declared, 0))
		if err != nil {
			s.metrics.Throttled.WithLabelValues(route).Inc()
			return err
		}
		c.share = share
		return nil
	}
}

// resolveSession looks up what the route needs of the session.
func resolveSession(s *Server, n needs) step {
	return func(c *call) error {
		var sess *session
		var err error
		if n == needsSession {
			sess, err = s.sessions.lookupObject(c.r.Context(), c.namespace, c.name)
		} else {
			sess, err = s.sessions.lookup(c.r.Context(), c.namespace, c.name, n == needsEngine)
		}
		if err != nil {
			return err
		}
		sess.conversation = c.conversation
		c.sess = sess
		return nil
	}
}

// readBody reads the body, at most maxBody, and grows the request's share to what decoding
// it will hold: more than the body for small JSON values.
func readBody(s *Server, route string, maxBody int64) step {
	return func(c *call) error {
		body, err := s.readBody(c.w, c.r, maxBody)
		if err != nil {
			return err
		}
		values, err := s.checkValues(body)
		if err != nil {
			return err
		}
		if err := c.share.grow(s.inflight.weight(int64(len(body)), values)); err != nil {
			s.metrics.Throttled.WithLabelValues(route).Inc()
			return err
		}
		c.body = body
		return nil
	}
}
