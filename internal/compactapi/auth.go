package compactapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// Cache lifetimes of authentication and authorization answers: short, so a revoked token
// or binding stops working within 40 s (allowedTTL + confirmDenial), long enough that an
// agent's turn costs no TokenReview or SubjectAccessReview round trip.
const (
	tokenTTL      = 30 * time.Second
	allowedTTL    = 30 * time.Second
	deniedTTL     = 5 * time.Second
	maxAuthCached = 10000
	// staleGrace is how long past its expiry a positive answer is still used while the API
	// server cannot be asked (a restart or an upgrade): agents keep compacting through it.
	// A token or binding revoked meanwhile stops working once the API server answers again.
	staleGrace = 5 * time.Minute
	// confirmDenial is how long a "no" that contradicts a recent "yes" is re-asked (every
	// second) before it is believed: a kube-apiserver that just restarted answers before its
	// RBAC and token caches are filled, and says no to callers it allows a second later. A
	// real revocation takes effect this much later.
	confirmDenial = 10 * time.Second
	recheck       = time.Second
)

// authorizer checks bearer tokens with TokenReview and permissions with SubjectAccessReview.
type authorizer struct {
	c client.Client
	// audience is the one audience a token must be for (TokenReviewSpec.Audiences): never
	// the Kubernetes API's own, so tokens are not interchangeable between the two.
	audience string

	mu     sync.Mutex
	tokens map[[32]byte]tokenEntry
	access map[string]accessEntry
}

type tokenEntry struct {
	user    authenticationv1.UserInfo
	ok      bool
	expires time.Time
	// deniedSince is when answers began to contradict ok (see confirmDenial).
	deniedSince time.Time
}

type accessEntry struct {
	allowed     bool
	reason      string
	expires     time.Time
	deniedSince time.Time
}

// holdDenial decides what to do with a negative answer given the cached one: when the cached
// answer was positive and recent, the denial is held back until it has lasted confirmDenial,
// and the answer asked again every second. It returns whether to keep the positive answer
// and since when answers have been negative.
func holdDenial(prevOK bool, prevExpires, prevDeniedSince, now time.Time) (bool, time.Time) {
	if !prevOK || now.After(prevExpires.Add(staleGrace)) {
		return false, time.Time{}
	}
	since := prevDeniedSince
	if since.IsZero() {
		since = now
	}
	return now.Sub(since) < confirmDenial, since
}

// check authenticates the request's bearer token and authorizes verb on the session's
// subresource. It returns the caller's user name.
func (a *authorizer) check(ctx context.Context, r *http.Request, verb, subresource, namespace, name string) (string, error) {
	h := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return "", &apiError{http.StatusUnauthorized, ReasonUnauthorized, "no bearer token: send the ServiceAccount token in the Authorization header"}
	}
	user, err := a.authenticate(ctx, strings.TrimSpace(token))
	if err != nil {
		return "", err
	}
	if err := a.authorize(ctx, user, verb, subresource, namespace, name); err != nil {
		return user.Username, err
	}
	return user.Username, nil
}

func (a *authorizer) authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	a.mu.Lock()
	e, ok := a.tokens[key]
	a.mu.Unlock()
	if !ok || now.After(e.expires) {
		tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}}}
		if err := a.c.Create(ctx, tr); err != nil {
			if ok && e.ok && now.Before(e.expires.Add(staleGrace)) {
				return e.user, nil
			}
			return authenticationv1.UserInfo{}, unavailable("TokenReview", err)
		}
		// An authenticator that ignores audiences answers with none: such a token is valid for
		// the Kubernetes API, so it is refused here (as the TokenReview API documents).
		authenticated := tr.Status.Authenticated && slices.Contains(tr.Status.Audiences, a.audience)
		next := tokenEntry{user: tr.Status.User, ok: authenticated, expires: now.Add(tokenTTL)}
		if !next.ok && ok {
			if hold, since := holdDenial(e.ok, e.expires, e.deniedSince, now); hold {
				next = tokenEntry{user: e.user, ok: true, expires: now.Add(recheck), deniedSince: since}
			}
		}
		e = next
		a.mu.Lock()
		if a.tokens == nil || len(a.tokens) >= maxAuthCached {
			a.tokens = make(map[[32]byte]tokenEntry)
		}
		a.tokens[key] = e
		a.mu.Unlock()
	}
	if !e.ok {
		return authenticationv1.UserInfo{}, a.invalidToken(token)
	}
	return e.user, nil
}

