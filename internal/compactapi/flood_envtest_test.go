package compactapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactapi/authz"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/policy"
)

// countingReviews counts the TokenReviews and SubjectAccessReviews sent to the real
// kube-apiserver, by the caller the review is about.
type countingReviews struct {
	client.Client
	tokens atomic.Int64
	mu     sync.Mutex
	access map[string]int
}

func (c *countingReviews) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	switch o := obj.(type) {
	case *authenticationv1.TokenReview:
		c.tokens.Add(1)
	case *authorizationv1.SubjectAccessReview:
		c.mu.Lock()
		c.access[o.Spec.User]++
		c.mu.Unlock()
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c *countingReviews) reviewsOf(user string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.access[user]
}

// countReviews makes e's server review through a counting client, with a new-token
// limiter of rate and burst (rate 0: none).
func (e *conversationEnv) countReviews(newTokenRate float64, newTokenBurst int) *countingReviews {
	c := &countingReviews{Client: e.c, access: map[string]int{}}
	e.server.auth = authz.New(c, compactclient.DefaultTokenAudience, newTokenRate, newTokenBurst)
	return c
}

// agent makes a ServiceAccount with the compaction-agent rights on the namespace's sessions
// and returns a token for it (bound to pod when pod is not nil).
func (e *conversationEnv) agent(t *testing.T, name string, pod *corev1.Pod) string { //nolint:unparam // a pod-bound token is one call away
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: name}}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(sa), sa); err != nil {
		if err := e.c.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: "agent-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agent"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: conversationNS, Name: name}}}); err != nil {
			t.Fatal(err)
		}
	}
	return e.mintToken(t, name, pod)
}

// mintToken is a new token of ServiceAccount name for the compaction API, bound to pod if set.
func (e *conversationEnv) mintToken(t *testing.T, name string, pod *corev1.Pod) string {
	t.Helper()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{compactclient.DefaultTokenAudience}, ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		tr.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: name}}
	if err := e.c.SubResource("token").Create(context.Background(), sa, tr); err != nil {
		t.Fatalf("token of %s: %v", name, err)
	}
	return tr.Status.Token
}

// client is an API client with token that does not retry a 429: every answer counts.
func (e *conversationEnv) client(t *testing.T, token string) *compactclient.Client {
	t.Helper()
	api, err := compactclient.New(e.url, compactclient.WithToken(token), compactclient.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// addSession adds a Ready session of policy p with its pinned location.
func (e *conversationEnv) addSession(t *testing.T, name string) *compactionv1alpha1.AgentSession {
	t.Helper()
	ctx := context.Background()
	var p compactionv1alpha1.CompactionPolicy
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: conversationNS, Name: "p"}, &p); err != nil {
		t.Fatal(err)
	}
	obj := builder.Session(conversationNS, name, "p").Build()
	if err := e.c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj.Status.Conditions = []metav1.Condition{{Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready",
		LastTransitionTime: metav1.Now(), ObservedGeneration: obj.Generation}}
	if err := e.c.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if _, err := (policy.Locations{Namespace: conversationCRN, Reader: e.c, Writer: e.c}).Pin(ctx, obj, policy.FromNamespaced(&p), conversationCRN); err != nil {
		t.Fatal(err)
	}
	return obj
}

