package compactapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/policy"
)

// TestReadsOutliveThePolicy: issue 15. Reading a session's records and offloaded tool results
// needs only the session and the store at its pinned location: it works with the summarizer's
// Secret missing and after the policy is deleted (the location is pinned to outlive it),
// where compact and offload, which need the policy's engine configuration and summarizer,
// answer 503 and 409.
func TestReadsOutliveThePolicy(t *testing.T) {
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	m := testenv.StartMinIO(t)
	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(compactionv1alpha1.AddToScheme(scheme))

	// Data, not StringData: the fake client does not convert. Labelled for policies' use.
	creds := builder.MinIOSecret("team", "minio", "", "")
	creds.StringData, creds.Data = nil, map[string][]byte{"accessKeyID": []byte(m.AccessKey), "secretAccessKey": []byte(m.SecretKey)}
	spec := builder.DefaultedSpec(128000)
	spec.Storage.S3 = compactionv1alpha1.S3StorageSpec{Endpoint: m.Endpoint, Bucket: "reads", Protocol: compactionv1alpha1.S3HTTP,
		CredentialsSecretRef: compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: "minio"}}}
	// The OpenAI summarizer's key Secret does not exist.
	spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
		BaseURL: "http://llm.invalid/v1", Model: "m",
		APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "llm"}, Key: "key"}}}
	cp := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}, Spec: *spec}
	sessObj := &compactionv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "agent", UID: "uid-reads"},
		Spec:       compactionv1alpha1.AgentSessionSpec{PolicyRef: compactionv1alpha1.PolicyReference{Name: "p"}},
		Status: compactionv1alpha1.AgentSessionStatus{Conditions: []metav1.Condition{{
			Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(creds, cp, sessObj).WithStatusSubresource(sessObj).Build()
	const crn = "compaction-system"
	_, err := policy.Locations{Namespace: crn, Reader: c, Writer: c}.Pin(ctx, sessObj, policy.FromNamespaced(cp), crn)
	must(err)

	// What the session stored while its policy was usable.
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "reads", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	must(err)
	must(store.EnsureBucket(ctx, true))
	_, err = store.PutToolResult(ctx, "uid-reads", "call_1", "the full tool output\n")
	must(err)
	must(store.AppendRecord(ctx, &compaction.CompactionRecord{ID: "rec-1", SessionID: "uid-reads", Timestamp: time.Now(), Tier: compaction.TierWarn}))

	s, _ := newTestMetrics(t)
	s.cache, s.apiReader, s.cfg.ClusterResourceNamespace = c, c, crn
	s.sessions = testResolver(s, policy.DirectSecrets{Reader: c})

	reads := func(when string) {
		t.Helper()
		sess, err := s.sessions.lookup(ctx, "team", "agent", false)
		if err != nil {
			t.Fatalf("%s: lookup for a read: %v", when, err)
		}
		w := httptest.NewRecorder()
		if err := s.records(w, httptest.NewRequest(http.MethodGet, "/records", nil), sess, struct{}{}); err != nil || w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"rec-1"`) {
			t.Errorf("%s: records: %v, %d %q", when, err, w.Code, w.Body.String())
		}
		r := httptest.NewRequest(http.MethodGet, "/toolresults/call_1", nil)
		r.SetPathValue("id", "call_1")
		w = httptest.NewRecorder()
		if err := s.toolResult(w, r, sess, struct{}{}); err != nil || w.Code != http.StatusOK || w.Body.String() != "the full tool output\n" {
			t.Errorf("%s: tool result: %v, %d %q", when, err, w.Code, w.Body.String())
		}
	}
	writeRefused := func(when string, code int) {
		t.Helper()
		var ae *apiError
		if _, err := s.sessions.lookup(ctx, "team", "agent", true); !errors.As(err, &ae) || ae.code != code {
			t.Errorf("%s: lookup for compact: %v, want %d", when, err, code)
		}
	}

	reads("summarizer Secret missing")
	writeRefused("summarizer Secret missing", http.StatusServiceUnavailable)

	must(c.Delete(ctx, cp))
	reads("policy deleted")
	writeRefused("policy deleted", http.StatusConflict)
}
