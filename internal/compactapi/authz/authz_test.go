package authz

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestHoldDenial(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name             string
		prevOK           bool
		prevExpires      time.Time
		prevDeniedSince  time.Time
		hold             bool
		wantSinceIsNow   bool
		wantSinceIsPrior bool
	}{
		{name: "no earlier yes", prevOK: false, prevExpires: now, hold: false},
		{name: "first no after a yes", prevOK: true, prevExpires: now.Add(-time.Second), hold: true, wantSinceIsNow: true},
		{name: "no for a while, under the window", prevOK: true, prevExpires: now, prevDeniedSince: now.Add(-confirmDenial / 2), hold: true, wantSinceIsPrior: true},
		{name: "no for the whole window", prevOK: true, prevExpires: now, prevDeniedSince: now.Add(-confirmDenial), hold: false, wantSinceIsPrior: true},
		{name: "the yes is too old", prevOK: true, prevExpires: now.Add(-staleGrace - time.Second), hold: false},
	}
	for _, tc := range cases {
		hold, since := holdDenial(tc.prevOK, tc.prevExpires, tc.prevDeniedSince, now)
		if hold != tc.hold {
			t.Errorf("%s: hold = %v, want %v", tc.name, hold, tc.hold)
		}
		if tc.wantSinceIsNow && !since.Equal(now) {
			t.Errorf("%s: denials since %v, want now", tc.name, since)
		}
		if tc.wantSinceIsPrior && !since.Equal(tc.prevDeniedSince) {
			t.Errorf("%s: denials since %v, want the earlier %v", tc.name, since, tc.prevDeniedSince)
		}
	}
}

// reviewServer answers TokenReviews and SubjectAccessReviews like a kube-apiserver would for
// one good token, and counts them. down makes every review fail.
type reviewServer struct {
	client.Client
	audience string
	good     string
	down     atomic.Bool
	deny     atomic.Bool
	tokens   atomic.Int64
	access   atomic.Int64
}

func (f *reviewServer) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	if f.down.Load() {
		return errors.New("connection refused")
	}
	switch o := obj.(type) {
	case *authenticationv1.TokenReview:
		f.tokens.Add(1)
		if o.Spec.Token == f.good && !f.deny.Load() && slices.Contains(o.Spec.Audiences, f.audience) {
			o.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{f.audience},
				User: authenticationv1.UserInfo{Username: "system:serviceaccount:ns:agent"}}
		}
	case *authorizationv1.SubjectAccessReview:
		f.access.Add(1)
		o.Status.Allowed = !f.deny.Load()
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	return nil
}

// jwtLike is a JWT-shaped token with claims.
func jwtLike(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + "." + enc([]byte("signature"))
}

func TestJWTShaped(t *testing.T) {
	for _, tc := range []struct {
		token string
		want  bool
	}{
		{jwtLike(`{"aud":"x"}`), true},
		{"a.b.c", true},
		{"a.b", false},
		{"a.b.c.d", false},
		{"a..c", false},
		{"a.b=.c", false},
		{"a.b+/.c", false},
		{"not-a-token", false},
		{"a.b." + strings.Repeat("c", maxTokenBytes), false},
	} {
		if got := jwtShaped(tc.token); got != tc.want {
			t.Errorf("jwtShaped(%.40q) = %v, want %v", tc.token, got, tc.want)
		}
	}
}

