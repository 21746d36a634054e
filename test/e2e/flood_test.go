package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactapi"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// Namespaces of TestAuthenticatedFloods: the attacker's (a valid agent of its own namespace)
// and the tenant's whose agent works throughout.
const (
	floodAttackerNS = "flood-attacker"
	floodTenantNS   = "flood-tenant"
	// floodInvented is how many invented session names the attacker asks about, and
	// floodWorkers how many requests it keeps in flight.
	floodInvented = 10000
	floodWorkers  = 32
	// floodNewTokenRate and floodNewTokenBurst are the manager's new-token limiter here: a
	// junk flood empties it at once.
	floodNewTokenRate  = 10
	floodNewTokenBurst = 50
)

// TestAuthenticatedFloods runs issue 28's item 3 against the manager binary on a real
// kube-apiserver and MinIO. An agent of another namespace replays the turns of
// testdata/long-session.jsonl (delta requests, as compactclient.Session sends them) from
// before the first flood to after the second; every turn must be answered 200, and its
// HTTP client counts every 429 on the wire, also those compactclient retried after their
// Retry-After, so a 429 is seen whether or not it reached the caller:
//
//   - InventedSessions: one valid agent token of namespace A asks for 10,000 invented session
//     names in its own namespace, 32 at a time. Its role allows all of them, so before the
//     per-caller limit each name cost a SubjectAccessReview (as many as the review client's
//     50/s let through, for minutes). Now the kube-apiserver serves at most the caller's
//     burst and rate of reviews (plus the tenant's re-asked answer), the rest is answered
//     429 at once, and the tenant's turns are not held up.
//   - JunkTokensAndRotation: thousands of random JWT-shaped tokens empty the new-token
//     limiter (a ServiceAccount never seen is answered 429, so the limiter is shown empty);
//     meanwhile the tenant's token rotates twice (new TokenRequests for its ServiceAccount,
//     as the kubelet rotates a projected token) and its turns go on with each new token.
//     Before, the rotated token was refused 429 like the junk, and after compactclient's
//     retries the error reached the agent. Now a rotated token of a ServiceAccount
//     authenticated before is reviewed from that identity's own bucket: no 429 at all.
func TestAuthenticatedFloods(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	mgr := cl.StartManager(bin, func(c *configv1alpha1.Configuration) {
		c.API.Reviews.NewTokenRate, c.API.Reviews.NewTokenBurst = floodNewTokenRate, floodNewTokenBurst
	})
	c, ctx := cl.Client, context.Background()
	for _, n := range []string{floodAttackerNS, floodTenantNS} {
		testenv.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	cl.CreateMinIOPolicy(floodTenantNS, "tenant", "flood-tenant", m, window, nil)
	sess := cl.CreateReadySession(floodTenantNS, "tenant-agent", "tenant")
	attacker := cl.BindAgent(floodAttackerNS, "attacker")
	history := testenv.MustLoad(t, filepath.Join(testenv.RepoRoot(t), "testdata", "long-session.jsonl"))

	agent := &floodAgent{mgr: mgr, session: sess.Name, history: history, turns: compaction.AssistantTurns(history), done: map[int]int{}}
	agent.wire = &floodWire{base: mgr.HTTPClient().Transport}
	agent.token.Store(ptr.To(cl.BindAgent(floodTenantNS, "tenant-agent")))
	stopAgent := make(chan struct{})
	agentDone := agent.run(stopAgent)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(stopAgent)
			<-agentDone
		}
	}
	defer stop()
	// The agent works (its token and access are cached, as a working agent's are) before
	// any flood starts.
	testenv.Eventually(t, waitFor, "the tenant's agent answered before the floods", func() (bool, string) {
		return agent.answered() >= 3, agent.summary()
	})

	t.Run("InventedSessions", func(t *testing.T) {
		sarsBefore := apiserverPOSTs(t, cl, "subjectaccessreviews")
		turnsBefore, wireBefore, errsBefore := agent.answered(), agent.wire.tooMany.Load(), agent.errCount()
		start := time.Now()
		// Bounded in time: before the per-caller limit, 10,000 reviews at the review
		// client's 50/s would take minutes.
		deadline := make(chan struct{})
		timer := time.AfterFunc(30*time.Second, func() { close(deadline) })
		defer timer.Stop()
		f := startFlood(t, mgr, floodInvented, deadline, func(i int) (string, string) {
			return fmt.Sprintf("%s/v1/namespaces/%s/sessions/invented-%d/compact", mgr.URL, floodAttackerNS, i), attacker
		})
		<-f.done
		elapsed := time.Since(start)
		sars := apiserverPOSTs(t, cl, "subjectaccessreviews") - sarsBefore
		turns := agent.answered() - turnsBefore
		t.Logf("%d requests for invented sessions in %s: %s; %d SubjectAccessReviews served; the tenant's agent: %d turns answered, %d 429s on the wire",
			f.sent.Load(), elapsed.Round(time.Millisecond), f.codes(), sars, turns, agent.wire.tooMany.Load()-wireBefore)

		// The attacker's burst and rate, and the tenant's answer re-asked when it expires
		// (30 s), with a little slack.
		bound := int64(compactapi.DefaultCallerReviewBurst + compactapi.DefaultCallerReviewRate*elapsed.Seconds() + 2 + elapsed.Seconds()/30 + 3)
		if sars > bound {
			t.Errorf("the flood of invented sessions cost %d SubjectAccessReviews in %s, want at most %d (the caller's burst %d and %v/s)",
				sars, elapsed.Round(time.Millisecond), bound, compactapi.DefaultCallerReviewBurst, compactapi.DefaultCallerReviewRate)
		}
		if sent := f.sent.Load(); sent != floodInvented {
			t.Errorf("only %d of the %d requests for invented sessions were answered in %s", sent, floodInvented, elapsed.Round(time.Millisecond))
		}
		notFound, tooMany := f.code(http.StatusNotFound), f.code(http.StatusTooManyRequests)
		if notFound+tooMany != f.sent.Load() {
			t.Errorf("invented sessions answered %s, want only 404 and 429", f.codes())
		}
		// A 404 needs an allowed review (each name is new); the rest must be 429s.
		if notFound > sars || tooMany < f.sent.Load()-sars {
			t.Errorf("invented sessions answered %s with %d SubjectAccessReviews: want at most one 404 per review, 429 for the rest", f.codes(), sars)
		}
		if turns < 3 {
			t.Errorf("the tenant's agent had %d turns answered during the flood, want at least 3 (%s)", turns, agent.summary())
		}
		if n := agent.wire.tooMany.Load() - wireBefore; n != 0 {
			t.Errorf("the tenant's agent got %d answers 429 during the flood (compactclient retried them or not)", n)
		}
		agent.reportErrors(t, errsBefore)
	})

	t.Run("JunkTokensAndRotation", func(t *testing.T) {
		reviewsBefore := apiserverPOSTs(t, cl, "tokenreviews")
		wireBefore, errsBefore := agent.wire.tooMany.Load(), agent.errCount()
		start := time.Now()
		stopFlood := make(chan struct{})
		var closeOnce sync.Once
		endFlood := func() { closeOnce.Do(func() { close(stopFlood) }) }
		defer endFlood()
		// A safety stop: the flood runs while the agent rotates its token, not for good.
		timer := time.AfterFunc(60*time.Second, endFlood)
		defer timer.Stop()
		url := fmt.Sprintf("%s/v1/namespaces/%s/sessions/%s/compact", mgr.URL, floodTenantNS, sess.Name)
		f := startFlood(t, mgr, 1<<30, stopFlood, func(int) (string, string) { return url, randomJWT(t) })
		testenv.Eventually(t, waitFor, "the junk flood empties the new-token limiter", func() (bool, string) {
			return f.code(http.StatusTooManyRequests) > 0, f.codes()
		})

		// The limiter is empty: a ServiceAccount never seen before is answered 429 (one of
		// three tries: the limiter refills 10 a second, and the flood takes them).
		newcomer := 0
		for i := range 3 {
			_, err := mgr.APIClient(t, cl.BindAgent(floodTenantNS, fmt.Sprintf("newcomer-%d", i)), compactclient.WithRetries(0)).
				Compact(ctx, floodTenantNS, sess.Name, compactclient.CompactRequest{Messages: history[:5]})
			var ae *compactclient.APIError
			if errors.As(err, &ae) && ae.Code == http.StatusTooManyRequests {
				newcomer = i + 1
				break
			}
			t.Logf("newcomer %d during the junk flood: %v", i, err)
		}
		if newcomer == 0 {
			t.Errorf("no new ServiceAccount was answered 429 during the junk flood (%s): the flood did not empty the new-token limiter, the rotation proves nothing", f.codes())
		}

		// The agent's token rotates twice; each new token answers its turns.
		for gen := 1; gen <= 2; gen++ {
			agent.rotate(cl.AgentToken(floodTenantNS, "tenant-agent"))
			testenv.Eventually(t, waitFor, fmt.Sprintf("turns answered with rotated token %d during the junk flood", gen), func() (bool, string) {
				return agent.answeredWith(gen) >= 3, agent.summary()
			})
		}
		// Thousands of junk tokens in all.
		testenv.Eventually(t, waitFor, "thousands of junk tokens sent", func() (bool, string) {
			return f.sent.Load() >= 5000, f.codes()
		})
		endFlood()
		<-f.done
		elapsed := time.Since(start)
		reviews := apiserverPOSTs(t, cl, "tokenreviews") - reviewsBefore
		t.Logf("%d junk tokens in %s: %s; %d TokenReviews served; the tenant's agent: %s, %d 429s on the wire",
			f.sent.Load(), elapsed.Round(time.Millisecond), f.codes(), reviews, agent.summary(), agent.wire.tooMany.Load()-wireBefore)

		if unauthorized, tooMany := f.code(http.StatusUnauthorized), f.code(http.StatusTooManyRequests); unauthorized+tooMany != f.sent.Load() {
			t.Errorf("junk tokens answered %s, want only 401 and 429", f.codes())
		}
		// The limiter's burst and rate over the flood, the rotated and new tokens, and the
		// agent's token re-reviewed when its answer expires (30 s), with a little slack.
		if bound := int64(floodNewTokenBurst + floodNewTokenRate*elapsed.Seconds() + 2 + float64(newcomer) + 2*(1+elapsed.Seconds()/30) + 3); reviews > bound {
			t.Errorf("the junk flood cost %d TokenReviews in %s, want at most %d", reviews, elapsed.Round(time.Millisecond), bound)
		}
		// compactclient retries a 429, so an error would only show the ones it gave up on:
		// the wire shows them all. A rotated token of a known ServiceAccount gets none.
		if n := agent.wire.tooMany.Load() - wireBefore; n != 0 {
			t.Errorf("the tenant's agent got %d answers 429 during the junk flood and its token's rotation (compactclient retried them or not)", n)
		}
		agent.reportErrors(t, errsBefore)
	})

	stop()
	agent.reportErrors(t, 0)
	t.Logf("the tenant's agent: %s", agent.summary())
}

