package compactapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactapi/authz"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/policy/backends"
)

// conversationEnv is the compaction API's whole handler (authentication with TokenReview,
// authorization with SubjectAccessReview, lookup of the session and its pinned location) on
// a real kube-apiserver with the generated CRDs and a real MinIO, and an agent's token for
// one Ready session of a policy with an 8,000-token window (extractive summarizer: no LLM).
type conversationEnv struct {
	server *Server
	url    string
	token  string
	api    *compactclient.Client
	sess   *compactionv1alpha1.AgentSession
	minio  *minio.Client
	bucket string
	c      client.Client
}

const conversationNS, conversationCRN = "default", "compaction-system"

func startConversationEnv(t *testing.T, specs ...func(*compactionv1alpha1.CompactionPolicySpec)) *conversationEnv {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
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

	const bucket = "conversations"
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
	must(c.Create(ctx, obj))
	obj.Status.Conditions = []metav1.Condition{{Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready",
		LastTransitionTime: metav1.Now(), ObservedGeneration: obj.Generation}}
	must(c.Status().Update(ctx, obj))
	_, err = policy.Locations{Namespace: conversationCRN, Reader: c, Writer: c}.Pin(ctx, obj, policy.FromNamespaced(p), conversationCRN)
	must(err)

	// An agent with the compaction-agent role's rights on sessions in its namespace.
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

	s, _ := newTestMetrics(t)
	s.cfg = Config{MaxBodyBytes: DefaultMaxBodyBytes, MaxMessages: DefaultMaxMessages, RequestTimeout: DefaultRequestTimeout,
		UsageInterval: DefaultUsageInterval, ClusterResourceNamespace: conversationCRN, TokenAudience: compactclient.DefaultTokenAudience}
	s.cache, s.apiReader, s.writer = c, c, c
	s.sessions = testResolver(s, policy.DirectSecrets{Reader: c})
	s.auth = authz.New(c, compactclient.DefaultTokenAudience, 0, 0)
	s.recorder, s.log = events.NewFakeRecorder(1000), logr.Discard()
	s.status = newStatus(s)
	s.inflight = newBudget(DefaultMaxInflightBytes, s.metrics.Inflight)
	s.engines = newEngines()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	api, err := compactclient.New(srv.URL, compactclient.WithToken(tr.Status.Token))
	must(err)
	return &conversationEnv{server: s, url: srv.URL, token: tr.Status.Token, api: api, sess: obj, minio: raw, bucket: bucket, c: c}
}

// keys lists the bucket's keys with their ETags.
func (e *conversationEnv) keys(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for obj := range e.minio.ListObjects(context.Background(), e.bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		out[obj.Key] = obj.ETag
	}
	return out
}

// records reads a conversation's trail ("" the default one) through the API.
func (e *conversationEnv) records(t *testing.T, conversation string) []compaction.CompactionRecord {
	t.Helper()
	var buf bytes.Buffer
	if err := e.api.Records(context.Background(), conversationNS, e.sess.Name, &buf, compactclient.InConversation(conversation)); err != nil {
		t.Fatalf("records of conversation %q: %v", conversation, err)
	}
	var out []compaction.CompactionRecord
	dec := json.NewDecoder(&buf)
	for {
		var rec compaction.CompactionRecord
		if err := dec.Decode(&rec); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("records of conversation %q: %v", conversation, err)
		}
		out = append(out, rec)
	}
}

// markedHistory is a history of turns tool rounds whose task and tool output all carry
// mark, so a view shows whose history it was built from.
func markedHistory(mark string, turns int) []compaction.Message {
	msgs := make([]compaction.Message, 0, 2+2*turns)
	msgs = append(msgs,
		compaction.Message{Role: compaction.RoleSystem, Content: "You are a coding agent."},
		compaction.Message{Role: compaction.RoleUser, Content: "Task " + mark + ": fix the failing test in pkg/" + mark + "."},
	)
	for i := range turns {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			compaction.Message{Role: compaction.RoleAssistant, Content: fmt.Sprintf("Step %d of %s: reading pkg/%s/f%d.go.", i, mark, mark, i),
				ToolCalls: []compaction.ToolCall{{ID: id, Type: "function", Function: compaction.FunctionCall{Name: "bash", Arguments: `{"cmd": "cat f.go"}`}}}},
			compaction.Message{Role: compaction.RoleTool, ToolCallID: id, Content: strings.Repeat(fmt.Sprintf("%s output line %d\n", mark, i), 40)},
		)
	}
	return msgs
}