// turns runs an agent's turns on the session every interval until stop is closed, and
// reports each answer that was not a 200.
func turns(t *testing.T, api *compactclient.Client, session string, interval time.Duration, stop <-chan struct{}) (done <-chan int) {
	out := make(chan int, 1)
	go func() {
		n := 0
		defer func() { out <- n }()
		msgs := markedHistory("LEGIT", 2)
		for {
			if _, err := api.Compact(context.Background(), conversationNS, session, compactclient.CompactRequest{Messages: msgs}); err != nil {
				t.Errorf("legitimate agent's turn %d during the flood: %v", n, err)
			}
			n++
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	return out
}

// TestAuthenticatedFloods (issue 28, item 3) drives the whole handler on a real
// kube-apiserver. A legitimate agent (a pod-bound token) compacts throughout; it must get
// every turn answered 200 (its client does not retry):
//
//   - Invented sessions: one valid token asks for 10,000 invented session names in its
//     namespace. Before, each sent a SubjectAccessReview and left an answer in the shared
//     cache of 10,000, evicting an idle tenant's cached answer. Now the caller's uncached
//     reviews are limited (DefaultCallerReviewBurst, then DefaultCallerReviewRate per
//     second; 429 past it) and it only ever holds callerAllowed entries of the cache: the
//     idle tenant's next turn is answered from the cache (no review).
//   - Junk tokens: JWT-shaped junk empties the new-token limiter; the agent's token then
//     rotates (a new token bound to the same pod). Before, the rotated token got 429 until
//     the flood ended. Now it is reviewed from its identity's own bucket and answered 200,
//     while a ServiceAccount never seen before still gets 429 (the limiter works).
func TestAuthenticatedFloods(t *testing.T) {
	e := startConversationEnv(t)
	ctx := context.Background()
	reviews := e.countReviews(1, 20)
	e.agent(t, "legit", nil)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: "agent-pod"}, Spec: corev1.PodSpec{ServiceAccountName: "legit",
		Containers: []corev1.Container{{Name: "agent", Image: "agent:latest"}}}}
	if err := e.c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	legit := e.client(t, e.mintToken(t, "legit", pod))
	idleToken := e.agent(t, "idle", nil)
	attacker := e.agent(t, "attacker", nil)
	idle := e.client(t, idleToken)
	msgs := markedHistory("IDLE", 2)
	if _, err := idle.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: msgs}); err != nil {
		t.Fatalf("idle tenant's first turn: %v", err)
	}
	const idleUser = "system:serviceaccount:" + conversationNS + ":idle"
	const attackerUser = "system:serviceaccount:" + conversationNS + ":attacker"

	t.Run("InventedSessions", func(t *testing.T) {
		stop := make(chan struct{})
		done := turns(t, legit, e.sess.Name, 20*time.Millisecond, stop)
		start := time.Now()
		codes := flood(t, 10000, nil, func(i int) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/namespaces/%s/sessions/invented-%d/compact", e.url, conversationNS, i),
				strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+attacker)
			req.Header.Set("Content-Type", "application/json")
			return req
		})
		elapsed := time.Since(start)
		close(stop)
		n := <-done
		t.Logf("flood of 10,000 invented sessions in %s: answers %v; the legitimate agent's %d turns answered 200", elapsed.Round(time.Millisecond), codes, n)
		sent := reviews.reviewsOf(attackerUser)
		if bound := DefaultCallerReviewBurst + int(DefaultCallerReviewRate*elapsed.Seconds()) + 2; sent > bound {
			t.Errorf("the flood cost %d SubjectAccessReviews in %s, want at most %d", sent, elapsed, bound)
		}
		if codes[http.StatusTooManyRequests] < 10000-sent-2 || codes[http.StatusNotFound] > sent {
			t.Errorf("flood answered %v, want 429 beyond the caller's %d reviews", codes, sent)
		}
		if held := countKeys(e.server.auth.AllowedKeys(), attackerUser+"\x00"); held > authz.CallerAllowed {
			t.Errorf("the attacker holds %d entries of the authorization cache, want at most %d", held, authz.CallerAllowed)
		}
		// Kept past its expiry, until evicted: still there.
		if countKeys(e.server.auth.AllowedKeys(), idleUser+"\x00") == 0 {
			t.Error("the idle tenant's cached answer was evicted by the flood")
		}
		before := reviews.reviewsOf(idleUser)
		if _, err := idle.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: msgs}); err != nil {
			t.Fatalf("idle tenant's turn after the flood: %v", err)
		}
		// Its answer may have expired (30 s) on a slow machine: then it is re-asked once,
		// as a known answer, whatever the attacker did.
		if got := reviews.reviewsOf(idleUser) - before; got != 0 && elapsed < authz.AllowedTTL {
			t.Errorf("idle tenant's turn after the flood cost %d SubjectAccessReviews: its cached answer was evicted", got)
		}
	})

	t.Run("JunkTokensAndRotation", func(t *testing.T) {
		stop := make(chan struct{})
		done := turns(t, legit, e.sess.Name, 20*time.Millisecond, stop)
		var junk atomic.Int64
		floodDone, stopFlood := make(chan map[int]int, 1), make(chan struct{})
		go func() {
			floodDone <- flood(t, 1<<30, stopFlood, func(i int) *http.Request {
				req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/namespaces/%s/sessions/%s/compact", e.url, conversationNS, e.sess.Name),
					strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
				claims := fmt.Sprintf(`{"aud":[%q],"sub":"system:serviceaccount:x:y","kubernetes.io":{"serviceaccount":{"uid":"junk-%d"}}}`,
					compactclient.DefaultTokenAudience, junk.Add(1))
				req.Header.Set("Authorization", "Bearer "+jwtLike(claims))
				req.Header.Set("Content-Type", "application/json")
				return req
			})
		}()
		// The flood has emptied the new-token limiter: a ServiceAccount never seen gets 429.
		time.Sleep(300 * time.Millisecond)
		newcomer := e.client(t, e.agent(t, "newcomer", nil))
		_, err := newcomer.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: msgs})
		var ae *compactclient.APIError
		if !asAPIErr(err, &ae) || ae.Code != http.StatusTooManyRequests {
			t.Errorf("a new ServiceAccount during the junk flood: %v, want 429 (the flood must have emptied the new-token limiter)", err)
		}
		// The agent's projected token rotates during the flood, twice.
		for i := range 2 {
			rotated := e.client(t, e.mintToken(t, "legit", pod))
			if _, err := rotated.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: markedHistory("LEGIT", 2)}); err != nil {
				t.Errorf("the legitimate agent's rotated token %d during the junk flood: %v, want 200", i+1, err)
			}
		}
		close(stopFlood)
		codes := <-floodDone
		close(stop)
		n := <-done
		t.Logf("junk flood answers %v; %d TokenReviews in all; the legitimate agent's %d turns answered 200", codes, reviews.tokens.Load(), n)
	})
}

