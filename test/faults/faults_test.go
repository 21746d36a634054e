// Package faults injects the failures production brings into a running operator (the
// manager binary, a real kube-apiserver and MinIO): storage dying mid-session and a
// summarizer that is down, slow, failing or talking nonsense.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/replay"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

const ns = "default"

func TestFaults(t *testing.T) {
	root := testenv.RepoRoot(t)
	history := mustLoad(t, filepath.Join(root, "testdata", "long-session.jsonl"))
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	// The control plane restart below takes longer than the default 10 s renew deadline on
	// this machine; a leader that cannot renew exits (the kubelet would restart it).
	mgr := cl.StartManager(bin, "--api-request-timeout", "20s",
		"--leader-election-lease-duration", "90s", "--leader-election-renew-deadline", "75s")
	token := cl.BindAgent(ns, "agent")
	api := mgr.APIClient(t, token)

	t.Run("StorageDiesMidReplay", func(t *testing.T) { testStorageDies(t, cl, m, api, history) })
	t.Run("SummarizerFaults", func(t *testing.T) { testSummarizerFaults(t, cl, m, api, history) })
	t.Run("APIServerRestart", func(t *testing.T) { testAPIServerRestart(t, cl, m, api, history) })
	t.Run("ManagerKilledMidCompaction", func(t *testing.T) { mgr = testKilledMidCompaction(t, cl, m, mgr, bin, token, history) })
	t.Run("ManagerKilledMidGC", func(t *testing.T) { testKilledMidGC(t, cl, m, mgr, bin) })
}

