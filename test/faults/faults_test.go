// Package faults injects the failures production brings into a running operator (the
// manager binary, a real kube-apiserver and MinIO): storage dying mid-session and a
// summarizer that is down, slow, failing or talking nonsense.
package faults

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	compactclient "github.com/harness9/compaction-operator/compaction/client"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/replay"
	"github.com/harness9/compaction-operator/internal/testenv"
	"github.com/harness9/compaction-operator/internal/testenv/operator"
)

const ns = "default"

func TestFaults(t *testing.T) {
	root := testenv.RepoRoot(t)
	history := mustLoad(t, filepath.Join(root, "testdata", "long-session.jsonl"))
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	mgr := cl.StartManager(bin, "--api-request-timeout", "20s")
	token := cl.BindAgent(ns, "agent")
	api, err := compactclient.New("http://"+mgr.APIAddr, compactclient.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("StorageDiesMidReplay", func(t *testing.T) { testStorageDies(t, cl, m, api, history) })
	t.Run("SummarizerFaults", func(t *testing.T) { testSummarizerFaults(t, cl, m, api, history) })
	t.Run("ManagerKilledMidGC", func(t *testing.T) { testKilledMidGC(t, cl, m, mgr, bin) })
}

// testKilledMidGC deletes a session with thousands of stored objects and SIGKILLs the
// manager while it deletes them; a new manager finishes the deletion and nothing is left.
func testKilledMidGC(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, mgr *operator.Manager, bin string) {
	ctx := context.Background()
	cl.CreateMinIOPolicy(ns, "gc", "gc", m, 8000, nil)
	sess := cl.CreateReadySession(ns, "many-objects", "gc")
	sid := string(sess.UID)
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "agent-context", Prefix: "gc", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	must(t, err)
	const objects = 3000
	ids := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				if _, err := store.PutToolResult(ctx, sid, fmt.Sprintf("call_%05d", i), []byte("output")); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range objects {
		ids <- i
	}
	close(ids)
	wg.Wait()

	must(t, cl.Client.Delete(ctx, sess))
	time.Sleep(300 * time.Millisecond) // let the deletion start
	if err := syscall.Kill(mgr.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = mgr.Stop(5 * time.Second)
	left := countObjects(ctx, t, store, sid)
	t.Logf("manager killed with %d of %d objects left", left, objects)
	cl.StartManager(bin, "--gc-retry-max-delay", "2s")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := cl.Client.Get(ctx, client.ObjectKeyFromObject(sess), sess)
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session not deleted 2 minutes after the new manager started: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := countObjects(ctx, t, store, sid); n != 0 {
		t.Errorf("%d objects left after the deletion completed", n)
	}
}

// countObjects counts the session's stored tool results.
func countObjects(ctx context.Context, t *testing.T, store *s3.Store, sid string) int {
	t.Helper()
	n := 0
	for i := range 3000 {
		if _, err := store.GetToolResult(ctx, sid, fmt.Sprintf("call_%05d", i)); err == nil {
			n++
		}
	}
	return n
}

// testStorageDies replays a transcript, stops MinIO for a stretch of turns and starts it
// again: every turn answers with a valid view within the window, the records of the outage
// say what failed, and offloading resumes once storage is back.
func testStorageDies(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, api *compactclient.Client, history []compaction.Message) {
	const window = 8000
	cl.CreateMinIOPolicy(ns, "outage", "outage", m, window, nil)
	cl.CreateReadySession(ns, "outage", "outage")
	agent := &compactclient.Session{Client: api, Namespace: ns, Name: "outage"}
	ctx := context.Background()

	turns := replay.AssistantTurns(history)
	down, up := len(turns)/3, len(turns)/3+25
	var live []compaction.Message
	turn := 0
	var outageErrors, hookFailures, offloadsAfter int
	outage := false
	defer func() {
		if outage {
			m.Start() // leave storage up for the other subtests
		}
	}()
	for i, msg := range history {
		switch i {
		case turns[down]:
			m.Stop()
			outage = true
		case turns[up]:
			m.Start()
			outage = false
		}
		if msg.Role == compaction.RoleTool {
			off, err := api.OffloadToolResult(ctx, ns, "outage", msg)
			switch {
			case err != nil && outage:
				// Offload at source fails during the outage: the agent keeps the original.
				hookFailures++
				live = append(live, msg)
			case err != nil:
				t.Fatalf("offload at message %d (storage up): %v", i, err)
			default:
				if off.Offloaded != nil && i > turns[up] {
					offloadsAfter++
				}
				live = append(live, off.Message)
			}
			continue
		}
		if turn < len(turns) && turns[turn] == i {
			start := time.Now()
			resp, err := agent.Compact(ctx, live, 0)
			if err != nil {
				t.Fatalf("turn %d (storage down: %v): %v", turn, outage, err)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("turn %d took %s", turn, took)
			}
			if err := compaction.Validate(resp.Messages); err != nil {
				t.Fatalf("turn %d: invalid view: %v", turn, err)
			}
			if tokens := compaction.EstimateTokens(resp.Messages); tokens > window {
				t.Errorf("turn %d: view of %d tokens exceeds the window", turn, tokens)
			}
			rec := resp.Record
			if outage && rec.Error != "" {
				outageErrors++
			}
			if turn >= up+3 && rec.Error != "" {
				t.Errorf("turn %d, storage back: record error %q", turn, rec.Error)
			}
			turn++
		}
		live = append(live, msg)
	}
	t.Logf("outage: %d turns with a record error, %d offloads at source failed; %d offloads after recovery", outageErrors, hookFailures, offloadsAfter)
	if outageErrors == 0 {
		t.Error("no record of the outage says what failed")
	}
	if offloadsAfter == 0 {
		t.Error("offloading did not resume after storage came back")
	}
}

// testSummarizerFaults points a policy's OpenAI summarizer at an endpoint that is down,
// slower than its timeout, failing with 500, or answering garbage: each Full compaction
// still answers within the request deadline, through the fallback, and its record names
// the cause.
func testSummarizerFaults(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, api *compactclient.Client, history []compaction.Message) {
	var mode atomic.Value
	mode.Store("ok")
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load().(string) {
		case "slow":
			select {
			case <-time.After(10 * time.Second):
			case <-r.Context().Done():
			}
		case "500":
			http.Error(w, `{"error": {"message": "model overloaded"}}`, http.StatusInternalServerError)
		case "garbage":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"choices": [{"message": {"content": "\u0000\u0000 lorem"}}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"choices": [{"message": {"role": "assistant", "content": "USER_INTENT: fix the tests\nEXECUTION_PROGRESS: edited files\nKEY_DECISION: N/A\nTRIED_SOLUTION: N/A\nNEXT_STEP: run pytest\n\nSummary: the agent fixed things."}}]}`))
		}
	}))
	t.Cleanup(llm.Close)
	ctx := context.Background()
	must(t, cl.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"}, StringData: map[string]string{"apiKey": "sk-test"}}))

	downURL := "http://" + closedPort(t) + "/v1"
	cases := []struct {
		mode, baseURL, wantInError string
	}{
		{"down", downURL, "summar"},
		{"slow", llm.URL + "/v1", "summar"},
		{"500", llm.URL + "/v1", "summar"},
		{"garbage", llm.URL + "/v1", "summar"},
	}
	// A history at about 85% of the window: a Full compaction, which calls the summarizer.
	turns := replay.AssistantTurns(history)
	msgs := history[:turns[40]]
	window := int32(float64(compaction.EstimateTokens(msgs)) / 0.85)
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			mode.Store(tc.mode)
			name := "llm-" + tc.mode
			cl.CreateMinIOPolicy(ns, name, name, m, window, func(s *compactionv1alpha1.CompactionPolicySpec) {
				s.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: &compactionv1alpha1.OpenAISummarizerSpec{
					BaseURL: tc.baseURL, Model: "test-model", Timeout: &metav1.Duration{Duration: time.Second},
					APIKeySecretRef: &compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "llm"}, Key: "apiKey"},
				}}
			})
			cl.CreateReadySession(ns, name, name)
			start := time.Now()
			resp, err := api.Compact(ctx, ns, name, compactclient.CompactRequest{Messages: msgs})
			took := time.Since(start)
			if err != nil {
				t.Fatalf("compaction with the summarizer %s: %v", tc.mode, err)
			}
			rec := resp.Record
			t.Logf("%s: tier %s in %s, error %q", tc.mode, rec.Tier, took.Round(time.Millisecond), rec.Error)
			if rec.Tier != compaction.TierFull {
				t.Fatalf("tier %s, want Full (the test history is sized for it)", rec.Tier)
			}
			if !strings.Contains(strings.ToLower(rec.Error), tc.wantInError) {
				t.Errorf("record error %q does not name the summarizer failure", rec.Error)
			}
			if took > 20*time.Second {
				t.Errorf("took %s, over the request deadline", took)
			}
			if err := compaction.Validate(resp.Messages); err != nil || compaction.EstimateTokens(resp.Messages) > int(window) {
				t.Errorf("fallback view invalid (%v) or over the window", err)
			}
		})
	}
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	must(t, l.Close())
	return addr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t *testing.T, path string) []compaction.Message {
	t.Helper()
	msgs, err := replay.Load(path)
	must(t, err)
	return msgs
}
