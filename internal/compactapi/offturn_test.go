package compactapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/compactapi/authz"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
	"github.com/harness9/compaction-operator/internal/policy"
)

// TestSummariesOffTurn: issue 29, through the compaction API (--api-summaries-off-turn)
// with an OpenAI-compatible summarizer that takes 3 s to answer. The turn that crosses
// Full is answered without waiting for it (summarized extractively, the LLM started off
// the turn); the LLM's answer is finished and stored after the request ended, under the
// session's objects; the next crossing merges it, again without a call on the turn.
func TestSummariesOffTurn(t *testing.T) {
	var calls, done atomic.Int64
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(3 * time.Second)
		const summary = "## Anchors\n- user_intent: fix the failing test\n- execution_progress: read the files\n- key_decision:\n  - OFFTURN-DECISION keep the parser\n- tried_solution: none\n- next_step: run the tests\n\n## Summary\nRead the package's files."
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "c1", "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": summary}}},
			"usage":   map[string]any{"prompt_tokens": 1000, "completion_tokens": 60, "total_tokens": 1060},
		})
		done.Add(1)
	}))
	t.Cleanup(llm.Close)
	e := startConversationEnv(t, func(spec *compactionv1alpha1.CompactionPolicySpec) {
		spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI,
			OpenAI: compactionv1alpha1.OpenAISummarizerSpec{BaseURL: llm.URL + "/v1", Model: "m", TimeoutSeconds: 30}, MaxCallsPerHour: ptr.To[int32](100)}
	})
	e.server.cfg.SummariesOffTurn = true
	e.server.background = newBackground(e.server.metrics)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.server.background.run(ctx)

	crossing := func(h []compaction.Message) *compaction.CompactionRecord {
		t.Helper()
		// The client gives up after 2 s, less than the summarizer takes.
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer rcancel()
		resp, err := e.api.Compact(rctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: h})
		if err != nil {
			t.Fatalf("compact: %v (the turn waited for the summarizer?)", err)
		}
		return resp.Record
	}
	h := fullHistory(t, "OFFTURN")
	rec := crossing(h)
	if rec.Tier != compaction.TierFull || !rec.SummarizerDeferred || rec.PreparedStarted != "late" {
		t.Fatalf("first crossing: tier %s, deferred %v, started %q; notes %q", rec.Tier, rec.SummarizerDeferred, rec.PreparedStarted, rec.Notes)
	}
	// The request is over; the summarization goes on and is stored.
	deadline := time.Now().Add(20 * time.Second)
	stored := func() bool {
		for k := range e.keys(t) {
			if strings.Contains(k, ".prepared") {
				return true
			}
		}
		return false
	}
	for (done.Load() == 0 || !stored()) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if done.Load() == 0 || !stored() {
		t.Fatalf("the summarization off the turn was not finished and stored (calls %d, done %d, keys %v)", calls.Load(), done.Load(), e.keys(t))
	}
	time.Sleep(500 * time.Millisecond) // the store write follows the answer
	// Grow the history until the next Soft or Full: it merges the LLM's summary.
	for turns := 1; turns < 200; turns++ {
		h2 := append(append([]compaction.Message(nil), h...), markedHistory("MORE", turns)[2:]...)
		rec = crossing(h2)
		if rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull {
			continue
		}
		if !rec.PreparedLateMerged || rec.SummarizerCalls == 0 || !strings.Contains(rec.SummaryText+strings.Join(anchorTexts(rec.Anchors), "\n"), "OFFTURN-DECISION") {
			t.Fatalf("next crossing: late merged %v, calls %d; notes %q", rec.PreparedLateMerged, rec.SummarizerCalls, rec.Notes)
		}
		return
	}
	t.Fatal("no second crossing")
}

func anchorTexts(as []compaction.Anchor) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.Content)
	}
	return out
}