// testKilledMidCompaction SIGKILLs the manager while a compaction waits for the summarizer:
// the stored state is the last completed compaction's, no record of the killed one exists,
// and the agent's next request, on a new manager, continues from the persisted anchors.
// It returns the new manager.
func testKilledMidCompaction(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, mgr *operator.Manager, bin, token string, history []compaction.Message) *operator.Manager {
	const window = 8000
	var hang atomic.Bool
	called, release := make(chan struct{}, 1), make(chan struct{})
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			select {
			case called <- struct{}{}:
			default:
			}
			select { // the manager dies with the request open
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices": [{"message": {"role": "assistant", "content": "USER_INTENT: fix the tests\nEXECUTION_PROGRESS: edited files\nKEY_DECISION: keep the API\nTRIED_SOLUTION: N/A\nNEXT_STEP: run pytest\n\nSummary: the agent fixed things."}}]}`))
	}))
	t.Cleanup(llm.Close)
	t.Cleanup(func() { close(release) }) // before Close: a hung call must not block it
	ctx := context.Background()
	testenv.Must(t, cl.Client.Create(ctx, builder.CredentialsSecret(ns, "llm-killed", map[string]string{"apiKey": "sk-test"})))
	cl.CreateMinIOPolicy(ns, "killed", "killed", m, window, func(s *compactionv1alpha1.CompactionPolicySpec) {
		s.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
			BaseURL: llm.URL + "/v1", Model: "test-model", TimeoutSeconds: 60,
			APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "llm-killed"}, Key: "apiKey"},
		}}
	})
	sess := cl.CreateReadySession(ns, "killed", "killed")
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "agent-context", Prefix: "killed", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	testenv.Must(t, err)

	api := mgr.APIClient(t, token)
	agent := &compactclient.Session{Client: api, Namespace: ns, Name: "killed"}
	turns := compaction.AssistantTurns(history)
	var (
		answered []*compaction.CompactionRecord // compactions above TierNone, in order
		lastFull *compaction.CompactionRecord
		turn     int
	)
	// Replay until a Full compaction has stored its anchors, then let the summarizer hang.
	for ; turn < len(turns) && lastFull == nil; turn++ {
		resp, err := agent.Compact(ctx, history[:turns[turn]], 0)
		testenv.Must(t, err)
		if rec := resp.Record; rec.Tier != compaction.TierNone {
			answered = append(answered, rec)
			if rec.Tier == compaction.TierFull {
				lastFull = rec
			}
		}
	}
	if lastFull == nil {
		t.Fatal("the replay made no Full compaction")
	}
	before, err := store.LoadState(ctx, string(sess.UID))
	testenv.Must(t, err)
	if len(before.LastAnchors) == 0 {
		t.Fatal("no anchors stored after a Full compaction")
	}
	hang.Store(true)
	type answer struct {
		resp *compactclient.CompactResponse
		err  error
	}
	inFlight := make(chan answer, 1)
	var killedTurn int
	for ; turn < len(turns); turn++ {
		// A turn that needs no summary may still save the state (a Warn offload batch, an
		// Emergency, which summarizes without the LLM): compare with the state the killed
		// compaction started from.
		before, err = store.LoadState(ctx, string(sess.UID))
		testenv.Must(t, err)
		go func(n int) {
			resp, err := agent.Compact(ctx, history[:n], 0)
			inFlight <- answer{resp, err}
		}(turns[turn])
		select {
		case <-called:
		case a := <-inFlight:
			testenv.Must(t, a.err) // a turn that needed no summary
			if rec := a.resp.Record; rec.Tier != compaction.TierNone {
				answered = append(answered, rec)
			}
			continue
		}
		killedTurn = turn
		break
	}
	if killedTurn == 0 {
		t.Fatal("no later turn called the summarizer")
	}
	if err := syscall.Kill(mgr.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if a := <-inFlight; a.err == nil {
		t.Fatal("the compaction in flight answered although the manager was killed")
	}
	_ = mgr.Stop(5 * time.Second)
	cl.ExpireLease()
	hang.Store(false)

	after, err := store.LoadState(ctx, string(sess.UID))
	testenv.Must(t, err)
	if after.Watermark != before.Watermark || after.PrefixHash != before.PrefixHash || len(after.LastAnchors) != len(before.LastAnchors) {
		t.Fatalf("stored state changed by the killed compaction: watermark %d -> %d, anchors %d -> %d",
			before.Watermark, after.Watermark, len(before.LastAnchors), len(after.LastAnchors))
	}

	next := cl.StartManager(bin, "--api-request-timeout", "20s",
		"--leader-election-lease-duration", "90s", "--leader-election-renew-deadline", "75s")
	api = next.APIClient(t, token)
	agent.Client = api
	// The same turn again, as the agent's retry, and a few more.
	for n := killedTurn; n < min(killedTurn+5, len(turns)); n++ {
		resp, err := agent.Compact(ctx, history[:turns[n]], 0)
		if err != nil {
			t.Fatalf("turn %d on the new manager: %v", n, err)
		}
		rec := resp.Record
		if rec.Tier == compaction.TierNone {
			continue
		}
		if n == killedTurn && rec.WatermarkBefore != before.Watermark {
			t.Errorf("the retried turn starts at watermark %d, the persisted state is at %d", rec.WatermarkBefore, before.Watermark)
		}
		answered = append(answered, rec)
	}
	var trail bytes.Buffer
	testenv.Must(t, api.Records(ctx, ns, "killed", &trail))
	var ids []string
	for line := range strings.SplitSeq(strings.TrimSpace(trail.String()), "\n") {
		var r compaction.CompactionRecord
		testenv.Must(t, json.Unmarshal([]byte(line), &r))
		ids = append(ids, r.ID)
	}
	if len(ids) != len(answered) {
		t.Fatalf("%d records, the agent was answered %d compactions: the killed one left a record, or one was lost", len(ids), len(answered))
	}
	for i, rec := range answered {
		if ids[i] != rec.ID {
			t.Errorf("record %d is %s, the agent was answered %s", i, ids[i], rec.ID)
		}
	}
	t.Logf("killed at turn %d with the summarizer call open; state kept at watermark %d with %d anchors; %d records, one per answered compaction",
		killedTurn, before.Watermark, len(before.LastAnchors), len(ids))
	return next
}

