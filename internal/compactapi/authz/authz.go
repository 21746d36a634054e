// Package authz authenticates the compaction API's callers (TokenReview of their bearer
// token, for the API's own audience) and authorizes them (SubjectAccessReview on an
// agentsessions subresource), with caches that keep the review load and a flood's reach
// bounded. Refusals are *Error, with the HTTP status and reason to answer.
package authz

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/sharelru"
)

// Cache lifetimes of authentication and authorization answers: short, so a revoked token
// or binding stops working within 40 s (AllowedTTL + confirmDenial), long enough that an
// agent's turn costs no TokenReview or SubjectAccessReview round trip.
const (
	tokenTTL   = 30 * time.Second
	AllowedTTL = 30 * time.Second
	deniedTTL  = 5 * time.Second
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

// Cache sizes. Positive and negative answers are kept apart: a flood of junk tokens (or of
// denied requests) only ever evicts other junk, never the answers that let agents work. The
// answers about a caller are that caller's share of the caches (see CallerOf), capped: one
// caller asking about session after invented session only evicts its own answers.
const (
	goodCacheSize = 10000
	badCacheSize  = 2000
	// CallerAllowed and callerDenied cap one caller's entries in the positive and negative
	// authorization caches (an agent needs a handful: compact, toolresults, records of its
	// session); callerTokens its tokens in the positive token cache (a pod has one or two at
	// a time, around a rotation).
	CallerAllowed = 256
	callerDenied  = 64
	callerTokens  = 16
	// knownIdentities bounds the identities (ServiceAccount UID and pod UID) remembered as
	// authenticated before, each with a bucket of its own for its next tokens; callerLimiters
	// the callers with a bucket of uncached SubjectAccessReviews.
	knownIdentities = 20000
	callerLimiters  = 10000
)

// maxTokenBytes bounds a bearer token. ServiceAccount tokens are JWTs of 1-2 KiB; with
// generous claims (OIDC) a few KiB.
const maxTokenBytes = 16 << 10

// Defaults of the review limits.
const (
	// DefaultNewTokenRate and DefaultNewTokenBurst limit the reviews of tokens the server
	// has no answer for (a token it knows is good is re-reviewed without limit). Over it the
	// request is answered 429 with Retry-After.
	DefaultNewTokenRate  = 20
	DefaultNewTokenBurst = 100
	// DefaultCallerReviewRate and DefaultCallerReviewBurst limit the SubjectAccessReviews
	// of one caller (a ServiceAccount, or one pod's bound tokens of it) that no cached answer
	// spares: one token asking about invented sessions gets 429 with Retry-After past it,
	// and the review budget and caches stay with everyone else. Answers it knows are
	// re-asked without limit when they expire.
	DefaultCallerReviewRate  = 2
	DefaultCallerReviewBurst = 20
	// DefaultRotatedTokenRate and DefaultRotatedTokenBurst are the bucket each identity
	// authenticated before (ServiceAccount UID and pod UID) has for its new tokens: a pod's
	// rotated projected token is reviewed from it, not from the new-token limiter a flood of
	// junk tokens may have emptied (it falls back to that one when its own is empty). The
	// kubelet rotates a one-hour token about every 48 minutes.
	DefaultRotatedTokenRate  = 0.1
	DefaultRotatedTokenBurst = 4
)

// Authorizer checks bearer tokens with TokenReview and permissions with SubjectAccessReview.
// The caches are LRUs keyed by the token's hash (and the caller and attributes for access);
// an expired entry stays until evicted, for staleGrace and confirmDenial.
type Authorizer struct {
	// c sends the reviews; in the manager a client with its own rate limiter.
	c client.Client
	// audience is the one audience a token must be for (TokenReviewSpec.Audiences): never
	// the Kubernetes API's own, so tokens are not interchangeable between the two.
	audience string
	// newTokens limits the reviews of tokens with no cached answer, or one that was "no".
	newTokens *rate.Limiter
	// identities are the identities authenticated before (identityKey), each with the bucket
	// its new tokens are reviewed from before newTokens.
	identities   *lru.Cache[string, *rate.Limiter]
	rotatedRate  rate.Limit
	rotatedBurst int
	callers      *lru.Cache[string, *rate.Limiter]
	callerRate   rate.Limit
	callerBurst  int
	// reviews counts TokenReviews by result, refused counts tokens refused unreviewed by
	// reason; nil counts nothing.
	reviews, refused *prometheus.CounterVec

	// goodTokens, allowed and denied are shared by callers (CallerOf), each capped.
	goodTokens *sharelru.Cache[[32]byte, tokenEntry]
	badTokens  *lru.Cache[[32]byte, time.Time] // when the "no" expires
	allowed    *sharelru.Cache[string, accessEntry]
	denied     *sharelru.Cache[string, accessEntry]
}

// Option changes what New builds.
type Option func(*Authorizer)

// WithCallerLimit sets the rate (per second) and burst of one caller's SubjectAccessReviews
// that no cached answer spares (default DefaultCallerReviewRate and -Burst); rate <= 0 does
// not limit them.
func WithCallerLimit(perSecond float64, burst int) Option {
	return func(a *Authorizer) { a.callerRate, a.callerBurst = rate.Limit(perSecond), burst }
}

// WithMetrics counts the TokenReviews by result (reviews) and the tokens and questions
// refused unreviewed by reason (refused).
func WithMetrics(reviews, refused *prometheus.CounterVec) Option {
	return func(a *Authorizer) { a.reviews, a.refused = reviews, refused }
}

// New builds an authorizer that reviews with c, for tokens of audience; newTokenRate <= 0
// does not limit the reviews of new tokens.
func New(c client.Client, audience string, newTokenRate float64, newTokenBurst int, opts ...Option) *Authorizer {
	a := &Authorizer{c: c, audience: audience, newTokens: rate.NewLimiter(rate.Inf, 0)}
	if newTokenRate > 0 {
		a.newTokens = rate.NewLimiter(rate.Limit(newTokenRate), max(newTokenBurst, 1))
	}
	a.rotatedRate, a.rotatedBurst = DefaultRotatedTokenRate, DefaultRotatedTokenBurst
	a.callerRate, a.callerBurst = DefaultCallerReviewRate, DefaultCallerReviewBurst
	// lru.New fails only for a size <= 0.
	a.identities, _ = lru.New[string, *rate.Limiter](knownIdentities)
	a.callers, _ = lru.New[string, *rate.Limiter](callerLimiters)
	a.goodTokens = sharelru.New[[32]byte, tokenEntry](goodCacheSize, 0, callerTokens)
	a.badTokens, _ = lru.New[[32]byte, time.Time](badCacheSize)
	a.allowed = sharelru.New[string, accessEntry](goodCacheSize, 0, CallerAllowed)
	a.denied = sharelru.New[string, accessEntry](badCacheSize, 0, callerDenied)
	for _, opt := range opts {
		opt(a)
	}
	return a
}

// AllowedKeys are the keys of the positive authorization answers kept, least recently used
// first (each starts with the caller's username and a NUL): what a caller holds of the cache.
func (a *Authorizer) AllowedKeys() []string { return a.allowed.Keys() }

// Extra keys of a pod-bound ServiceAccount token's user info (the kubelet's projected
// tokens are bound to their pod).
const (
	PodUIDExtra  = "authentication.kubernetes.io/pod-uid"
	PodNameExtra = "authentication.kubernetes.io/pod-name"
)

// Error is a refusal: the HTTP status and reason (compactclient.Reason*) to answer with.
type Error struct {
	Code   int
	Reason string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// CallerOf is who a caller is for its share of the caches and its review bucket: the user,
// and the pod a bound token is for (each pod of a ServiceAccount is a caller of its own, so
// a hundred pods starting at once do not share one bucket).
func CallerOf(user authenticationv1.UserInfo) string {
	return user.Username + "\x00" + strings.Join(user.Extra[PodUIDExtra], ",")
}

// identityKey is the identity a token is for, to pick the bucket its review is charged
// to: the ServiceAccount's UID and, for a bound token, the pod's. "" without a
// ServiceAccount UID.
func identityKey(saUID, podUID string) string {
	if saUID == "" {
		return ""
	}
	return saUID + "/" + podUID
}

// unverifiedIdentity is the identityKey of a ServiceAccount token's claims
// ("kubernetes.io": serviceaccount.uid, pod.uid), read without checking the signature:
// only to choose which bucket the token's TokenReview is charged to, never to decide
// anything about the caller. A forged token naming a known identity can at most use up
// that identity's bucket (its real tokens then wait for the shared one, as before), and
// needs the UIDs, which only readers of the ServiceAccount or pod know.
func unverifiedIdentity(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		K8s struct {
			ServiceAccount struct {
				UID string `json:"uid"`
			} `json:"serviceaccount"`
			Pod *struct {
				UID string `json:"uid"`
			} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	pod := ""
	if claims.K8s.Pod != nil {
		pod = claims.K8s.Pod.UID
	}
	return identityKey(claims.K8s.ServiceAccount.UID, pod)
}

// allowNewToken decides whether a token with no positive answer may be reviewed now: from
// its identity's own bucket when that identity was authenticated before (a rotated token),
// else (or when that bucket is empty) from the shared new-token limiter.
func (a *Authorizer) allowNewToken(token string) bool {
	if id := unverifiedIdentity(token); id != "" {
		if lim, ok := a.identities.Get(id); ok && lim.Allow() {
			return true
		}
	}
	return a.newTokens.Allow()
}

// remember marks user's identity as authenticated, with a full bucket for its next tokens.
func (a *Authorizer) remember(user authenticationv1.UserInfo) {
	id := identityKey(user.UID, strings.Join(user.Extra[PodUIDExtra], ","))
	if id == "" || a.rotatedRate <= 0 {
		return
	}
	a.identities.ContainsOrAdd(id, rate.NewLimiter(a.rotatedRate, max(a.rotatedBurst, 1)))
}

// allowReview decides whether user may have a SubjectAccessReview no cached answer spares.
func (a *Authorizer) allowReview(user authenticationv1.UserInfo) bool {
	if a.callerRate <= 0 {
		return true
	}
	caller := CallerOf(user)
	lim, ok := a.callers.Get(caller)
	if !ok {
		lim = rate.NewLimiter(a.callerRate, max(a.callerBurst, 1))
		if prev, found, _ := a.callers.PeekOrAdd(caller, lim); found {
			lim = prev
		}
	}
	return lim.Allow()
}

// tokenEntry is a positive TokenReview answer. While a denial is being confirmed it stays
// positive with a short expiry, and deniedSince says since when answers say no.
type tokenEntry struct {
	user        authenticationv1.UserInfo
	expires     time.Time
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

// BearerToken is the request's bearer token, or a 401.
func BearerToken(r *http.Request) (string, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return "", &Error{http.StatusUnauthorized, compactclient.ReasonUnauthorized, "no bearer token: send the ServiceAccount token in the Authorization header"}
	}
	return token, nil
}

// jwtShaped reports whether token can be a ServiceAccount token: a JWT in compact form,
// three non-empty base64url segments without padding, at most maxTokenBytes. Anything else
// is refused without a TokenReview.
func jwtShaped(token string) bool {
	if len(token) > maxTokenBytes {
		return false
	}
	segments := 0
	for seg := range strings.SplitSeq(token, ".") {
		segments++
		if seg == "" || segments > 3 {
			return false
		}
		for i := 0; i < len(seg); i++ {
			if !base64URL(seg[i]) {
				return false
			}
		}
	}
	return segments == 3
}

// base64URL reports whether c is in the base64url alphabet (RFC 4648 §5), padding excluded.
func base64URL(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '_'
}

func (a *Authorizer) Authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
	if !jwtShaped(token) {
		a.count(a.refused, "malformed")
		return authenticationv1.UserInfo{}, &Error{http.StatusUnauthorized, compactclient.ReasonUnauthorized, fmt.Sprintf(
			"the bearer token is not a ServiceAccount token (a JWT of at most %d bytes): send a ServiceAccount token for audience %q", maxTokenBytes, a.audience)}
	}
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	prev, known := a.goodTokens.Get(key)
	if known && now.Before(prev.expires) {
		return prev.user, nil
	}
	if until, ok := a.badTokens.Get(key); ok && now.Before(until) {
		return authenticationv1.UserInfo{}, a.invalidToken(token)
	}
	// A token known to be good is re-reviewed whatever the load: a flood of new tokens
	// must not lock out the agents already working.
	if !known && !a.allowNewToken(token) {
		a.count(a.refused, "rate_limited")
		return authenticationv1.UserInfo{}, &Error{http.StatusTooManyRequests, compactclient.ReasonTooManyRequests,
			"too many new tokens to check at the moment; retry after Retry-After"}
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}}}
	if err := a.c.Create(ctx, tr); err != nil {
		a.count(a.reviews, "error")
		if known && now.Before(prev.expires.Add(staleGrace)) {
			return prev.user, nil
		}
		return authenticationv1.UserInfo{}, unavailable("TokenReview", err)
	}
	// An authenticator that ignores audiences answers with none: such a token is valid for
	// the Kubernetes API, so it is refused here (as the TokenReview API documents).
	if tr.Status.Authenticated && slices.Contains(tr.Status.Audiences, a.audience) {
		a.count(a.reviews, "authenticated")
		a.badTokens.Remove(key)
		a.goodTokens.Add(key, tokenEntry{user: tr.Status.User, expires: now.Add(tokenTTL)}, CallerOf(tr.Status.User))
		a.remember(tr.Status.User)
		return tr.Status.User, nil
	}
	a.count(a.reviews, "rejected")
	if known {
		if hold, since := holdDenial(true, prev.expires, prev.deniedSince, now); hold {
			a.goodTokens.Add(key, tokenEntry{user: prev.user, expires: now.Add(recheck), deniedSince: since})
			return prev.user, nil
		}
		a.goodTokens.Remove(key)
	}
	a.badTokens.Add(key, now.Add(tokenTTL))
	return authenticationv1.UserInfo{}, a.invalidToken(token)
}