// floodAgent is a legitimate agent replaying the turns of a session's history, round after
// round (each round a conversation of its own), with whatever token it was last given.
type floodAgent struct {
	mgr     *operator.Manager
	session string
	history []compaction.Message
	turns   []int
	wire    *floodWire
	token   atomic.Pointer[string]
	gen     atomic.Int64 // how many times the token rotated

	mu   sync.Mutex
	done map[int]int // turns answered 200, by token generation
	errs []string
}

// rotate gives the agent a new token, as the kubelet rewrites a projected token.
func (a *floodAgent) rotate(token string) {
	a.token.Store(&token)
	a.gen.Add(1)
}

// run replays turns until stop is closed; the returned channel is closed when it returns.
func (a *floodAgent) run(stop <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: a.wire}
	go func() {
		defer close(out)
		var s *compactclient.Session
		round, k := 0, 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s == nil || k == len(a.turns) {
				s = &compactclient.Session{Namespace: floodTenantNS, Name: a.session}
				if round > 0 {
					s.Conversation = fmt.Sprintf("round-%d", round)
				}
				round, k = round+1, 0
			}
			gen := int(a.gen.Load())
			cc, err := compactclient.New(a.mgr.URL, compactclient.WithToken(*a.token.Load()), compactclient.WithHTTPClient(hc))
			if err == nil {
				s.Client = cc
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err = s.Compact(ctx, a.history[:a.turns[k]], 0)
				cancel()
			}
			a.mu.Lock()
			if err != nil {
				a.errs = append(a.errs, fmt.Sprintf("round %d turn %d (token %d): %v", round, k, gen, err))
			} else {
				a.done[gen]++
			}
			a.mu.Unlock()
			k++
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return out
}

