package compactapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/policy"
)

// TestHistoryOutlivesThePolicy: reading the archive back and resetting need only the session
// and the store at its pinned location (as records and tool results do): they work after the
// policy is deleted. The archive is read from a real MinIO, message for message, with an
// offloaded result as its placeholder.
func TestHistoryOutlivesThePolicy(t *testing.T) {
	ctx := context.Background()
	m := testenv.StartMinIO(t)
	scheme := runtime.NewScheme()
	testenv.Must(t, clientgoscheme.AddToScheme(scheme))
	testenv.Must(t, compactionv1alpha1.AddToScheme(scheme))
	creds := builder.MinIOSecret("team", "minio", "", "")
	creds.StringData, creds.Data = nil, map[string][]byte{"accessKeyID": []byte(m.AccessKey), "secretAccessKey": []byte(m.SecretKey)}
	spec := builder.DefaultedSpec(128000)
	spec.Storage.S3 = compactionv1alpha1.S3StorageSpec{Endpoint: m.Endpoint, Bucket: "history", Protocol: compactionv1alpha1.S3HTTP,
		CredentialsSecretRef: compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: "minio"}}}
	cp := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}, Spec: *spec}
	sessObj := &compactionv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "agent", UID: "uid-history"},
		Spec:       compactionv1alpha1.AgentSessionSpec{PolicyRef: compactionv1alpha1.PolicyReference{Name: "p"}},
		Status: compactionv1alpha1.AgentSessionStatus{Conditions: []metav1.Condition{{
			Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(creds, cp, sessObj).WithStatusSubresource(sessObj).Build()
	const crn = "compaction-system"
	_, err := policy.Locations{Namespace: crn, Reader: c, Writer: c}.Pin(ctx, sessObj, policy.FromNamespaced(cp), crn)
	testenv.Must(t, err)

	// What a compaction of the session archived, and its state.
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "history", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	testenv.Must(t, err)
	testenv.Must(t, store.EnsureBucket(ctx, true))
	archived := []compaction.Message{
		{Role: compaction.RoleUser, Content: "Fix the flaky test in pkg/cache."},
		{Role: compaction.RoleAssistant, ToolCalls: []compaction.ToolCall{{ID: "call_1", Type: "function", Function: compaction.FunctionCall{Name: "bash", Arguments: `{"cmd":"go test ./pkg/cache"}`}}}},
		{Role: compaction.RoleTool, ToolCallID: "call_1", Content: compaction.PlaceholderPrefix + " 9000 bytes\n--- FAIL: TestEvict (0.01s)"},
	}
	var buf bytes.Buffer
	testenv.Must(t, compaction.EncodeJSONL(&buf, archived))
	_, err = store.PutArchive(ctx, "uid-history", 1, 4, buf.Bytes())
	testenv.Must(t, err)
	testenv.Must(t, store.SaveState(ctx, "uid-history", &compaction.State{Watermark: 4, LastSummary: "s"}))

	s, _ := newTestMetrics(t)
	s.cache, s.apiReader, s.cfg.ClusterResourceNamespace = c, c, crn
	s.sessions = testResolver(s, policy.DirectSecrets{Reader: c})
	s.recorder = events.NewFakeRecorder(10)

	reads := func(when string) {
		t.Helper()
		sess, err := s.sessions.lookup(ctx, "team", "agent", false)
		if err != nil {
			t.Fatalf("%s: lookup for a read: %v", when, err)
		}
		w := httptest.NewRecorder()
		if err := s.history(w, httptest.NewRequest(http.MethodGet, "/history?from=2", nil), sess, struct{}{}); err != nil || w.Code != http.StatusOK {
			t.Fatalf("%s: history: %v, %d %s", when, err, w.Code, w.Body)
		}
		var got compactclient.HistoryResponse
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: history answer %q: %v", when, w.Body, err)
		}
		if len(got.Messages) != 2 || got.Next != 4 || got.Truncated || got.Messages[0].Index != 2 || got.Messages[1].Archive != "1-4" ||
			!got.Messages[0].Message.Equal(&archived[1]) || !got.Messages[1].Message.Equal(&archived[2]) {
			t.Errorf("%s: history from 2 = %s", when, w.Body)
		}
		w = httptest.NewRecorder()
		if err := s.historySearch(w, httptest.NewRequest(http.MethodGet, "/history/search?q=--+fail%3A+testevict", nil), sess, struct{}{}); err != nil ||
			w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &got) != nil || len(got.Messages) != 1 || got.Messages[0].Index != 3 ||
			got.Messages[0].Role != compaction.RoleTool {
			t.Errorf("%s: search: %v, %d %s", when, err, w.Code, w.Body)
		}
	}
	reads("policy present")
	testenv.Must(t, c.Delete(ctx, cp))
	reads("policy deleted")

	sess, err := s.sessions.lookup(ctx, "team", "agent", false)
	testenv.Must(t, err)
	w := httptest.NewRecorder()
	if err := s.reset(w, httptest.NewRequest(http.MethodPost, "/reset", nil), sess, struct{}{}); err != nil || w.Code != http.StatusOK {
		t.Fatalf("reset with the policy deleted: %v, %d %s", err, w.Code, w.Body)
	}
	if st, err := store.LoadState(ctx, "uid-history"); err != nil || st.Watermark != 0 || st.LastSummary != "" {
		t.Errorf("state after the reset: %+v, %v", st, err)
	}
	reads("after the reset")
}