func (a *Authorizer) count(c *prometheus.CounterVec, label string) {
	if c != nil {
		c.WithLabelValues(label).Inc()
	}
}

// invalidToken is the 401 for a token the review refused. It names the audience to ask for,
// and says when the token is for another one (read from the token without verifying it,
// only for the message): a token for the Kubernetes API is the usual mistake.
func (a *Authorizer) invalidToken(token string) error {
	how := fmt.Sprintf("send a ServiceAccount token for audience %q (a projected serviceAccountToken volume with audience: %s, or kubectl create token SERVICE_ACCOUNT --audience %s)",
		a.audience, a.audience, a.audience)
	if aud := unverifiedAudiences(token); len(aud) > 0 && !slices.Contains(aud, a.audience) {
		return &Error{http.StatusUnauthorized, compactclient.ReasonUnauthorized,
			fmt.Sprintf("the bearer token is for audience %s, not the compaction API's: %s", clipped(strings.Join(aud, ",")), how)}
	}
	return &Error{http.StatusUnauthorized, compactclient.ReasonUnauthorized, "the bearer token is not valid: " + how}
}

// clipped shortens what the caller sent for an error message.
func clipped(s string) string {
	if len(s) > maxQuoted {
		return s[:maxQuoted] + "..."
	}
	return s
}