// TestTokenAudience: a token the review does not authenticate for the API's audience is a
// 401 that names the audience, and says so when the token is for another audience.
func TestTokenAudience(t *testing.T) {
	srv := &reviewServer{audience: "compaction.harness9.io", good: jwtLike(`{"aud":["compaction.harness9.io"]}`)}
	a := New(srv, srv.audience, 0, 0)
	ctx := context.Background()
	if _, err := a.Authenticate(ctx, srv.good); err != nil {
		t.Fatalf("good token: %v", err)
	}
	_, err := a.Authenticate(ctx, jwtLike(`{"aud":["https://kubernetes.default.svc.cluster.local"]}`))
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != http.StatusUnauthorized ||
		!strings.Contains(ae.Msg, "for audience https://kubernetes.default.svc.cluster.local") ||
		!strings.Contains(ae.Msg, "--audience compaction.harness9.io") {
		t.Errorf("token for the Kubernetes API: %v, want a 401 naming both audiences", err)
	}
	_, err = a.Authenticate(ctx, "not-a-jwt")
	if !errors.As(err, &ae) || ae.Code != http.StatusUnauthorized || !strings.Contains(ae.Msg, "not a ServiceAccount token") {
		t.Errorf("malformed token: %v, want a 401", err)
	}
	if n := srv.tokens.Load(); n != 2 {
		t.Errorf("%d TokenReviews, want 2 (the malformed token is never reviewed)", n)
	}
}