// TestSummariesOffTurnSessionDeleted: issue 29, item 4. A session deleted while its
// summarization runs off the turn has it cancelled: the replica learns of the deletion from
// its informers (the server's cache is a real controller-runtime cache here, as in the
// manager), the summarizer's request is cancelled, and the late summary is not stored after
// the finalizer's clean-up deleted the session's objects (no `.prepared` object, nor any
// other, is left). The session's engines go too.
func TestSummariesOffTurnSessionDeleted(t *testing.T) {
	called, aborted, release := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read to its end: net/http notices a client that went away (and cancels
		// r.Context()) only once the body was read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case called <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
			select {
			case aborted <- struct{}{}:
			default:
			}
			return
		case <-release:
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant",
				"content": "## Anchors\n- user_intent: fix the test\n- execution_progress: N/A\n- key_decision: N/A\n- tried_solution: N/A\n- next_step: N/A\n\n## Summary\nLate."}}},
		})
	}))
	t.Cleanup(llm.Close)
	t.Cleanup(func() { close(release) }) // before Close: the call must not hold it up
	e, stop := startWatchedEnv(t, func(spec *compactionv1alpha1.CompactionPolicySpec) {
		spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI,
			OpenAI: compactionv1alpha1.OpenAISummarizerSpec{BaseURL: llm.URL + "/v1", Model: "m", TimeoutSeconds: 120}}
	})
	defer stop()
	ctx := context.Background()
	uid := string(e.sess.UID)

	resp, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: fullHistory(t, "GONE")})
	if err != nil {
		t.Fatal(err)
	}
	if rec := resp.Record; rec.PreparedStarted != "late" {
		t.Fatalf("the crossing started no late summary: started %q, notes %q", rec.PreparedStarted, rec.Notes)
	}
	if e.server.engines.GroupLen(0, uid) != 1 {
		t.Fatalf("%d engines of the session, want 1", e.server.engines.GroupLen(0, uid))
	}
	waitFor(t, "the summarizer call off the turn", called)

	// Deleted as the operator does it (the finalizer holds the object while the session's
	// objects are deleted), in the order that is hardest for this replica: the leader's
	// clean-up is over before this replica's informer delivers the deletion. A summary
	// stored when its work is cancelled would then outlive the clean-up.
	store, err := s3.New(ctx, e.s3cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.DeleteSession(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, e.sess); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the summarizer call cancelled on the session's deletion", aborted)
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(e.sess), e.sess); err != nil {
		t.Fatal(err)
	}
	e.sess.Finalizers = nil
	if err := e.c.Update(ctx, e.sess); err != nil {
		t.Fatal(err)
	}
	// The work has ended once the pool counted it.
	deadline := time.Now().Add(30 * time.Second)
	for counterValue(t, e.server.metrics.BackgroundSummaries.WithLabelValues("cancelled")) < 1 || e.server.engines.GroupLen(0, uid) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled work did not end, or the session's engines were kept (%d)", e.server.engines.GroupLen(0, uid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := counterValue(t, e.server.metrics.BackgroundSummaries.WithLabelValues("done")); got != 0 {
		t.Errorf("done = %v: the cancelled work counted as done", got)
	}
	for k := range e.keys(t) {
		if strings.Contains(k, uid) {
			t.Errorf("object %s of the deleted session written after its clean-up", k)
		}
	}
	// A turn already past its lookup when the session went cannot queue work for it again.
	if e.server.background.Go(uid, func(context.Context) { t.Error("work of a deleted session ran") }) {
		t.Error("work of a deleted session taken")
	}
}

// waitFor waits for a signal on c, failing the test if none comes within 30 s.
func waitFor(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30 s", what)
	}
}

// watchedEnv is a conversationEnv whose server reads through a controller-runtime cache
// with informers (as the manager's does), with summaries off the turn on.
type watchedEnv struct {
	*conversationEnv
	s3cfg s3.Config
}