// answered is how many turns were answered 200 in all, answeredWith with token generation
// gen (0: the first token).
func (a *floodAgent) answered() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.done {
		n += v
	}
	return n
}

func (a *floodAgent) answeredWith(gen int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.done[gen]
}

func (a *floodAgent) errCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.errs)
}

func (a *floodAgent) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprintf("turns answered by token %v, %d failed", a.done, len(a.errs))
}

// reportErrors fails t with the agent's failed turns from the from-th on (the first ten).
func (a *floodAgent) reportErrors(t *testing.T, from int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	errs := a.errs[from:]
	for i, e := range errs {
		if i == 10 {
			t.Errorf("... and %d more failed turns", len(errs)-i)
			break
		}
		t.Errorf("the tenant's agent's turn was not answered: %s", e)
	}
}

// floodWire counts the answers 429 a client got, also those it retried.
type floodWire struct {
	base    http.RoundTripper
	tooMany atomic.Int64
}

func (w *floodWire) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		w.tooMany.Add(1)
	}
	return resp, err
}

// floodRun is a flood under way: its answers by status code.
type floodRun struct {
	byCode [600]atomic.Int64
	sent   atomic.Int64
	done   chan struct{}
}

func (f *floodRun) code(c int) int64 { return f.byCode[c].Load() }