func viewText(msgs []compaction.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestConversationsAreIndependent: two conversations of one AgentSession, and its default
// conversation, compact independently through the whole API: conversation A compacting
// (a summary, a watermark) leaves B's and the default's views, watermarks and records as if
// A did not exist; A's watermark is stale for B; each reads back its own tool result under
// the same tool call ID; the trail of each holds its compactions only. Each conversation
// has an engine of its own. Deleting the session's objects, as the finalizer does, leaves
// no key of any of them.
func TestConversationsAreIndependent(t *testing.T) {
	e := startConversationEnv(t)
	ctx := context.Background()
	const convA, convB = "sub-agent-a", "worker.b"
	agentA := &compactclient.Session{Client: e.api, Namespace: conversationNS, Name: e.sess.Name, Conversation: convA}
	agentB := &compactclient.Session{Client: e.api, Namespace: conversationNS, Name: e.sess.Name, Conversation: convB}
	agentDefault := &compactclient.Session{Client: e.api, Namespace: conversationNS, Name: e.sess.Name}

	// B and the default conversation take a turn first, so A's later compactions have
	// something to disturb.
	historyB, historyD := markedHistory("BRAVO", 3), markedHistory("DELTA", 5)
	for _, turn := range []struct {
		s       *compactclient.Session
		history []compaction.Message
	}{{agentB, historyB}, {agentDefault, historyD}} {
		resp, err := turn.s.Compact(ctx, turn.history, 0)
		if err != nil {
			t.Fatalf("conversation %q: %v", turn.s.Conversation, err)
		}
		if resp.Watermark != 0 || resp.Record.Tier != compaction.TierNone {
			t.Fatalf("conversation %q: a short history compacted: %s, watermark %d", turn.s.Conversation, resp.Record.Tier, resp.Watermark)
		}
	}

	// A grows until it has compacted with a summary more than once.
	historyA := markedHistory("ALPHA", 40)
	var lastA *compactclient.CompactResponse
	compactionsA, summarizedA := 0, false
	for turns := 2; turns <= 40; turns += 2 {
		resp, err := agentA.Compact(ctx, historyA[:2+2*turns], 0)
		if err != nil {
			t.Fatalf("A at %d turns: %v", turns, err)
		}
		if resp.Record.Tier != compaction.TierNone {
			compactionsA++
		}
		if resp.Record.Tier >= compaction.TierSoft && strings.Contains(resp.Record.SummaryText, "ALPHA") {
			summarizedA = true
		}
		lastA = resp
	}
	if !summarizedA {
		t.Fatalf("A never summarized its history (Soft or Full): the test did not exercise a summary to leak")
	}
	if lastA.Watermark == 0 || compactionsA < 2 {
		t.Fatalf("A compacted %d times, watermark %d: the test did not exercise a compaction", compactionsA, lastA.Watermark)
	}
	if !strings.Contains(viewText(lastA.Messages), "ALPHA") {
		t.Fatalf("A's view does not show A's history")
	}

	// B's next turn: a delta request from B's own (zero) watermark would be a full request;
	// send A's watermark and prefix hash instead, as a proxy mixing them up would: B's state
	// has none of it.
	_, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{
		Messages: historyB[:1], Watermark: lastA.Watermark, PrefixHash: lastA.PrefixHash}, compactclient.InConversation(convB))
	if !compactclient.IsStaleWatermark(err) {
		t.Errorf("B with A's watermark: %v, want 409 %s (B's state is not A's)", err, ReasonStaleWatermark)
	}
	historyB = markedHistory("BRAVO", 5)
	for _, turn := range []struct {
		s       *compactclient.Session
		history []compaction.Message
		mark    string
	}{{agentB, historyB, "BRAVO"}, {agentDefault, historyD, "DELTA"}} {
		resp, err := turn.s.Compact(ctx, turn.history, 0)
		if err != nil {
			t.Fatalf("conversation %q after A compacted: %v", turn.s.Conversation, err)
		}
		if resp.Record.WatermarkBefore != 0 || resp.Watermark != 0 || resp.Record.Tier != compaction.TierNone {
			t.Errorf("conversation %q after A compacted: %s, watermark %d -> %d; want None from 0 to 0 (A's watermark is %d)",
				turn.s.Conversation, resp.Record.Tier, resp.Record.WatermarkBefore, resp.Watermark, lastA.Watermark)
		}
		view := viewText(resp.Messages)
		if strings.Contains(view, "ALPHA") || len(resp.Messages) != len(turn.history) {
			t.Errorf("conversation %q sees A's history or summary: %d messages for its %d\n%.2000s", turn.s.Conversation, len(resp.Messages), len(turn.history), view)
		}
		if !strings.Contains(view, turn.mark) {
			t.Errorf("conversation %q's view lost its own history", turn.s.Conversation)
		}
	}

	// A forced compaction of B and of the default conversation summarizes their own
	// histories only.
	for _, turn := range []struct {
		conv    string
		history []compaction.Message
		mark    string
	}{{convB, historyB, "BRAVO"}, {"", historyD, "DELTA"}} {
		resp, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: turn.history, Force: true},
			compactclient.InConversation(turn.conv))
		if err != nil {
			t.Fatalf("forced compaction of %q: %v", turn.conv, err)
		}
		view := viewText(resp.Messages)
		if resp.Record.WatermarkBefore != 0 || strings.Contains(view, "ALPHA") || strings.Contains(resp.Record.SummaryText, "ALPHA") {
			t.Errorf("forced compaction of %q started from watermark %d or summarized A's history:\n%.2000s", turn.conv, resp.Record.WatermarkBefore, view)
		}
		if !strings.Contains(view, turn.mark) {
			t.Errorf("forced compaction of %q lost its own history:\n%.2000s", turn.conv, view)
		}
	}

	checkToolResults(t, agentA, agentB, agentDefault)
	e.checkRecords(t, map[string]int{convA: compactionsA, convB: 1, "": 1})
	e.checkDeleteSession(t, []string{"conv/state/" + string(e.sess.UID) + ".json",
		"conv/state/conversations/" + string(e.sess.UID) + "/" + convA + ".json",
		"conv/tool_results/" + string(e.sess.UID) + "/conversations/" + convB + "/call%2Fbig.txt"})
}