// flood sends n requests made by req from 32 workers, or until stop is closed, and counts the
// answers by status.
func flood(t *testing.T, n int, stop <-chan struct{}, req func(i int) *http.Request) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	defer hc.CloseIdleConnections()
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := hc.Do(req(i))
				if err != nil {
					t.Errorf("flood request %d: %v", i, err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return codes
}

// countKeys counts the keys that start with prefix.
func countKeys(keys []string, prefix string) int {
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// setSharedBudgets gives s the summarizer budget shares of namespaceSessions and
// policySessions sessions.
func setSharedBudgets(s *Server, namespaceSessions, policySessions int) {
	s.sharedBudgets = newSharedBudgets(namespaceSessions, policySessions)
}

func asAPIErr(err error, target **compactclient.APIError) bool { return errors.As(err, target) }

// TestStalledUploadsShare (issue 28, item 7): one caller opens 64 uploads of a declared
// 1 MiB and sends no byte of their bodies. Each counts at its Content-Length from the start,
// so before, they held the whole 64 MiB budget and every other tenant's request was answered
// 429 until --api-read-timeout ended them. Now one caller's requests hold at most its share
// (an eighth of the budget): its uploads past the share are answered 429 at once, and
// another caller's turns are answered 200.
func TestStalledUploadsShare(t *testing.T) {
	e := startConversationEnv(t)
	other := e.client(t, e.agent(t, "other", nil))
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	// The caller has compacted before: its token and access are cached, as an agent's are.
	if _, err := e.api.Compact(context.Background(), conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: markedHistory("WARM", 2)}); err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 0, 64)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range 64 {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/namespaces/%s/sessions/%s/compact HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
			conversationNS, e.sess.Name, u.Host, e.token, 1<<20)
	}
	// Each upload either holds its 1 MiB of the budget (waiting for its body) or was
	// answered 429 at once.
	b := e.server.inflight
	held := func() int64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.used
	}
	throttled := func() int {
		var m dto.Metric
		if err := e.server.metrics.Throttled.WithLabelValues("compact").Write(&m); err != nil {
			t.Fatal(err)
		}
		return int(m.GetCounter().GetValue())
	}
	deadline := time.Now().Add(60 * time.Second)
	for int(held()>>20)+throttled() < 64 {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled uploads: %d MiB held, %d answered 429; want 64 in all", held()>>20, throttled())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("64 stalled uploads of 1 MiB from one caller: %d answered 429 at once, %d MiB of the %d MiB budget held",
		throttled(), held()>>20, b.limit>>20)
	if share := b.limit / DefaultCallerInflightShare; held() > share {
		t.Errorf("one caller's stalled uploads hold %d bytes of the budget, want at most its share %d", held(), share)
	}
	for i := range 10 {
		if _, err := other.Compact(context.Background(), conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: markedHistory("OTHER", 2)}); err != nil {
			t.Fatalf("another caller's turn %d during the stalled uploads: %v, want 200", i, err)
		}
	}
}

