package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// Limits of the reviews of new tokens the manager runs with in TestCompactionAPIAuth.
const (
	floodTokenRate  = 10
	floodTokenBurst = 50
)

// TestCompactionAPIAuth runs issue 14's attacks on the compaction API's authentication and
// authorization against the manager binary on a real kube-apiserver:
//   - a token for the Kubernetes API's audience is refused (item 3);
//   - an agent pod cannot use another agent pod's session, though the namespace-wide
//     compaction-agent role covers both; a caller allowed to update that session can (item 5);
//   - status.anchors (conversation content) is only written when the policy asks (item 5);
//   - a flood of 10,000 junk tokens costs a bounded number of TokenReviews while a working
//     agent keeps getting answers and its status is still written (item 6).
func TestCompactionAPIAuth(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	mgr := cl.StartManager(bin, func(c *configv1alpha1.Configuration) {
		c.API.UsageInterval = operator.Duration(100 * time.Millisecond)
		c.API.Reviews.NewTokenRate, c.API.Reviews.NewTokenBurst = floodTokenRate, floodTokenBurst
	})
	c, ctx := cl.Client, context.Background()
	history := testenv.MustLoad(t, filepath.Join(testenv.RepoRoot(t), "testdata", "long-session.jsonl"))
	turns := compaction.AssistantTurns(history)

	cl.CreateMinIOPolicy(ns, "omit", "auth-omit", m, window, nil)
	cl.CreateMinIOPolicy(ns, "include", "auth-include", m, window, func(s *compactionv1alpha1.CompactionPolicySpec) {
		s.AnchorsInStatus = compactionv1alpha1.AnchorsInclude
	})
	saToken := cl.BindAgent(ns, "agent") // for the API's audience, not bound to a pod
	podA, podB := agentPod(t, c, "agent-a", "omit"), agentPod(t, c, "agent-b", "omit")
	sessA, sessB := podSession(t, c, podA), podSession(t, c, podB)
	tokenA, tokenB := cl.PodToken(ns, podA.Name), cl.PodToken(ns, podB.Name)
	api := func(token string) *compactclient.Client {
		return mgr.APIClient(t, token)
	}
	small := compactclient.CompactRequest{Messages: history[:turns[2]]}

	t.Run("WrongAudience", func(t *testing.T) {
		kubeToken := cl.Token(ns, "agent") // the Kubernetes API's audience, as the default token
		_, err := api(kubeToken).Compact(ctx, ns, sessA.Name, small)
		expectAPIError(t, err, http.StatusUnauthorized)
		if err == nil || !strings.Contains(err.Error(), "--audience "+compactclient.DefaultTokenAudience) {
			t.Errorf("the 401 should say which audience to request: %v", err)
		}
		if _, err := api(tokenA).Compact(ctx, ns, sessA.Name, small); err != nil {
			t.Errorf("a pod-bound token for the audience: %v", err)
		}
	})

	t.Run("PodIsolation", func(t *testing.T) {
		a, b, sa := api(tokenA), api(tokenB), api(saToken)
		secret := strings.Repeat("agent A's private tool output\n", 1000)
		if _, err := a.OffloadToolResult(ctx, ns, sessA.Name, compaction.Message{Role: compaction.RoleTool, ToolCallID: "call_a", Content: secret}); err != nil {
			t.Fatalf("pod A offloads into its own session: %v", err)
		}
		if got, err := a.GetToolResult(ctx, ns, sessA.Name, "call_a"); err != nil || string(got) != secret {
			t.Errorf("pod A reads its own tool result: %d bytes, %v", len(got), err)
		}
		if _, err := b.Compact(ctx, ns, sessB.Name, small); err != nil {
			t.Errorf("pod B compacts its own session: %v", err)
		}
		for who, cc := range map[string]*compactclient.Client{"pod B's token": b, "the ServiceAccount's unbound token": sa} {
			_, err := cc.GetToolResult(ctx, ns, sessA.Name, "call_a")
			expectAPIError(t, err, http.StatusForbidden)
			if err != nil && !strings.Contains(err.Error(), "belongs to pod") {
				t.Errorf("%s: the 403 should say why: %v", who, err)
			}
			_, err = cc.Compact(ctx, ns, sessA.Name, small)
			expectAPIError(t, err, http.StatusForbidden)
			_, err = cc.OffloadToolResult(ctx, ns, sessA.Name, compaction.Message{Role: compaction.RoleTool, ToolCallID: "call_b", Content: secret})
			expectAPIError(t, err, http.StatusForbidden)
			expectAPIError(t, cc.Records(ctx, ns, sessA.Name, io.Discard), http.StatusForbidden)
		}

		// RBAC on the session's name says otherwise: a caller allowed to update that
		// AgentSession (here only that one) may use it, and still not the other.
		lead := "team-lead"
		leadToken := cl.BindAgent(ns, lead)
		testenv.Must(t, c.Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "update-agent-a"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{compactionv1alpha1.GroupVersion.Group}, Resources: []string{"agentsessions"},
				ResourceNames: []string{sessA.Name}, Verbs: []string{"update"}}},
		}))
		testenv.Must(t, c.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-lead-updates-agent-a"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "update-agent-a"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: lead}},
		}))
		l := api(leadToken)
		testenv.Eventually(t, waitFor, "the team lead reads agent A's tool result", func() (bool, string) {
			got, err := l.GetToolResult(ctx, ns, sessA.Name, "call_a")
			return err == nil && string(got) == secret, fmt.Sprint(err)
		})
		if err := l.Records(ctx, ns, sessA.Name, io.Discard); err != nil {
			t.Errorf("the team lead reads agent A's records: %v", err)
		}
		_, err := l.Compact(ctx, ns, sessB.Name, small)
		expectAPIError(t, err, http.StatusForbidden)

		// A session not owned by a pod is left to RBAC alone, as before.
		free := cl.CreateReadySession(ns, "free-session", "omit")
		if _, err := sa.Compact(ctx, ns, free.Name, small); err != nil {
			t.Errorf("a session without a pod owner, with the namespace-wide role: %v", err)
		}
	})

	t.Run("AnchorsInStatus", func(t *testing.T) {
		cc := api(saToken)
		force := compactclient.CompactRequest{Messages: history[:turns[10]], Force: true}
		for _, tc := range []struct {
			policy string
			want   bool
		}{{"omit", false}, {"include", true}} {
			s := cl.CreateReadySession(ns, "anchors-"+tc.policy, tc.policy)
			resp, err := cc.Compact(ctx, ns, s.Name, force)
			testenv.Must(t, err)
			if len(resp.Record.Anchors) == 0 {
				t.Fatalf("the forced compaction made no anchors: the test proves nothing")
			}
			testenv.Eventually(t, waitFor, s.Name+" status written", func() (bool, string) {
				testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(s), s))
				return ptr.Deref(s.Status.Compactions.Emergency, 0) > 0, fmt.Sprintf("%+v", s.Status.Compactions)
			})
			if got := len(s.Status.Anchors) > 0; got != tc.want {
				t.Errorf("policy %s: status.anchors %v, want present=%v", tc.policy, s.Status.Anchors, tc.want)
			}
		}
		// Switching the policy to Omit clears what status holds.
		var p compactionv1alpha1.CompactionPolicy
		testenv.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "include"}, &p))
		p.Spec.AnchorsInStatus = compactionv1alpha1.AnchorsOmit
		testenv.Must(t, c.Update(ctx, &p))
		testenv.Eventually(t, waitFor, "status.anchors cleared after the policy says Omit", func() (bool, string) {
			var s compactionv1alpha1.AgentSession
			testenv.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "anchors-include"}, &s))
			return len(s.Status.Anchors) == 0, fmt.Sprintf("%d anchors", len(s.Status.Anchors))
		})
	})

	t.Run("TokenReviewFlood", func(t *testing.T) {
		a := api(tokenA)
		if _, err := a.Compact(ctx, ns, sessA.Name, small); err != nil {
			t.Fatal(err)
		}
		var before compactionv1alpha1.AgentSession
		testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(sessA), &before))
		reviewsBefore := apiserverPOSTs(t, cl, "tokenreviews")
		start := time.Now()

		const junk, workers = 10000, 32
		var codes [600]atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		url := mgr.URL + "/v1/namespaces/" + ns + "/sessions/" + sessA.Name + "/compact"
		body := `{"messages":[{"role":"user","content":"hi"}]}`
		httpc := mgr.HTTPClient()
		httpc.Transport.(*http.Transport).MaxIdleConnsPerHost = workers
		for range workers {
			wg.Go(func() {
				for i := next.Add(1); i <= junk; i = next.Add(1) {
					token := fmt.Sprintf("junk-token-%d", i)
					if i%2 == 0 {
						token = randomJWT(t)
					}
					req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
					if err != nil {
						t.Error(err)
						return
					}
					req.Header.Set("Authorization", "Bearer "+token)
					resp, err := httpc.Do(req)
					if err != nil {
						t.Errorf("junk request %d: %v", i, err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					codes[resp.StatusCode].Add(1)
				}
			})
		}
		// The working agent meanwhile: every turn is answered, and its compactions reach the
		// status.
		legit, forced, changed := 0, 0, 0
		for legit == 0 || next.Load() < junk {
			req := compactclient.CompactRequest{Messages: history[:turns[10]], Force: legit%5 == 0}
			if req.Force {
				forced++
			}
			resp, err := a.Compact(ctx, ns, sessA.Name, req)
			if err != nil {
				t.Errorf("the working agent's turn %d during the flood: %v", legit, err)
			} else if req.Force && resp.Record.ChangedView() {
				changed++ // a forced Emergency on a view already cut changes nothing: no compaction
			}
			legit++
		}
		wg.Wait()
		elapsed := time.Since(start)
		reviews := apiserverPOSTs(t, cl, "tokenreviews") - reviewsBefore
		t.Logf("%d junk requests in %s: %d answered 401, %d answered 429; %d TokenReviews; the agent's %d turns (%d forced) all answered",
			junk, elapsed.Round(time.Millisecond), codes[401].Load(), codes[429].Load(), reviews, legit, forced)
		if codes[401].Load()+codes[429].Load() != junk {
			t.Errorf("junk answered with other codes than 401 and 429: %d + %d of %d", codes[401].Load(), codes[429].Load(), junk)
		}
		if codes[401].Load() < junk/2 {
			t.Errorf("%d of the %d malformed tokens answered 401", codes[401].Load(), junk/2)
		}
		// The bucket's burst, its rate over the flood's time, and one for the agent's token
		// if its cached answer expired meanwhile (30 s).
		if bound := int64(floodTokenBurst + floodTokenRate*elapsed.Seconds() + 1 + elapsed.Seconds()/30); reviews > bound {
			t.Errorf("%d TokenReviews for the flood, want at most %d", reviews, bound)
		}
		if changed == 0 {
			t.Fatalf("the flood ended before a forced compaction of the agent changed its view (%d forced): the status check proves nothing", forced)
		}
		testenv.Eventually(t, waitFor, "the forced compactions in agent A's status", func() (bool, string) {
			var s compactionv1alpha1.AgentSession
			testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(sessA), &s))
			return ptr.Deref(s.Status.Compactions.Emergency, 0) >= ptr.Deref(before.Status.Compactions.Emergency, 0)+int64(changed),
				fmt.Sprintf("%d Emergency, %d before, %d forced compactions", ptr.Deref(s.Status.Compactions.Emergency, 0), ptr.Deref(before.Status.Compactions.Emergency, 0), changed)
		})
	})
}

// agentPod creates a pod running as the ServiceAccount "agent", annotated for a session of
// policy. No kubelet runs it: the Pod object is what the operator and token binding need.
func agentPod(t *testing.T, c client.Client, name, policy string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"compaction.harness9.io/policy": policy}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "agent", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "agent", Image: "busybox:1.36"}},
		},
	}
	testenv.Must(t, c.Create(context.Background(), p))
	return p
}

// podSession waits for the Ready AgentSession the operator creates for pod.
func podSession(t *testing.T, c client.Client, pod *corev1.Pod) *compactionv1alpha1.AgentSession {
	t.Helper()
	s := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
	waitSessionReady(t, c, s)
	if owner := metav1.GetControllerOf(s); owner == nil || owner.UID != pod.UID {
		t.Fatalf("session %s is not controlled by its pod: %+v", s.Name, s.OwnerReferences)
	}
	return s
}

// randomJWT is a JWT-shaped token that no API server issued.
func randomJWT(t *testing.T) string {
	b := make([]byte, 96)
	if _, err := rand.Read(b); err != nil {
		t.Error(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"x"}`)) + "." + enc([]byte(`{"aud":["compaction.harness9.io"],"sub":"x"}`)) + "." + enc(b)
}
