package compactapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
)

// countingSecrets fails the test's expectations by counting: every read is recorded.
type countingSecrets struct{ reads []client.ObjectKey }

func (c *countingSecrets) SecretValues(_ context.Context, key client.ObjectKey, keys ...string) (map[string][]byte, error) {
	c.reads = append(c.reads, key)
	out := map[string][]byte{}
	for _, k := range keys {
		out[k] = []byte("value")
	}
	return out, nil
}

// TestLookupAccess: issue 14. The compaction API refuses a session whose ClusterCompactionPolicy
// does not select its namespace (403 NamespaceNotAllowed), and one whose pinned location names
// a Secret namespace or an endpoint the operator's flags do not allow, without reading the
// Secret; the same session is served once the namespace is labelled.
func TestLookupAccess(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(clientgoscheme.AddToScheme(scheme))
	must(compactionv1alpha1.AddToScheme(scheme))

	const crn = "compaction-system"
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	cp := &compactionv1alpha1.ClusterCompactionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: compactionv1alpha1.ClusterCompactionPolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"compaction.harness9.io/agents": "true"}},
			CompactionPolicySpec: compactionv1alpha1.CompactionPolicySpec{ContextWindow: 100000, Storage: compactionv1alpha1.StorageSpec{S3: compactionv1alpha1.S3StorageSpec{
				Endpoint: "minio.minio.svc:9000", Bucket: "agent-context", Protocol: compactionv1alpha1.S3HTTP,
				CredentialsSecretRef: compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: "minio"}},
			}}},
		},
	}
	ready := []metav1.Condition{{Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}
	sess := &compactionv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "agent", UID: "uid-1"},
		Spec: compactionv1alpha1.AgentSessionSpec{PolicyRef: compactionv1alpha1.PolicyReference{
			Kind: compactionv1alpha1.PolicyKindCluster, Name: cp.Name}},
		Status: compactionv1alpha1.AgentSessionStatus{Conditions: ready},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nsObj, cp, sess).WithStatusSubresource(sess).Build()
	// The location pinned when the session became Ready.
	_, err := policy.Locations{Namespace: crn, Reader: c, Writer: c}.Pin(ctx, sess, policy.FromCluster(cp), crn)
	must(err)

	secrets := &countingSecrets{}
	s, _ := newTestMetrics(t)
	s.cache, s.apiReader, s.cfg.ClusterResourceNamespace = c, c, crn
	s.sessions = testResolver(s, secrets)
	lookup := func() error {
		t.Helper()
		_, err := s.sessions.lookup(ctx, "team", "agent", true)
		return err
	}

	var ae *apiError
	if err := lookup(); !errors.As(err, &ae) || ae.code != http.StatusForbidden || ae.reason != ReasonNamespaceNotAllowed {
		t.Errorf("namespace not selected: %v, want 403 %s", err, ReasonNamespaceNotAllowed)
	}
	if len(secrets.reads) > 0 {
		t.Errorf("Secrets read for a refused request: %v", secrets.reads)
	}

	nsObj.Labels = map[string]string{"compaction.harness9.io/agents": "true"}
	must(c.Update(ctx, nsObj))
	if err := lookup(); err != nil {
		t.Fatalf("namespace labelled: %v", err)
	}
	if len(secrets.reads) != 1 || secrets.reads[0] != (client.ObjectKey{Namespace: crn, Name: "minio"}) {
		t.Errorf("Secret reads %v, want %s/minio once", secrets.reads, crn)
	}

	// The operator's flags narrowed since the location was pinned: an endpoint outside
	// egress.allowedEndpoints, then a Secret namespace outside the operator's (a location pinned
	// by an older operator from a cluster policy naming kube-system).
	secrets.reads = nil
	allowed, err := egress.Parse([]string{"s3.example.com"})
	must(err)
	s.sessions.access.Endpoints = allowed
	if err := lookup(); !errors.As(err, &ae) || ae.code != http.StatusConflict || !containsText(err, "minio.minio.svc:9000") {
		t.Errorf("endpoint not allowed: %v, want 409 naming it", err)
	}
	s.sessions.access.Endpoints = nil
	legacy := cp.DeepCopy()
	legacy.ObjectMeta = metav1.ObjectMeta{Name: "legacy"}
	legacy.Spec.NamespaceSelector = nil
	legacy.Spec.Storage.S3.CredentialsSecretRef.Namespace = "kube-system"
	old := sess.DeepCopy()
	old.ObjectMeta = metav1.ObjectMeta{Namespace: "team", Name: "old-agent", UID: "uid-2"}
	old.Spec.PolicyRef.Name = legacy.Name
	must(c.Create(ctx, legacy))
	must(c.Create(ctx, old))
	_, err = policy.Locations{Namespace: crn, Reader: c, Writer: c}.Pin(ctx, old, policy.FromCluster(legacy), crn)
	must(err)
	if _, err := s.sessions.lookup(ctx, "team", "old-agent", true); !errors.As(err, &ae) || ae.code != http.StatusConflict || !containsText(err, "kube-system/minio") {
		t.Errorf("Secret namespace not allowed: %v, want 409 naming the Secret", err)
	}
	if len(secrets.reads) > 0 {
		t.Errorf("Secrets read for refused requests: %v", secrets.reads)
	}
}

func containsText(err error, s string) bool {
	return err != nil && len(s) > 0 && strings.Contains(err.Error(), s)
}

// TestSummarizerErrorsDoNotEcho: issue 14. The summarizer the API builds for a policy keeps the
// endpoint's answer out of its errors (which go into records, the compact answer and the
// session's events), and dials only what egress.allowedEndpoints allows.
func TestSummarizerErrorsDoNotEcho(t *testing.T) {
	const canary = "CANARY-llm-body-41aa"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"message":"` + canary + `"}}`))
	}))
	defer srv.Close()
	p := &policy.Policy{Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: "team", Name: "p", Spec: &compactionv1alpha1.CompactionPolicySpec{
		Summarizer: compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI,
			OpenAI: compactionv1alpha1.OpenAISummarizerSpec{BaseURL: srv.URL + "/v1", Model: "m"}}}}
	s, _ := newTestMetrics(t)
	s.sessions = testResolver(s, &countingSecrets{})
	sum, err := s.sessions.summarizerFor(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sum.Summarize(context.Background(), compaction.SummaryRequest{SessionID: "s", Tier: compaction.TierFull,
		Messages: []compaction.Message{{Role: compaction.RoleUser, Content: "hi"}}, MaxSummaryChars: 500})
	if err == nil || strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), "400") {
		t.Errorf("summarizer error %v: want the status, not the body", err)
	}

	// With egress.allowedEndpoints not naming it, the summarizer is not even dialled.
	allowed, err := egress.Parse([]string{"api.openai.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	s.sessions.llm = llmClient(allowed)
	sum, err = s.sessions.summarizerFor(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sum.Summarize(context.Background(), compaction.SummaryRequest{SessionID: "s", Tier: compaction.TierFull,
		Messages: []compaction.Message{{Role: compaction.RoleUser, Content: "hi"}}, MaxSummaryChars: 500})
	if !errors.Is(err, egress.ErrNotAllowed) {
		t.Errorf("summarizer at a loopback address outside egress.allowedEndpoints: %v, want ErrNotAllowed", err)
	}
}
