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

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

const ns = "default"

func TestFaults(t *testing.T) {
	root := testenv.RepoRoot(t)
	history := testenv.MustLoad(t, filepath.Join(root, "testdata", "long-session.jsonl"))
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	// The control plane restart below takes longer than the default 10 s renew deadline on
	// this machine; a leader that cannot renew exits (the kubelet would restart it).
	mgr := cl.StartManager(bin, slowFailover)
	token := cl.BindAgent(ns, "agent")
	api := mgr.APIClient(t, token)

	t.Run("StorageDiesMidReplay", func(t *testing.T) { testStorageDies(t, cl, m, api, history) })
	t.Run("SummarizerFaults", func(t *testing.T) { testSummarizerFaults(t, cl, m, bin, token, api, history) })
	t.Run("APIServerRestart", func(t *testing.T) { testAPIServerRestart(t, cl, m, api, history) })
	t.Run("ManagerKilledMidCompaction", func(t *testing.T) {
		// On the turn (--api-summaries-off-turn=false) first: a replica of its own dies and
		// the agent retries on mgr. Then off the turn (the default): mgr dies with a
		// summarization in flight and a new manager takes over.
		t.Run("OnTurn", func(t *testing.T) { testKilledMidCompaction(t, cl, m, mgr, bin, token, history) })
		t.Run("OffTurn", func(t *testing.T) { mgr = testKilledMidSummary(t, cl, m, mgr, bin, token, history) })
	})
	t.Run("ManagerKilledMidGC", func(t *testing.T) { testKilledMidGC(t, cl, m, mgr, bin) })
}