// startWatchedEnv is startConversationEnv with the server's reads going through a
// controller-runtime cache of the same API server, summaries off the turn on and its pool
// running, and a finalizer on the session, as the operator puts one; stop stops the pool
// and the cache.
func startWatchedEnv(t *testing.T, specs ...func(*compactionv1alpha1.CompactionPolicySpec)) (*watchedEnv, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	must := func(err error) {
		t.Helper()
		if err != nil {
			cancel()
			t.Fatal(err)
		}
	}
	m := testenv.StartMinIO(t)
	root := testenv.RepoRoot(t)
	_, cfg := kubeenv.Start(t, kubeenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(compactionv1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	must(err)
	cs, err := kubernetes.NewForConfig(cfg)
	must(err)

	const bucket = "offturn"
	raw, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	must(err)
	must(raw.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}))
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: conversationCRN}}))
	secret := builder.MinIOSecret(conversationNS, "minio", m.AccessKey, m.SecretKey)
	must(c.Create(ctx, secret))
	p := builder.Policy(conversationNS, "p").Window(8000).Storage(builder.MinIOStorage(m.Endpoint, bucket, "conv", secret.Name)).
		Spec(func(spec *compactionv1alpha1.CompactionPolicySpec) {
			for _, f := range specs {
				f(spec)
			}
		}).Build()
	must(c.Create(ctx, p))
	obj := builder.Session(conversationNS, "agent", "p").Build()
	obj.Finalizers = []string{"compaction.harness9.io/test-cleanup"}
	must(c.Create(ctx, obj))
	obj.Status.Conditions = []metav1.Condition{{Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready",
		LastTransitionTime: metav1.Now(), ObservedGeneration: obj.Generation}}
	must(c.Status().Update(ctx, obj))
	_, err = policy.Locations{Namespace: conversationCRN, Reader: c, Writer: c}.Pin(ctx, obj, policy.FromNamespaced(p), conversationCRN)
	must(err)
	must(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: "agent"}}))
	must(c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: "agent"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{compactionv1alpha1.GroupVersion.Group}, Resources: []string{"agentsessions/compact", "agentsessions/toolresults", "agentsessions/records"},
		Verbs: []string{"create", "get"}}}}))
	must(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: "agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: conversationNS, Name: "agent"}}}))
	tr, err := cs.CoreV1().ServiceAccounts(conversationNS).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{compactclient.DefaultTokenAudience}, ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	must(err)

	// Everything exists before the cache starts: its first listing has it all.
	ca, err := crcache.New(cfg, crcache.Options{Scheme: scheme})
	must(err)
	cacheDone := make(chan struct{})
	go func() {
		defer close(cacheDone)
		if err := ca.Start(ctx); err != nil {
			t.Errorf("cache: %v", err)
		}
	}()
	if !ca.WaitForCacheSync(ctx) {
		must(errors.New("the cache did not start"))
	}
	var synced compactionv1alpha1.AgentSession
	must(ca.Get(ctx, client.ObjectKeyFromObject(obj), &synced)) // starts and syncs its informer

	s, _ := newTestMetrics(t)
	s.cfg = Config{MaxBodyBytes: DefaultMaxBodyBytes, MaxMessages: DefaultMaxMessages, RequestTimeout: DefaultRequestTimeout,
		UsageInterval: DefaultUsageInterval, ClusterResourceNamespace: conversationCRN, TokenAudience: compactclient.DefaultTokenAudience,
		SummariesOffTurn: true}
	s.cache, s.apiReader, s.writer = ca, c, c
	s.sessions = testResolver(s, policy.DirectSecrets{Reader: c})
	s.auth = authz.New(c, compactclient.DefaultTokenAudience, 0, 0)
	s.recorder, s.log = events.NewFakeRecorder(1000), logr.Discard()
	s.status = newStatus(s)
	s.inflight = newBudget(DefaultMaxInflightBytes, s.metrics.Inflight)
	s.engines = newEngines()
	s.background = newBackground(s.metrics)
	poolDone := make(chan struct{})
	go func() {
		defer close(poolDone)
		s.background.run(ctx)
	}()
	srv := httptest.NewServer(s.Handler())
	api, err := compactclient.New(srv.URL, compactclient.WithToken(tr.Status.Token))
	must(err)
	stop := func() {
		srv.Close()
		cancel()
		<-poolDone
		<-cacheDone
	}
	return &watchedEnv{
		conversationEnv: &conversationEnv{server: s, url: srv.URL, token: tr.Status.Token, api: api, sess: obj, minio: raw, bucket: bucket, c: c},
		s3cfg:           s3.Config{Endpoint: m.Endpoint, Bucket: bucket, Prefix: "conv", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey},
	}, stop
}