// testAPIServerRestart restarts kube-apiserver while agents compact: the manager keeps
// serving (sessions from its cache, authentication answers it had), no request fails for
// longer than the restart, and the sessions' status catches up with every compaction. The
// restart comes as the manager's cached TokenReview and SubjectAccessReview answers expire
// (30 s after the agents' first turn), so it must get through without asking the API server.
func testAPIServerRestart(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, api *compactclient.Client, history []compaction.Message) {
	const (
		window = 8000
		agents = 4
		down   = 5 * time.Second
	)
	cl.CreateMinIOPolicy(ns, "restart", "restart", m, window, nil)
	turns := compaction.AssistantTurns(history)
	ctx := context.Background()

	type outcome struct {
		name        string
		compactions tierCounts
		failures    int
		failedDown  int // failures while no kube-apiserver process ran
		firstErr    error
		longest     time.Duration
		duringOut   int
		err         error
	}
	var restarted, killedAt, backAt atomic.Int64
	results := make(chan outcome, agents)
	begin := make(chan struct{})
	for i := range agents {
		name := fmt.Sprintf("restart-%d", i)
		cl.CreateReadySession(ns, name, "restart")
		go func() {
			o := outcome{name: name}
			agent := &compactclient.Session{Client: api, Namespace: ns, Name: name}
			// Turns go on until the restart is over and 20 more were made.
			var after int
			for turn := 0; turn < len(turns) && (restarted.Load() == 0 || after < 20); turn++ {
				if turn == 1 {
					<-begin // the first turn filled the manager's auth cache
				}
				var failingSince time.Time
				for {
					resp, err := agent.Compact(ctx, history[:turns[turn]], 0)
					if err == nil {
						// The status counts compactions: turns that changed the view.
						switch rec := resp.Record; {
						case !rec.ChangedView():
						case rec.Tier == compaction.TierWarn:
							o.compactions.Warn++
						case rec.Tier == compaction.TierSoft:
							o.compactions.Soft++
						case rec.Tier == compaction.TierFull:
							o.compactions.Full++
						case rec.Tier == compaction.TierEmergency:
							o.compactions.Emergency++
						}
						break
					}
					if o.failures++; o.firstErr == nil {
						o.firstErr = err
					}
					if k := killedAt.Load(); k != 0 && time.Since(time.Unix(0, k)) < down-200*time.Millisecond {
						o.failedDown++
					}
					if failingSince.IsZero() {
						failingSince = time.Now()
					}
					if time.Since(failingSince) > time.Minute {
						o.err = fmt.Errorf("%s turn %d failing for a minute: %w", name, turn, err)
						results <- o
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				if !failingSince.IsZero() {
					o.longest = max(o.longest, time.Since(failingSince))
				}
				if restarted.Load() != 0 && backAt.Load() == 0 {
					o.duringOut++
				}
				if backAt.Load() != 0 {
					after++
				}
				time.Sleep(20 * time.Millisecond)
			}
			results <- o
		}()
	}

	// The auth answers of the first turns expire 30 s after them: kill kube-apiserver just
	// before, with the agents compacting.
	time.Sleep(27 * time.Second)
	close(begin)
	time.Sleep(time.Second)
	restarted.Store(1)
	start := time.Now()
	killedAt.Store(start.UnixNano())
	cl.RestartAPIServer(down)
	outageTook := time.Since(start)
	backAt.Store(time.Now().UnixNano())
	t.Logf("kube-apiserver down and back in %s", outageTook.Round(time.Millisecond))

	want := map[string]tierCounts{}
	for range agents {
		o := <-results
		if o.err != nil {
			t.Fatal(o.err)
		}
		t.Logf("%s: %d turns answered while kube-apiserver was down, %d failed requests, longest failing stretch %s, compactions %+v",
			o.name, o.duringOut, o.failures, o.longest.Round(time.Millisecond), o.compactions)
		if o.duringOut == 0 {
			t.Errorf("%s: no turn was answered while kube-apiserver was down", o.name)
		}
		// While kube-apiserver is gone the manager answers from what it knows (its cache, auth
		// answers past their expiry). A kube-apiserver that is starting may still refuse for
		// a moment; the bound is that nothing fails for longer than the restart.
		if o.failedDown > 0 {
			t.Errorf("%s: %d requests failed while kube-apiserver was down (first: %v): the manager should answer from the auth answers it has", o.name, o.failedDown, o.firstErr)
		}
		if o.failures > 0 {
			t.Logf("%s: %d requests failed during the restart (first: %v)", o.name, o.failures, o.firstErr)
		}
		if o.longest > outageTook {
			t.Errorf("%s: requests failed for %s, longer than the restart (%s)", o.name, o.longest, outageTook)
		}
		if o.compactions == (tierCounts{}) {
			t.Errorf("%s: no compaction above TierNone: the test history does not reach Warn", o.name)
		}
		want[o.name] = o.compactions
	}
	// The status catches up: every session's counters are what its agent was answered.
	deadline := time.Now().Add(time.Minute)
	for name, counts := range want {
		for {
			var s compactionv1alpha1.AgentSession
			testenv.Must(t, cl.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s))
			if countsOf(s.Status.Compactions) == counts {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: status counts %+v a minute after the restart, the agent was answered %+v", name, s.Status.Compactions, counts)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// testKilledMidGC deletes a session with thousands of stored objects and SIGKILLs the
// manager while it deletes them; a new manager finishes the deletion and nothing is left.
func testKilledMidGC(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, mgr *operator.Manager, bin string) {
	ctx := context.Background()
	cl.CreateMinIOPolicy(ns, "gc", "gc", m, 8000, nil)
	sess := cl.CreateReadySession(ns, "many-objects", "gc")
	sid := string(sess.UID)
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "agent-context", Prefix: "gc", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	testenv.Must(t, err)
	const objects = 6000
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

	testenv.Must(t, cl.Client.Delete(ctx, sess))
	// Kill it once the deletion is under way: batches go in key order, the first object first.
	for started := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if _, err := store.GetToolResult(ctx, sid, "call_00000"); errors.Is(err, compaction.ErrNotFound) {
			break
		}
		if time.Since(started) > 2*time.Minute {
			t.Fatal("the deletion did not start within 2 minutes")
		}
	}
	if err := syscall.Kill(mgr.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = mgr.Stop(5 * time.Second)
	cl.ExpireLease()
	left := countObjects(ctx, t, m, store, sid)
	t.Logf("manager killed with %d of %d objects left", left, objects)
	if left == 0 {
		t.Fatal("the deletion was complete before the kill: nothing was left for the next manager")
	}
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
	if n := countObjects(ctx, t, m, store, sid); n != 0 {
		t.Errorf("%d objects left after the deletion completed", n)
	}
}

// countObjects counts the session's stored tool results (one listing).
func countObjects(ctx context.Context, t *testing.T, m *testenv.MinIO, store *s3.Store, sid string) int {
	t.Helper()
	mc, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	testenv.Must(t, err)
	n := 0
	for obj := range mc.ListObjects(ctx, store.Bucket(), minio.ListObjectsOptions{Prefix: store.Prefix() + "tool_results/" + sid + "/", Recursive: true}) {
		testenv.Must(t, obj.Err)
		n++
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

	turns := compaction.AssistantTurns(history)
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
			// Once storage is back, nothing fails; an Emergency (the window is small and this
			// transcript's results large) is not a failure.
			if turn >= up+3 && rec.Error != "" && rec.Error != compaction.EmergencyError {
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
	testenv.Must(t, cl.Client.Create(ctx, builder.CredentialsSecret(ns, "llm", map[string]string{"apiKey": "sk-test"})))

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
	turns := compaction.AssistantTurns(history)
	msgs := history[:turns[40]]
	window := int32(float64(compaction.EstimateTokens(msgs)) / 0.85)
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			mode.Store(tc.mode)
			name := "llm-" + tc.mode
			cl.CreateMinIOPolicy(ns, name, name, m, window, func(s *compactionv1alpha1.CompactionPolicySpec) {
				s.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
					BaseURL: tc.baseURL, Model: "test-model", TimeoutSeconds: 1,
					APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "llm"}, Key: "apiKey"},
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
	testenv.Must(t, l.Close())
	return addr
}

func mustLoad(t *testing.T, path string) []compaction.Message {
	t.Helper()
	msgs, err := replay.Load(path)
	testenv.Must(t, err)
	return msgs
}

// tierCounts is status.compactions with absent counters as 0, to compare with what the
// agents were answered.
type tierCounts struct{ Warn, Soft, Full, Emergency int64 }

func countsOf(c compactionv1alpha1.TierCounts) tierCounts {
	return tierCounts{ptr.Deref(c.Warn, 0), ptr.Deref(c.Soft, 0), ptr.Deref(c.Full, 0), ptr.Deref(c.Emergency, 0)}
}