// checkToolResults: the same tool call ID holds a different result in each of two
// conversations (no conflict), each reads back its own, the default conversation none.
func checkToolResults(t *testing.T, a, b, def *compactclient.Session) {
	t.Helper()
	ctx := context.Background()
	big := func(mark string) compaction.Message {
		return compaction.Message{Role: compaction.RoleTool, ToolCallID: "call/big", Content: strings.Repeat(mark+" big output\n", 1200)}
	}
	for _, s := range []*compactclient.Session{a, b} {
		mark := map[string]string{a.Conversation: "ALPHA", b.Conversation: "BRAVO"}[s.Conversation]
		off, err := s.OffloadToolResult(ctx, big(mark))
		if err != nil || off.Offloaded == nil {
			t.Fatalf("offload in %q: %+v, %v", s.Conversation, off, err)
		}
		got, err := s.GetToolResult(ctx, "call/big")
		if err != nil || string(got) != big(mark).Content {
			t.Errorf("read back in %q: %d bytes, %v; want its own result", s.Conversation, len(got), err)
		}
	}
	var ae *compactclient.APIError
	if _, err := def.GetToolResult(ctx, "call/big"); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("the default conversation reads another conversation's tool result: %v, want 404", err)
	}
}

// checkRecords: each conversation's trail holds its own compactions only, as many as want
// says; the replica has one engine for each.
func (e *conversationEnv) checkRecords(t *testing.T, want map[string]int) {
	t.Helper()
	uid := string(e.sess.UID)
	for conv, n := range want {
		recs := e.records(t, conv)
		if len(recs) != n {
			t.Errorf("conversation %q: %d records, want %d", conv, len(recs), n)
		}
		for _, rec := range recs {
			if rec.SessionID != compaction.ConversationSessionID(uid, conv) {
				t.Errorf("conversation %q's trail holds a record of %q", conv, rec.SessionID)
			}
		}
	}
	if n := e.server.engines.Len(); n != len(want) {
		t.Errorf("%d engines, want one for each of the %d conversations", n, len(want))
	}
}