func (f *floodRun) codes() string {
	var parts []string
	for c := range f.byCode {
		if n := f.byCode[c].Load(); n > 0 {
			parts = append(parts, fmt.Sprintf("%d×%d", n, c))
		}
	}
	return strings.Join(parts, ", ")
}

// startFlood sends up to n POSTs of a small compact body from floodWorkers workers, until
// stop is closed; req gives the i-th request's URL and bearer token.
func startFlood(t *testing.T, mgr *operator.Manager, n int, stop <-chan struct{}, req func(i int) (url, token string)) *floodRun {
	f := &floodRun{done: make(chan struct{})}
	hc := mgr.HTTPClient()
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = floodWorkers
	var next atomic.Int64
	var wg sync.WaitGroup
	for range floodWorkers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				select {
				case <-stop:
					return
				default:
				}
				url, token := req(int(i))
				r, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
				if err != nil {
					t.Error(err)
					return
				}
				r.Header.Set("Authorization", "Bearer "+token)
				r.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(r)
				if err != nil {
					t.Errorf("flood request %d: %v", i, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				f.byCode[min(resp.StatusCode, len(f.byCode)-1)].Add(1)
				f.sent.Add(1)
			}
		})
	}
	go func() {
		wg.Wait()
		hc.CloseIdleConnections()
		close(f.done)
	}()
	return f
}

// apiserverPOSTs is how many POSTs of resource (tokenreviews, subjectaccessreviews) the
// kube-apiserver has served, from its own metrics: what the manager's reviews cost it.
func apiserverPOSTs(t *testing.T, cl *operator.Cluster, resource string) int64 {
	t.Helper()
	raw, err := cl.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	testenv.Must(t, err)
	var n int64
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="`+resource+`"`) || !strings.Contains(line, `verb="POST"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		testenv.Must(t, err)
		n += int64(v)
	}
	testenv.Must(t, sc.Err())
	return n
}