// testKilledMidCompaction SIGKILLs a replica that calls the summarizer on the turn
// (--api-summaries-off-turn=false) while a compaction waits for it: the stored state is the
// last completed compaction's, no record of the killed one exists, and the agent's next
// request, on the surviving replica, continues from the persisted anchors.
func testKilledMidCompaction(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, survivor *operator.Manager, bin, token string, history []compaction.Message) {
	const window = 8000
	mgr := cl.StartManager(bin, slowFailover, summariesOnTurn)
	// Never left running to take the lease from the replicas of the later subtests.
	t.Cleanup(func() { _ = mgr.Stop(5 * time.Second) })
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
	hang.Store(false)

	after, err := store.LoadState(ctx, string(sess.UID))
	testenv.Must(t, err)
	if after.Watermark != before.Watermark || after.PrefixHash != before.PrefixHash || len(after.LastAnchors) != len(before.LastAnchors) {
		t.Fatalf("stored state changed by the killed compaction: watermark %d -> %d, anchors %d -> %d",
			before.Watermark, after.Watermark, len(before.LastAnchors), len(after.LastAnchors))
	}

	api = survivor.APIClient(t, token)
	agent.Client = api
	// The same turn again, as the agent's retry, and a few more.
	for n := killedTurn; n < min(killedTurn+5, len(turns)); n++ {
		resp, err := agent.Compact(ctx, history[:turns[n]], 0)
		if err != nil {
			t.Fatalf("turn %d on the surviving replica: %v", n, err)
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
}

// testKilledMidSummary SIGKILLs the manager while a summarization off the turn (the
// default) is in flight, its LLM call open. Every turn is answered without waiting for the
// LLM, which hangs; the kill loses nothing the agent was told: the stored state is the last
// answered compaction's, the background work never wrote it, the span's claim is all it left
// of the summary (no half-written result), and the trail holds one record per answered
// compaction. On a new manager the session continues from the persisted state and still gets
// LLM summaries: a later Soft or Full compaction uses or merges one. It returns the new
// manager.
func testKilledMidSummary(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, mgr *operator.Manager, bin, token string, history []compaction.Message) *operator.Manager {
	const window, name = 8000, "killed-off-turn"
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
	testenv.Must(t, cl.Client.Create(ctx, builder.CredentialsSecret(ns, "llm-"+name, map[string]string{"apiKey": "sk-test"})))
	cl.CreateMinIOPolicy(ns, name, name, m, window, func(s *compactionv1alpha1.CompactionPolicySpec) {
		s.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
			BaseURL: llm.URL + "/v1", Model: "test-model", TimeoutSeconds: 60,
			APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "llm-" + name}, Key: "apiKey"},
		}}
	})
	sess := cl.CreateReadySession(ns, name, name)
	sid := string(sess.UID)
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "agent-context", Prefix: name, Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	testenv.Must(t, err)

	agent := &compactclient.Session{Client: mgr.APIClient(t, token), Namespace: ns, Name: name}
	turns := compaction.AssistantTurns(history)
	var answered []*compaction.CompactionRecord // compactions above TierNone, in order
	compact := func(n int) *compaction.CompactionRecord {
		t.Helper()
		resp, err := agent.Compact(ctx, history[:turns[n]], 0)
		if err != nil {
			t.Fatalf("turn %d: %v (did it wait for the summarizer?)", n, err)
		}
		if rec := resp.Record; rec.Tier != compaction.TierNone {
			answered = append(answered, rec)
		}
		return resp.Record
	}
	llmReached := func(rec *compaction.CompactionRecord) bool { return rec.PreparedUsed > 0 || rec.PreparedLateMerged }
	// Replay until an LLM summary made off the turn reached the session, then let the LLM hang.
	turn := 0
	for reached := false; !reached; turn++ {
		if turn == len(turns) {
			t.Fatal("no LLM summary made off the turn reached the session")
		}
		reached = llmReached(compact(turn))
	}
	hang.Store(true)
	// The next turn that starts a summarization off the turn is answered; its LLM call hangs.
	for ; ; turn++ {
		if turn == len(turns) {
			t.Fatal("no later turn started a summarization off the turn")
		}
		if compact(turn).PreparedStarted != "" {
			break
		}
	}
	killedAfter := turn
	turn++
	select {
	case <-called:
	case <-time.After(time.Minute):
		t.Fatal("the summarization off the turn did not call the LLM within a minute")
	}
	before, err := store.LoadState(ctx, sid)
	testenv.Must(t, err)
	if err := syscall.Kill(mgr.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = mgr.Stop(5 * time.Second)
	cl.ExpireLease()
	hang.Store(false)

	after, err := store.LoadState(ctx, sid)
	testenv.Must(t, err)
	if after.Watermark != before.Watermark || after.PrefixHash != before.PrefixHash || len(after.LastAnchors) != len(before.LastAnchors) {
		t.Fatalf("stored state changed by the killed summarization: watermark %d -> %d, anchors %d -> %d",
			before.Watermark, after.Watermark, len(before.LastAnchors), len(after.LastAnchors))
	}
	// The killed summarization left its claim (written before the call), and no result.
	prepared, err := store.LoadState(ctx, compaction.PreparedID(sid))
	testenv.Must(t, err)
	var claim *compaction.PreparedSummary
	for i, p := range prepared.Prepared {
		if p.Owner != "" && p.At.IsZero() {
			claim = &prepared.Prepared[i]
		}
	}
	if claim == nil {
		t.Fatalf("no claim of the killed summarization among the prepared summaries %+v", prepared.Prepared)
	}
	for _, p := range prepared.Prepared {
		if p.From == claim.From && p.Base == claim.Base && p.Late == claim.Late && !p.At.IsZero() {
			t.Fatalf("a result for the killed summarization's span %d-%d was stored", p.From, p.To)
		}
	}

	next := cl.StartManager(bin, slowFailover)
	agent.Client = next.APIClient(t, token)
	first := true
	for reached := false; !reached; turn++ {
		if turn == len(turns) {
			t.Fatal("no LLM summary reached the session on the new manager")
		}
		rec := compact(turn)
		if first && rec.WatermarkBefore != before.Watermark {
			t.Errorf("the first turn on the new manager starts at watermark %d, the persisted state is at %d", rec.WatermarkBefore, before.Watermark)
		}
		first = false
		reached = llmReached(rec)
	}
	var trail bytes.Buffer
	testenv.Must(t, agent.Client.Records(ctx, ns, name, &trail))
	var ids []string
	for line := range strings.SplitSeq(strings.TrimSpace(trail.String()), "\n") {
		var r compaction.CompactionRecord
		testenv.Must(t, json.Unmarshal([]byte(line), &r))
		ids = append(ids, r.ID)
	}
	if len(ids) != len(answered) {
		t.Fatalf("%d records, the agent was answered %d compactions: one was lost or recorded twice", len(ids), len(answered))
	}
	for i, rec := range answered {
		if ids[i] != rec.ID {
			t.Errorf("record %d is %s, the agent was answered %s", i, ids[i], rec.ID)
		}
	}
	t.Logf("killed after turn %d with a summarization off the turn in flight (messages %d-%d, late %v); state kept at watermark %d; "+
		"an LLM summary reached the session again at turn %d on the new manager; %d records, one per answered compaction",
		killedAfter, claim.From, claim.To, claim.Late, before.Watermark, turn-1, len(ids))
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
				if _, err := store.PutToolResult(ctx, sid, fmt.Sprintf("call_%05d", i), "output"); err != nil {
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
	cl.StartManager(bin, func(c *configv1alpha1.Configuration) {
		c.Controllers.GCRetryMaxDelay = operator.Duration(2 * time.Second)
	})
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
// slower than its timeout, failing with 500, or answering garbage.
//
// With summaries off the turn (the manager's default), each Full compaction answers at once
// with the extractive summary and the LLM is called in the background; its failure is stored
// with its cause in the session's prepared summaries, and the next Soft or Full compaction's
// record names it and counts the wasted call. With them on the turn
// (--api-summaries-off-turn=false, on a second replica), the Full compaction itself falls
// back within the request deadline, and its record names the cause.
func testSummarizerFaults(t *testing.T, cl *operator.Cluster, m *testenv.MinIO, bin, token string, api *compactclient.Client, history []compaction.Message) {
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
		mode, baseURL string
		// cause is what the failure's text says of its cause.
		cause string
	}{
		{"down", downURL, "connect"},
		{"slow", llm.URL + "/v1", "timed out"},
		{"500", llm.URL + "/v1", "500"},
		{"garbage", llm.URL + "/v1", "response"},
	}
	// A history at about 85% of the window: a Full compaction, which calls the summarizer.
	turns := compaction.AssistantTurns(history)
	msgs := history[:turns[40]]
	window := int32(float64(compaction.EstimateTokens(msgs)) / 0.85)
	policyFor := func(name, baseURL string) *s3.Store {
		cl.CreateMinIOPolicy(ns, name, name, m, window, func(s *compactionv1alpha1.CompactionPolicySpec) {
			s.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
				BaseURL: baseURL, Model: "test-model", TimeoutSeconds: 1,
				APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "llm"}, Key: "apiKey"},
			}}
		})
		store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "agent-context", Prefix: name, Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
		testenv.Must(t, err)
		return store
	}
	checkView := func(t *testing.T, resp *compactclient.CompactResponse) {
		t.Helper()
		if err := compaction.Validate(resp.Messages); err != nil || compaction.EstimateTokens(resp.Messages) > int(window) {
			t.Errorf("fallback view invalid (%v) or over the window", err)
		}
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			mode.Store(tc.mode)
			name := "llm-" + tc.mode
			store := policyFor(name, tc.baseURL)
			sess := cl.CreateReadySession(ns, name, name)
			agent := &compactclient.Session{Client: api, Namespace: ns, Name: name}
			resp, err := agent.Compact(ctx, msgs, 0)
			if err != nil {
				t.Fatalf("compaction with the summarizer %s: %v", tc.mode, err)
			}
			rec := resp.Record
			t.Logf("%s: tier %s, deferred %v, started %q, error %q", tc.mode, rec.Tier, rec.SummarizerDeferred, rec.PreparedStarted, rec.Error)
			if rec.Tier != compaction.TierFull {
				t.Fatalf("tier %s, want Full (the test history is sized for it)", rec.Tier)
			}
			// Nothing was prepared (the session's first turn is the crossing): the turn is
			// summarized extractively, without a call, and the LLM's starts off the turn.
			if !rec.SummarizerDeferred || rec.SummarizerCalls != 0 || rec.PreparedStarted != "late" {
				t.Fatalf("the crossing waited for the summarizer: deferred %v, calls %d, started %q; notes %q",
					rec.SummarizerDeferred, rec.SummarizerCalls, rec.PreparedStarted, rec.Notes)
			}
			checkView(t, resp)

			// The call off the turn fails; the failure is stored with its cause.
			failed := waitPrepared(t, store, string(sess.UID), func(p compaction.PreparedSummary) bool { return p.Late })
			t.Logf("%s: late summary of messages %d-%d: %q", tc.mode, failed.From, failed.To, failed.Error)
			if failed.Error == "" || !strings.Contains(failed.Error, "summarizer") || !strings.Contains(failed.Error, tc.cause) {
				t.Fatalf("stored failure %q does not name the summarizer's failure (%q)", failed.Error, tc.cause)
			}
			// The next Soft or Full compaction names it in its record, and counts the call.
			for n := 41; n < len(turns); n++ {
				resp, err := agent.Compact(ctx, history[:turns[n]], 0)
				if err != nil {
					t.Fatalf("turn %d: %v", n, err)
				}
				rec := resp.Record
				if rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull {
					continue
				}
				notes := strings.Join(rec.Notes, "\n")
				if !strings.Contains(notes, "failed: "+failed.Error) || rec.PreparedWasted == 0 || rec.PreparedLateMerged {
					t.Fatalf("next %s compaction (turn %d): wasted %d, late merged %v; notes do not name the failure %q:\n%s",
						rec.Tier, n, rec.PreparedWasted, rec.PreparedLateMerged, failed.Error, notes)
				}
				checkView(t, resp)
				return
			}
			t.Fatal("no Soft or Full compaction after the first")
		})
	}

	// On the turn: a replica with --api-summaries-off-turn=false waits for the summarizer,
	// falls back when it is slower than its timeout, and names that in the turn's record.
	t.Run("OnTurn", func(t *testing.T) {
		onTurn := cl.StartManager(bin, slowFailover, summariesOnTurn)
		defer func() { _ = onTurn.Stop(20 * time.Second) }()
		mode.Store("slow")
		const name = "llm-on-turn"
		policyFor(name, llm.URL+"/v1")
		cl.CreateReadySession(ns, name, name)
		resp, err := onTurn.APIClient(t, token).Compact(ctx, ns, name, compactclient.CompactRequest{Messages: msgs})
		if err != nil {
			t.Fatalf("compaction with the summarizer slow: %v", err)
		}
		rec := resp.Record
		t.Logf("on the turn: tier %s, error %q", rec.Tier, rec.Error)
		if rec.Tier != compaction.TierFull {
			t.Fatalf("tier %s, want Full (the test history is sized for it)", rec.Tier)
		}
		if rec.SummarizerDeferred || rec.PreparedStarted != "" {
			t.Errorf("summarized off the turn with --api-summaries-off-turn=false: deferred %v, started %q", rec.SummarizerDeferred, rec.PreparedStarted)
		}
		if !strings.Contains(strings.ToLower(rec.Error), "summar") || !strings.Contains(rec.Error, "timed out") {
			t.Errorf("record error %q does not name the summarizer's timeout", rec.Error)
		}
		checkView(t, resp)
	})
}