// TestTokenFloodKeepsGoodTokens: 10,000 malformed and 10,000 JWT-shaped junk tokens cost at
// most the new-token burst (plus the rate over the time taken) in TokenReviews, are answered
// 401 or 429, and evict nothing: the good token is still answered from the cache, and once
// expired it is reviewed again even with the new-token limiter empty.
func TestTokenFloodKeepsGoodTokens(t *testing.T) {
	srv := &reviewServer{audience: "aud", good: jwtLike(`{"aud":"aud"}`)}
	const burst, perSecond = 20, 5
	a := New(srv, srv.audience, perSecond, burst)
	ctx := context.Background()
	user := authenticationv1.UserInfo{Username: "system:serviceaccount:ns:agent"}
	if _, err := a.Authenticate(ctx, srv.good); err != nil {
		t.Fatal(err)
	}
	if err := a.Authorize(ctx, user, "create", "agentsessions/compact", "ns", "s"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var codes sync.Map
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 20000; i += 16 {
				token := fmt.Sprintf("junk-%d", i)
				if i%2 == 1 {
					token = jwtLike(fmt.Sprintf(`{"aud":"aud","n":%d}`, i))
				}
				_, err := a.Authenticate(ctx, token)
				var ae *Error
				if !errors.As(err, &ae) {
					t.Errorf("junk token %d: %v", i, err)
					return
				}
				n, _ := codes.LoadOrStore(ae.Code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				// A legitimate agent keeps working throughout.
				if i%100 == 0 {
					if _, err := a.Authenticate(ctx, srv.good); err != nil {
						t.Errorf("good token during the flood: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reviews := srv.tokens.Load() - 1
	if bound := int64(burst + perSecond*elapsed.Seconds() + 1); reviews > bound {
		t.Errorf("%d TokenReviews for the flood in %s, want at most %d", reviews, elapsed, bound)
	}
	codes.Range(func(k, v any) bool {
		t.Logf("junk answered %d: %d times", k, v.(*atomic.Int64).Load())
		if k != http.StatusUnauthorized && k != http.StatusTooManyRequests {
			t.Errorf("junk answered %d", k)
		}
		return true
	})
	if a.goodTokens.Len() != 1 {
		t.Errorf("%d entries in the good-token cache, want the one good token", a.goodTokens.Len())
	}
	before := srv.tokens.Load()
	if _, err := a.Authenticate(ctx, srv.good); err != nil || srv.tokens.Load() != before {
		t.Errorf("good token after the flood: %v, %d reviews (want a cached answer)", err, srv.tokens.Load()-before)
	}
	// Expired: reviewed again, limiter or not.
	key := sha256.Sum256([]byte(srv.good))
	e, _ := a.goodTokens.Get(key)
	e.expires = time.Now().Add(-time.Second)
	a.goodTokens.Add(key, e)
	if a.newTokens.Tokens() >= 1 {
		a.newTokens.AllowN(time.Now(), int(a.newTokens.Tokens()))
	}
	if _, err := a.Authenticate(ctx, srv.good); err != nil || srv.tokens.Load() != before+1 {
		t.Errorf("expired good token with the limiter empty: %v, %d reviews (want 1)", err, srv.tokens.Load()-before)
	}
}

// TestAuthStaleGraceAndConfirmDenial: a known good token and permission keep working while
// the API server is down, and a "no" after a "yes" is only believed after confirmDenial.
func TestAuthStaleGraceAndConfirmDenial(t *testing.T) {
	srv := &reviewServer{audience: "aud", good: jwtLike(`{"aud":"aud"}`)}
	a := New(srv, srv.audience, 0, 0)
	ctx := context.Background()
	user, err := a.Authenticate(ctx, srv.good)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Authorize(ctx, user, "create", "agentsessions/compact", "ns", "s"); err != nil {
		t.Fatal(err)
	}
	expire := func() {
		key := sha256.Sum256([]byte(srv.good))
		e, _ := a.goodTokens.Get(key)
		e.expires = time.Now().Add(-time.Second)
		a.goodTokens.Add(key, e)
		for _, k := range a.allowed.Keys() {
			ae, _ := a.allowed.Get(k)
			ae.expires = time.Now().Add(-time.Second)
			a.allowed.Add(k, ae)
		}
	}
	expire()
	srv.down.Store(true)
	if _, err := a.Authenticate(ctx, srv.good); err != nil {
		t.Errorf("known token while the API server is down: %v", err)
	}
	if err := a.Authorize(ctx, user, "create", "agentsessions/compact", "ns", "s"); err != nil {
		t.Errorf("known permission while the API server is down: %v", err)
	}
	var ae *Error
	if _, err := a.Authenticate(ctx, jwtLike(`{"n":1}`)); !errors.As(err, &ae) || ae.Code != http.StatusServiceUnavailable {
		t.Errorf("unknown token while the API server is down: %v, want 503", err)
	}
	srv.down.Store(false)
	srv.deny.Store(true)
	if _, err := a.Authenticate(ctx, srv.good); err != nil {
		t.Errorf("first no after a yes is held back: %v", err)
	}
	if err := a.Authorize(ctx, user, "create", "agentsessions/compact", "ns", "s"); err != nil {
		t.Errorf("first denial after an allow is held back: %v", err)
	}
	// Denials that lasted confirmDenial are believed.
	key := sha256.Sum256([]byte(srv.good))
	e, _ := a.goodTokens.Get(key)
	e.expires, e.deniedSince = time.Now().Add(-time.Millisecond), time.Now().Add(-confirmDenial)
	a.goodTokens.Add(key, e)
	if _, err := a.Authenticate(ctx, srv.good); !errors.As(err, &ae) || ae.Code != http.StatusUnauthorized {
		t.Errorf("no confirmed for confirmDenial: %v, want 401", err)
	}
	if a.goodTokens.Contains(key) || !a.badTokens.Contains(key) {
		t.Error("a confirmed no must move the token to the bad-token cache")
	}
}

// BenchmarkJunkToken is what a junk token costs the server once the new-token bucket is
// empty: malformed ones are refused by their shape, JWT-shaped ones by the bucket.
func BenchmarkJunkToken(b *testing.B) {
	srv := &reviewServer{audience: "aud"}
	a := New(srv, srv.audience, 1e-9, 1)
	a.newTokens.Allow()
	ctx := context.Background()
	for _, tc := range []struct{ name, token string }{
		{"malformed", strings.Repeat("x", 2048)},
		{"jwt-shaped", jwtLike(`{"aud":"aud","sub":"` + strings.Repeat("x", 1500) + `"}`)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := a.Authenticate(ctx, tc.token); err == nil {
					b.Fatal("junk accepted")
				}
			}
			if srv.tokens.Load() != 0 {
				b.Fatalf("%d TokenReviews", srv.tokens.Load())
			}
		})
	}
}