// checkDeleteSession deletes the session's objects as the finalizer does, DeleteSession(uid)
// at the pinned location, and checks it removes every object in the bucket (the session's
// and all its conversations', among them the keys in some).
func (e *conversationEnv) checkDeleteSession(t *testing.T, some []string) {
	t.Helper()
	ctx := context.Background()
	uid := string(e.sess.UID)
	keys := e.keys(t)
	for _, want := range some {
		if _, ok := keys[want]; !ok {
			t.Errorf("no key %s: %q", want, slices.Sorted(maps.Keys(keys)))
		}
	}
	pin, err := policy.Locations{Namespace: conversationCRN, Reader: e.c}.Get(ctx, e.sess)
	if err != nil || pin == nil {
		t.Fatalf("pinned location: %v", err)
	}
	cfg, err := backends.S3Config(ctx, policy.DirectSecrets{Reader: e.c}, pin.Location)
	if err != nil {
		t.Fatal(err)
	}
	store, err := (&backends.Stores{}).Get(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	removed, err := store.DeleteSession(ctx, uid)
	if err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if removed != len(keys) {
		t.Errorf("DeleteSession removed %d objects of the %d in the bucket", removed, len(keys))
	}
	if left := e.keys(t); len(left) != 0 {
		t.Errorf("left after DeleteSession: %v", left)
	}
}

// TestBadConversationIDs: a conversation ID that is not 1-64 of [A-Za-z0-9._-] starting
// with no '.', a repeated or empty parameter, or a query that does not parse, is a 400
// naming the parameter on every route, and nothing is stored.
func TestBadConversationIDs(t *testing.T) {
	e := startConversationEnv(t)
	ctx := context.Background()
	// Something stored first, so "nothing changes" is checked against a non-empty bucket.
	if _, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: markedHistory("GOOD", 4), Force: true},
		compactclient.InConversation("good")); err != nil {
		t.Fatal(err)
	}
	before := e.keys(t)
	if len(before) == 0 {
		t.Fatal("nothing stored by a good request")
	}

	history, err := json.Marshal(compactclient.CompactRequest{Messages: markedHistory("BAD", 2), Force: true})
	if err != nil {
		t.Fatal(err)
	}
	offload, err := json.Marshal(compactclient.OffloadRequest{Message: compaction.Message{Role: compaction.RoleTool, ToolCallID: "call_1",
		Content: strings.Repeat("x", 20000)}})
	if err != nil {
		t.Fatal(err)
	}
	base := e.url + "/v1/namespaces/" + conversationNS + "/sessions/" + e.sess.Name
	queries := []string{
		"conversation=", // empty
		"conversation=" + strings.Repeat("a", 65), // too long
		"conversation=..%2Fx",                     // ../x
		"conversation=../x",                       // ../x unescaped
		"conversation=a%2Fb",                      // a/b
		"conversation=a/b",                        // a/b unescaped
		"conversation=%C3%BC",                     // ü
		"conversation=%2F",                        // /
		"conversation=%252F",                      // the text %2F
		"conversation=.hidden",                    // starts with '.'
		"conversation=.summarizer-budget",         // the session's budget (compaction.SessionBudgetID)
		"conversation=..",                         // ..
		"conversation=a..b",                       // holds ..
		"conversation=a%00b",                      // NUL
		"conversation=a+b",                        // a b
		"conversation=a&conversation=b",           // repeated
		"conversation=%zz",                        // malformed escape
	}
	for _, q := range queries {
		for _, rt := range []struct {
			method, path string
			body         []byte
		}{
			{http.MethodPost, "/compact", history},
			{http.MethodPost, "/toolresults", offload},
			{http.MethodGet, "/toolresults/call_1", nil},
			{http.MethodGet, "/records", nil},
		} {
			var body io.Reader
			if rt.body != nil {
				body = bytes.NewReader(rt.body)
			}
			req, err := http.NewRequestWithContext(ctx, rt.method, base+rt.path+"?"+q, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+e.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			var er compactclient.ErrorResponse
			if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(data, &er) != nil || er.Reason != ReasonBadRequest ||
				!strings.Contains(er.Message, "conversation") && !strings.Contains(er.Message, "query") {
				t.Errorf("%s %s?%s: %d %s, want 400 %s naming the conversation parameter", rt.method, rt.path, q, resp.StatusCode, data, ReasonBadRequest)
			}
		}
	}
	after := e.keys(t)
	if len(after) != len(before) {
		t.Errorf("bad requests changed the bucket: %d keys before, %d after", len(before), len(after))
	}
	for k, etag := range before {
		if after[k] != etag {
			t.Errorf("bad requests changed %s", k)
		}
	}
	if n := e.server.engines.Len(); n != 1 {
		t.Errorf("%d engines after bad requests, want only the good conversation's", n)
	}
	// Without the parameter, and with other parameters only, the session's default
	// conversation answers as it always did.
	for _, q := range []string{"", "?unrelated=1"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/records"+q, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(data) != 0 {
			t.Errorf("records%s: %d %q, want 200 and the default conversation's empty trail", q, resp.StatusCode, data)
		}
	}
}