// invalidToken is the 401 for a token the review refused. It names the audience to ask for,
// and says when the token is for another one (read from the token without verifying it,
// only for the message): a token for the Kubernetes API is the usual mistake.
func (a *authorizer) invalidToken(token string) error {
	how := fmt.Sprintf("send a ServiceAccount token for audience %q (a projected serviceAccountToken volume with audience: %s, or kubectl create token SERVICE_ACCOUNT --audience %s)",
		a.audience, a.audience, a.audience)
	if aud := unverifiedAudiences(token); len(aud) > 0 && !slices.Contains(aud, a.audience) {
		return &apiError{http.StatusUnauthorized, ReasonUnauthorized,
			fmt.Sprintf("the bearer token is for audience %s, not the compaction API's: %s", clip(strings.Join(aud, ",")), how)}
	}
	return &apiError{http.StatusUnauthorized, ReasonUnauthorized, "the bearer token is not valid: " + how}
}

// unverifiedAudiences reads the aud claim of a JWT without checking its signature; nil when
// the token is not a JWT with one. Only for error messages.
func unverifiedAudiences(token string) []string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(payload, &claims) != nil || len(claims.Aud) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		return []string{one}
	}
	var many []string
	if json.Unmarshal(claims.Aud, &many) == nil {
		return many
	}
	return nil
}

func (a *authorizer) authorize(ctx context.Context, user authenticationv1.UserInfo, verb, subresource, namespace, name string) error {
	key := strings.Join([]string{user.Username, user.UID, strings.Join(user.Groups, ","), verb, subresource, namespace, name}, "\x00")
	now := time.Now()
	a.mu.Lock()
	e, ok := a.access[key]
	a.mu.Unlock()
	if !ok || now.After(e.expires) {
		extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Group: compactionv1alpha1.GroupVersion.Group,
				Resource: "agentsessions", Subresource: subresource, Name: name,
			},
		}}
		if err := a.c.Create(ctx, sar); err != nil {
			if ok && e.allowed && now.Before(e.expires.Add(staleGrace)) {
				return nil
			}
			return unavailable("SubjectAccessReview", err)
		}
		ttl := deniedTTL
		if sar.Status.Allowed {
			ttl = allowedTTL
		}
		next := accessEntry{allowed: sar.Status.Allowed, reason: sar.Status.Reason, expires: now.Add(ttl)}
		if !next.allowed && ok {
			if hold, since := holdDenial(e.allowed, e.expires, e.deniedSince, now); hold {
				next = accessEntry{allowed: true, expires: now.Add(recheck), deniedSince: since}
			}
		}
		e = next
		a.mu.Lock()
		if a.access == nil || len(a.access) >= maxAuthCached {
			a.access = make(map[string]accessEntry)
		}
		a.access[key] = e
		a.mu.Unlock()
	}
	if !e.allowed {
		msg := fmt.Sprintf("%s cannot %s agentsessions/%s %q in namespace %q (bind the compaction-agent ClusterRole)",
			user.Username, verb, subresource, name, namespace)
		return &apiError{http.StatusForbidden, ReasonForbidden, msg}
	}
	return nil
}

// unavailable is the answer when the API server cannot check a request: 503, retry.
func unavailable(review string, err error) error {
	return &apiError{http.StatusServiceUnavailable, ReasonAuthUnavailable,
		fmt.Sprintf("cannot check the request with the Kubernetes API server (%s: %v); retry", review, err)}
}