// waitPrepared waits for a finished summary made off the turn for the session (uid) that
// match accepts, as stored in its prepared summaries (compaction.PreparedID), and returns it.
func waitPrepared(t *testing.T, store *s3.Store, uid string, match func(compaction.PreparedSummary) bool) compaction.PreparedSummary {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := store.LoadState(context.Background(), compaction.PreparedID(uid))
		if err != nil && !errors.Is(err, compaction.ErrNotFound) {
			t.Fatal(err)
		}
		if err == nil {
			for _, p := range st.Prepared {
				if !p.At.IsZero() && match(p) {
					return p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no finished summary off the turn stored within a minute (%+v)", st)
		}
		time.Sleep(100 * time.Millisecond)
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

// tierCounts is status.compactions with absent counters as 0, to compare with what the
// agents were answered.
type tierCounts struct{ Warn, Soft, Full, Emergency int64 }

func countsOf(c compactionv1alpha1.TierCounts) tierCounts {
	return tierCounts{ptr.Deref(c.Warn, 0), ptr.Deref(c.Soft, 0), ptr.Deref(c.Full, 0), ptr.Deref(c.Emergency, 0)}
}

// slowFailover gives requests 20 s and keeps the lease for 90 s, so an API server outage
// shorter than the renew deadline (75 s) does not restart the leader.
func slowFailover(c *configv1alpha1.Configuration) {
	c.API.RequestTimeout = operator.Duration(20 * time.Second)
	c.LeaderElection.LeaseDuration, c.LeaderElection.RenewDeadline = operator.Duration(90*time.Second), operator.Duration(75*time.Second)
}

// summariesOnTurn calls the LLM summarizer on the turn that crosses Soft or Full.
func summariesOnTurn(c *configv1alpha1.Configuration) { c.API.SummariesOffTurn = ptr.To(false) }
