package compactapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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
)

// TestPassThroughReports runs the pass-through route through the whole handler
// (TokenReview, SubjectAccessReview, the pod isolation of checkOwner) on a real
// kube-apiserver with the generated CRD, with compactclient.Client.ReportPassThrough: reports
// of a pod's own session (not Ready: no storage is needed) add up into status.passThrough and
// set the PassThrough condition in one coalesced status write, counted in the metrics; bodies
// the route does not accept are answered 4xx and change nothing; another pod's token is
// refused as for compact; a compaction after the quiet interval sets the condition False
// (Compacting), keeping the counts, and a report does not clear status.anchors.
func TestPassThroughReports(t *testing.T) { //nolint:gocyclo // one story: reports, bad bodies, another pod, the condition's life
	root := testenv.RepoRoot(t)
	_, cfg := kubeenv.Start(t, kubeenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	scheme := runtime.NewScheme()
	testenv.Must(t, clientgoscheme.AddToScheme(scheme))
	testenv.Must(t, compactionv1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	testenv.Must(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)
	ctx := context.Background()
	const ns = "default"

	// The compaction-agent role's rights on the sessions of the namespace, for both pods.
	testenv.Must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}}))
	testenv.Must(t, c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{compactionv1alpha1.GroupVersion.Group}, Resources: []string{"agentsessions/compact", "agentsessions/toolresults", "agentsessions/records"},
		Verbs: []string{"create", "get"}}}}))
	testenv.Must(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "agent"}}}))
	podSession := func(name string) (*corev1.Pod, *compactionv1alpha1.AgentSession, string) { //nolint:unparam // the pod documents what the token is bound to
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{ServiceAccountName: "agent",
			Containers: []corev1.Container{{Name: "agent", Image: "agent:latest"}}}}
		testenv.Must(t, c.Create(ctx, pod))
		sess := builder.Session(ns, name, "p").Build()
		sess.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
		testenv.Must(t, c.Create(ctx, sess))
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{compactclient.DefaultTokenAudience}, ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
		testenv.Must(t, err)
		return pod, sess, tr.Status.Token
	}
	_, sessA, tokenA := podSession("agent-a")
	_, _, tokenB := podSession("agent-b")
	// The anchors a policy with anchorsInStatus: Include put in status: a report, which does
	// not resolve the policy, must leave them.
	anchors := []compactionv1alpha1.Anchor{{Type: compactionv1alpha1.AnchorUserIntent, Content: "fix the test"}}
	sessA.Status.Anchors = anchors
	testenv.Must(t, c.Status().Update(ctx, sessA))

	s, reg := newTestMetrics(t)
	s.cfg = Config{MaxBodyBytes: DefaultMaxBodyBytes, MaxMessages: DefaultMaxMessages, RequestTimeout: DefaultRequestTimeout,
		UsageInterval: DefaultUsageInterval, TokenAudience: compactclient.DefaultTokenAudience, PassThroughQuiet: time.Hour}
	s.cache, s.apiReader, s.writer = c, c, c
	s.sessions = testResolver(s, nil) // a report reads only the session: no Secret
	s.auth = authz.New(c, compactclient.DefaultTokenAudience, 0, 0)
	s.recorder, s.log = events.NewFakeRecorder(100), logr.Discard()
	s.status = newStatus(s)
	s.inflight = newBudget(DefaultMaxInflightBytes, s.metrics.Inflight)
	s.engines = newEngines()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	clientFor := func(token string) *compactclient.Client {
		cc, err := compactclient.New(srv.URL, compactclient.WithToken(token))
		testenv.Must(t, err)
		return cc
	}
	a, b := clientFor(tokenA), clientFor(tokenB)
	read := func() compactionv1alpha1.AgentSession {
		t.Helper()
		var got compactionv1alpha1.AgentSession
		testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(sessA), &got))
		return got
	}
	flush := func() {
		t.Helper()
		if failed := s.status.Flush(ctx); failed != 0 {
			t.Fatalf("%d status writes failed", failed)
		}
	}
	metric := func(name, reason string) float64 {
		return metricValue(t, reg, name, map[string]string{"reason": reason})
	}

	// Two reports, written together.
	if err := a.ReportPassThrough(ctx, ns, sessA.Name, compactclient.PassThroughReport{Protocol: "responses",
		Reason: compactclient.PassThroughStatefulRequest, Message: "previous_response_id is set", Count: 10}); err != nil {
		t.Fatalf("pod A reports on its own session: %v", err)
	}
	if err := a.ReportPassThrough(ctx, ns, sessA.Name, compactclient.PassThroughReport{Protocol: "responses", Conversation: "sub-1",
		Reason: compactclient.PassThroughStatefulRequest, Message: "store: true\nconversation", Count: 2}); err != nil {
		t.Fatalf("a second report: %v", err)
	}
	flush()
	got := read()
	pt := got.Status.PassThrough
	if ptr.Deref(pt.Requests, 0) != 12 || ptr.Deref(pt.Reasons.StatefulRequest, 0) != 12 ||
		pt.LastReason != compactionv1alpha1.PassThroughStatefulRequest || pt.LastProtocol != "responses" || pt.LastTime == nil {
		t.Fatalf("status.passThrough %+v", pt)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, compactionv1alpha1.ConditionPassThrough)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "StatefulRequest" || cond.ObservedGeneration != got.Generation ||
		cond.Message != `12 requests passed through uncompacted (StatefulRequest, protocol responses, conversation "sub-1"): store: true conversation` {
		t.Fatalf("PassThrough condition %+v", cond)
	}
	if !reflect.DeepEqual(got.Status.Anchors, anchors) {
		t.Errorf("a report changed status.anchors to %+v", got.Status.Anchors)
	}
	if n := metricValue(t, reg, "compaction_api_status_writes_total", map[string]string{"result": "written"}); n != 1 {
		t.Errorf("%v status writes, want 1 for both reports", n)
	}
	if n := metric("compaction_api_passthrough_reports_total", "StatefulRequest"); n != 2 {
		t.Errorf("compaction_api_passthrough_reports_total{reason=StatefulRequest} %v, want 2", n)
	}
	if n := metric("compaction_api_passthrough_requests_total", "StatefulRequest"); n != 12 {
		t.Errorf("compaction_api_passthrough_requests_total{reason=StatefulRequest} %v, want 12", n)
	}
	if n := metricValue(t, reg, "compaction_api_requests_total", map[string]string{routeLabel: "passthrough", "code": "204"}); n != 2 {
		t.Errorf("compaction_api_requests_total{route=passthrough,code=204} %v, want 2", n)
	}

	// Bodies the route does not take: 4xx, nothing pending, nothing counted.
	post := func(token, path, contentType, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
		testenv.Must(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		_ = resp.Body.Close()
		return resp
	}
	path := "/v1/namespaces/" + ns + "/sessions/" + sessA.Name + "/passthrough"
	for _, tc := range []struct {
		name, path, contentType, body string
		code                          int
	}{
		{"unknown field", path, "", `{"protocol":"openai","reason":"TooLarge","count":1,"requests":5}`, http.StatusBadRequest},
		{"unknown reason", path, "", `{"protocol":"openai","reason":"Overloaded","count":1}`, http.StatusBadRequest},
		{"zero count", path, "", `{"protocol":"openai","reason":"TooLarge","count":0}`, http.StatusBadRequest},
		{"long message", path, "", `{"protocol":"openai","reason":"TooLarge","count":1,"message":"` + strings.Repeat("m", 600) + `"}`, http.StatusBadRequest},
		{"two conversations", path + "?conversation=a", "", `{"protocol":"openai","reason":"TooLarge","count":1,"conversation":"b"}`, http.StatusBadRequest},
		{"body over 8 KiB", path, "", `{"protocol":"openai","reason":"TooLarge","count":1,"message":"` + strings.Repeat(" ", 9000) + `"}`, http.StatusRequestEntityTooLarge},
		{"not JSON", path, "text/plain", `reason=TooLarge`, http.StatusUnsupportedMediaType},
	} {
		if resp := post(tokenA, tc.path, tc.contentType, tc.body); resp.StatusCode != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.code)
		}
	}
	// Another pod's token is refused, as for compact; so is no token.
	for _, cc := range []*compactclient.Client{b, clientFor("")} {
		err := cc.ReportPassThrough(ctx, ns, sessA.Name, compactclient.PassThroughReport{Protocol: "openai", Reason: compactclient.PassThroughTooLarge, Count: 1})
		var ae *compactclient.APIError
		if !errors.As(err, &ae) || (ae.Code != http.StatusForbidden && ae.Code != http.StatusUnauthorized) {
			t.Errorf("a report on pod A's session with another token: %v, want 403 or 401", err)
		}
	}
	err = b.ReportPassThrough(ctx, ns, sessA.Name, compactclient.PassThroughReport{Protocol: "openai", Reason: compactclient.PassThroughTooLarge, Count: 1})
	if err == nil || !strings.Contains(err.Error(), "belongs to pod") {
		t.Errorf("pod B's report on pod A's session: %v, want a 403 that says why", err)
	}
	_, err = b.Compact(ctx, ns, sessA.Name, compactclient.CompactRequest{Messages: []compaction.Message{{Role: compaction.RoleUser, Content: "hi"}}})
	var ae *compactclient.APIError
	if !errors.As(err, &ae) || ae.Code != http.StatusForbidden {
		t.Errorf("pod B's compaction of pod A's session: %v, want 403 as for its report", err)
	}
	if err := a.ReportPassThrough(ctx, ns, "nobody", compactclient.PassThroughReport{Protocol: "openai", Reason: compactclient.PassThroughTooLarge, Count: 1}); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("a report on a session that does not exist: %v, want 404", err)
	}
	if pending := s.status.Pending(); pending != 0 {
		t.Errorf("%d status changes pending after refused reports", pending)
	}
	flush()
	if after := read(); !reflect.DeepEqual(after.Status, got.Status) {
		t.Errorf("refused reports changed the status:\n%+v\nwas\n%+v", after.Status, got.Status)
	}
	if n := metric("compaction_api_passthrough_reports_total", "TooLarge"); n != 0 {
		t.Errorf("refused reports counted: %v", n)
	}

	// A compaction within the quiet interval leaves the condition True; one after it sets it
	// False (Compacting) and keeps the counts.
	turn := func() {
		t.Helper()
		cur := read()
		sess := &session{obj: &cur, id: string(cur.UID), cfg: compaction.DefaultConfig(100000)}
		s.status.RecordTurn(sess.statusSession(), sess.statusTurn(&compaction.CompactionRecord{Timestamp: time.Now(), Tier: compaction.TierNone,
			TokensBefore: 100, TokensAfter: 100, Calibration: 1, UsageBefore: 0.1, UsageAfter: 0.1}))
		flush()
	}
	turn()
	if c := meta.FindStatusCondition(read().Status.Conditions, compactionv1alpha1.ConditionPassThrough); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("a compaction within the quiet interval: %+v", c)
	}
	s.cfg.PassThroughQuiet = time.Millisecond
	s.status = newStatus(s) // nothing is pending: turn flushed
	time.Sleep(10 * time.Millisecond)
	turn()
	got = read()
	if c := meta.FindStatusCondition(got.Status.Conditions, compactionv1alpha1.ConditionPassThrough); c == nil || c.Status != metav1.ConditionFalse ||
		c.Reason != compactionv1alpha1.ReasonCompacting || !strings.Contains(c.Message, "last pass-through report (StatefulRequest)") {
		t.Fatalf("a compaction after the quiet interval: %+v", c)
	}
	if ptr.Deref(got.Status.PassThrough.Requests, 0) != 12 {
		t.Errorf("status.passThrough after Compacting: %+v", got.Status.PassThrough)
	}
	// A turn that changes nothing more is not written again.
	written := metricValue(t, reg, "compaction_api_status_writes_total", map[string]string{"result": "written"})
	s.cfg.UsageInterval = time.Hour
	turn()
	if n := metricValue(t, reg, "compaction_api_status_writes_total", map[string]string{"result": "written"}); n != written {
		t.Errorf("%v status writes after Compacting, want %v", n, written)
	}

	// The next report makes it True again.
	if err := a.ReportPassThrough(ctx, ns, sessA.Name, compactclient.PassThroughReport{Protocol: "openai",
		Reason: compactclient.PassThroughWebSocket, Count: 1}); err != nil {
		t.Fatal(err)
	}
	flush()
	got = read()
	if c := meta.FindStatusCondition(got.Status.Conditions, compactionv1alpha1.ConditionPassThrough); c == nil || c.Status != metav1.ConditionTrue ||
		c.Reason != "WebSocket" || c.Message != "13 requests passed through uncompacted (WebSocket, protocol openai)" {
		t.Errorf("a report after Compacting: %+v", c)
	}
	if pt := got.Status.PassThrough; ptr.Deref(pt.Reasons.WebSocket, 0) != 1 || ptr.Deref(pt.Reasons.StatefulRequest, 0) != 12 || pt.LastProtocol != "openai" {
		t.Errorf("status.passThrough %+v", pt)
	}
}