// maxQuoted bounds what of a caller's input an error message quotes.
const maxQuoted = 64

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

// AllowedTo asks whether user may verb the resource ("agentsessions" or
// "agentsessions/SUBRESOURCE") named name in namespace, with the caches, stale grace and
// denial confirmation of authorize. It returns the answer and the authorizer's reason.
func (a *Authorizer) AllowedTo(ctx context.Context, user authenticationv1.UserInfo, verb, resource, namespace, name string) (bool, error) {
	key := strings.Join([]string{user.Username, user.UID, strings.Join(user.Groups, ","), extraKey(user.Extra), verb, resource, namespace, name}, "\x00")
	now := time.Now()
	prev, known := a.allowed.Get(key)
	if known && now.Before(prev.expires) {
		return true, nil
	}
	if d, ok := a.denied.Get(key); ok && now.Before(d.expires) {
		return false, nil
	}
	// An answer it knows is re-asked whatever the load; a new question is the caller's.
	caller := CallerOf(user)
	if !known && !a.allowReview(user) {
		a.count(a.refused, "caller_rate_limited")
		return false, &Error{http.StatusTooManyRequests, compactclient.ReasonTooManyRequests, fmt.Sprintf(
			"%s asked about too many sessions at once (at most %d new authorization checks, then %g per second); retry after Retry-After",
			user.Username, a.callerBurst, float64(a.callerRate))}
	}
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	res, sub, _ := strings.Cut(resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: compactionv1alpha1.GroupVersion.Group,
			Resource: res, Subresource: sub, Name: name,
		},
	}}
	if err := a.c.Create(ctx, sar); err != nil {
		if known && now.Before(prev.expires.Add(staleGrace)) {
			return true, nil
		}
		return false, unavailable("SubjectAccessReview", err)
	}
	if sar.Status.Allowed {
		a.denied.Remove(key)
		a.allowed.Add(key, accessEntry{allowed: true, reason: sar.Status.Reason, expires: now.Add(AllowedTTL)}, caller)
		return true, nil
	}
	if known {
		if hold, since := holdDenial(true, prev.expires, prev.deniedSince, now); hold {
			a.allowed.Add(key, accessEntry{allowed: true, expires: now.Add(recheck), deniedSince: since})
			return true, nil
		}
		a.allowed.Remove(key)
	}
	a.denied.Add(key, accessEntry{reason: sar.Status.Reason, expires: now.Add(deniedTTL)}, caller)
	return false, nil
}

// extraKey is the user's extra info in a stable order, for cache keys: a pod-bound token's
// pod UID is part of who the caller is.
func extraKey(extra map[string]authenticationv1.ExtraValue) string {
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.Join(extra[k], ","))
		b.WriteByte(';')
	}
	return b.String()
}

// Authorize is AllowedTo with a 403 for "no".
func (a *Authorizer) Authorize(ctx context.Context, user authenticationv1.UserInfo, verb, resource, namespace, name string) error {
	ok, err := a.AllowedTo(ctx, user, verb, resource, namespace, name)
	if err != nil {
		return err
	}
	if !ok {
		msg := fmt.Sprintf("%s cannot %s %s %q in namespace %q (bind the compaction-agent ClusterRole)",
			user.Username, verb, resource, name, namespace)
		return &Error{http.StatusForbidden, compactclient.ReasonForbidden, msg}
	}
	return nil
}

// unavailable is the answer when the API server cannot check a request: 503, retry.
func unavailable(review string, err error) error {
	return &Error{http.StatusServiceUnavailable, compactclient.ReasonAuthUnavailable,
		fmt.Sprintf("cannot check the request with the Kubernetes API server (%s: %v); retry", review, err)}
}