// TestConversationsPerSession (issue 28, item 5): one session opening conversation after
// conversation keeps at most sessionEngines engines on the replica, evicting its own least
// recently used ones, never another session's; an evicted conversation continues from its
// stored state. Before, each conversation took a slot of the replica-wide LRU.
func TestConversationsPerSession(t *testing.T) {
	e := startConversationEnv(t)
	ctx := context.Background()
	other := e.addSession(t, "other")
	if _, err := e.api.Compact(ctx, conversationNS, other.Name, compactclient.CompactRequest{Messages: markedHistory("OTHER", 2)}); err != nil {
		t.Fatal(err)
	}
	const n = sessionEngines + 6
	if _, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: markedHistory("C0", 2)}, compactclient.InConversation("c-0")); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		conv := fmt.Sprintf("c-%d", i)
		if _, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: markedHistory("C", 2)}, compactclient.InConversation(conv)); err != nil {
			t.Fatalf("conversation %s: %v", conv, err)
		}
	}
	if got := countKeys(e.server.engines.Keys(), string(e.sess.UID)+"/"); got != sessionEngines {
		t.Errorf("the session holds %d engines after %d conversations, want %d", got, n, sessionEngines)
	}
	if got := e.server.engines.Len(); got != sessionEngines+1 {
		t.Errorf("%d engines on the replica, want the session's %d and the other session's", got, sessionEngines)
	}
	if _, ok := e.server.engines.Get(string(other.UID)); !ok {
		t.Error("the other session's engine was evicted")
	}
	// The first conversation was evicted; its next turn continues from its stored state.
	if _, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: markedHistory("C0", 3)}, compactclient.InConversation("c-0")); err != nil {
		t.Fatalf("the evicted conversation's next turn: %v", err)
	}
}

// TestSummarizerBudgetSharedByNamespaceAndPolicy (issue 28, item 5): a pod creator gets one
// session per pod, each with summarizer.maxCallsPerHour of its own. With maxCallsPerHour 1,
// four sessions of one namespace reaching Full made four paid calls; now the namespace's
// sessions share --api-summarizer-namespace-sessions (here 2) sessions' worth on the replica:
// two calls, the others summarized extractively with a note naming the namespace's share.
// The policy's share (--api-summarizer-policy-sessions, here 1 for fresh sessions) bounds
// them the same way.
func TestSummarizerBudgetSharedByNamespaceAndPolicy(t *testing.T) {
	llm, calls := fakeOpenAI(t)
	e := startConversationEnv(t, func(spec *compactionv1alpha1.CompactionPolicySpec) {
		spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI,
			OpenAI: compactionv1alpha1.OpenAISummarizerSpec{BaseURL: llm.URL + "/v1", Model: "m"}, MaxCallsPerHour: ptr.To[int32](1)}
	})
	ctx := context.Background()
	run := func(sessions []string, want int64, share string) {
		t.Helper()
		calls.Store(0)
		throttled := 0
		for _, name := range sessions {
			resp, err := e.api.Compact(ctx, conversationNS, name, compactclient.CompactRequest{Messages: fullHistory(t, "S"+name)})
			if err != nil {
				t.Fatalf("session %s: %v", name, err)
			}
			rec := resp.Record
			if rec.Tier != compaction.TierFull || rec.Summarized == 0 {
				t.Fatalf("session %s: tier %s, summarized %d; want a Full summary", name, rec.Tier, rec.Summarized)
			}
			if rec.SummarizerThrottled {
				throttled++
				if notes := strings.Join(rec.Notes, "; "); !strings.Contains(notes, share) {
					t.Errorf("session %s: notes %q do not name %s", name, notes, share)
				}
			}
		}
		if n := calls.Load(); n != want || throttled != len(sessions)-int(want) {
			t.Errorf("%d sessions: %d LLM calls, %d throttled; want %d calls", len(sessions), n, throttled, want)
		}
	}
	setSharedBudgets(e.server, 2, 100)
	names := make([]string, 0, 4)
	names = append(names, e.sess.Name)
	for i := range 3 {
		names = append(names, e.addSession(t, fmt.Sprintf("pod-%d", i)).Name)
	}
	run(names, 2, fmt.Sprintf("the sessions of namespace %q share", conversationNS))

	setSharedBudgets(e.server, 100, 1)
	names = make([]string, 0, 2)
	for i := range 2 {
		names = append(names, e.addSession(t, fmt.Sprintf("fresh-%d", i)).Name)
	}
	run(names, 1, "the sessions of policy CompactionPolicy/"+conversationNS+"/p share")
}

// jwtLike is a JWT-shaped token with claims.
func jwtLike(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + "." + enc([]byte("signature"))
}
