package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// The chart's memory settings: resources.limits.memory 512Mi, and GOMEMLIMIT at
// manager.memoryLimitPercent (90) of it, in bytes as the chart computes it.
const (
	chartMemoryLimit = 512 << 20
	chartGOMEMLIMIT  = chartMemoryLimit * 90 / 100
)

// TestHostileStorage is issue 28, item 1: a namespace admin points CompactionPolicies at an
// S3 endpoint of their own (testenv.HostileS3) that answers a session's state with 1 GiB
// (with and without Content-Length), lists for ever, or trickles its bodies at a byte a
// second. Against the manager binary with the chart's memory settings (GOMEMLIMIT at 90% of
// 512 MiB), while another tenant compacts on MinIO:
//
//   - the hostile sessions' compactions fail with a reason that names the object too large
//     or the request's deadline (a compaction of a full history fails open: a valid view,
//     its record's error naming it), and reading the records of the endless listing
//     answers 503 naming the page cap; the manager stays up and its peak RSS (VmHWM)
//     stays under the chart's 512 MiB limit (the request timeout is 20 s instead of 60 s,
//     to keep the test short);
//   - every turn of the other tenant is answered 200 throughout, deletions included;
//   - deleting the hostile sessions (four trickling, two listing for ever, two with huge
//     states) ends, or reports StorageDeleteFailed naming the page cap or the deadline,
//     within 90 s, and a session of the other tenant deleted while the four trickling
//     deletions hold the controller's four workers is gone within the finalizer's storage
//     deadline (30 s) and a margin: no worker is held for good;
//   - once the endpoint behaves, the hostile sessions' deletions finish.
func TestHostileStorage(t *testing.T) {
	start := time.Now()
	history := testenv.MustLoad(t, filepath.Join(testenv.RepoRoot(t), "testdata", "long-session.jsonl"))
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	const (
		huge, unsized, endless, trickle = "huge-state", "huge-state-unsized", "endless-list", "trickle"
		hostileNS, goodNS               = "hostile", "good"
		window                          = 8000
		requestTimeout                  = 20 * time.Second
	)
	hs3 := testenv.StartHostileS3(t, map[string]testenv.HostileMode{
		huge: testenv.HostileHugeState, unsized: testenv.HostileHugeStateUnsized,
		endless: testenv.HostileEndlessList, trickle: testenv.HostileTrickle,
	})
	mgr := cl.StartManagerEnv(bin, []string{"GOMEMLIMIT=" + strconv.Itoa(chartGOMEMLIMIT)}, func(c *configv1alpha1.Configuration) {
		c.API.RequestTimeout, c.Controllers.GCRetryMaxDelay = operator.Duration(requestTimeout), operator.Duration(5*time.Second)
	})
	ctx, c := context.Background(), cl.Client
	for _, ns := range []string{hostileNS, goodNS} {
		testenv.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	hostileAPI := mgr.APIClient(t, cl.BindAgent(hostileNS, "agent"))
	goodAPI := mgr.APIClient(t, cl.BindAgent(goodNS, "agent"))

	// The hostile tenant: one policy per bucket of its endpoint, and its sessions.
	testenv.Must(t, c.Create(ctx, builder.MinIOSecret(hostileNS, "own-s3", "AKIAHOSTILE", "hostile-secret")))
	for _, bucket := range []string{huge, unsized, endless, trickle} {
		storage := builder.MinIOStorage(hs3.Endpoint(), bucket, "hostile", "own-s3")
		storage.S3.CreateBucket = compactionv1alpha1.BucketCreationNever
		testenv.Must(t, c.Create(ctx, builder.Policy(hostileNS, bucket).Window(window).Storage(storage).Build()))
	}
	hostile := map[string]string{ // session: its policy (and bucket)
		"huge-state": huge, "huge-state-unsized": unsized,
		"endless-0": endless, "endless-1": endless,
		"trickle-0": trickle, "trickle-1": trickle, "trickle-2": trickle, "trickle-3": trickle,
	}
	for name, p := range hostile {
		testenv.Must(t, c.Create(ctx, builder.Session(hostileNS, name, p).Build()))
	}
	cl.CreateMinIOPolicy(goodNS, "good", "good", m, window, nil)
	cl.CreateReadySession(goodNS, "turns", "good")
	goodDeleted := cl.CreateReadySession(goodNS, "deleted", "good")
	for name, p := range hostile {
		waitReady(t, c, hostileNS, name, p)
	}
	// Something for the good session's deletion to delete.
	turns := compaction.AssistantTurns(history)
	_, err := goodAPI.Compact(ctx, goodNS, goodDeleted.Name, compactclient.CompactRequest{Messages: history[:turns[30]], Force: true})
	testenv.Must(t, err)
	t.Logf("set up in %s", time.Since(start).Round(time.Second))

	// The manager's health, watched all along.
	var peakRSS atomic.Int64
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			if kb, err := vmHWM(mgr.Pid()); err == nil {
				peakRSS.Store(kb << 10)
			}
			select {
			case <-stopWatch:
				return
			case <-mgr.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	overLimit := false
	alive := func(when string) {
		t.Helper()
		if exited, err := mgr.Exited(); exited {
			t.Fatalf("%s: the manager exited (%v); peak RSS %d MiB", when, err, peakRSS.Load()>>20)
		}
		if peak := peakRSS.Load(); peak >= chartMemoryLimit && !overLimit {
			overLimit = true
			t.Errorf("%s: manager peak RSS %d MiB, over the chart's memory limit of %d MiB", when, peak>>20, chartMemoryLimit>>20)
		}
	}

	// The good tenant's agent compacts all along, a turn every 250 ms.
	good := startGoodTenant(goodAPI, goodNS, "turns", history)
	t.Cleanup(func() { good.stop() }) // when the test fails before it stops it

	attackAPI(t, hostileAPI, hs3, history[:turns[30]], requestTimeout)
	alive("after the attacks on the compaction API")

	// The deletions: the four trickling sessions first (each holds a worker on its trickled
	// listing until the finalizer's deadline), then the others, and once the four workers
	// are all held, a session of the good tenant.
	deleteStart := time.Now()
	for _, name := range []string{"trickle-0", "trickle-1", "trickle-2", "trickle-3", "endless-0", "endless-1", "huge-state", "huge-state-unsized"} {
		testenv.Must(t, c.Delete(ctx, &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: hostileNS, Name: name}}))
	}
	testenv.Eventually(t, 30*time.Second, "the four trickling deletions to hold the four session workers", func() (bool, string) {
		st := hs3.Stats(trickle)
		return st.Trickling >= 4, fmt.Sprintf("%d trickled listings open", st.Trickling)
	})
	goodDeleteStart := time.Now()
	testenv.Must(t, c.Delete(ctx, goodDeleted))
	const goodDeleteBound = 30*time.Second + 25*time.Second // the finalizer's storage deadline and a margin
	testenv.Eventually(t, goodDeleteBound, "the good tenant's deleted session to be gone", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(goodDeleted), &compactionv1alpha1.AgentSession{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v; hostile trickled listings open: %d", err, hs3.Stats(trickle).Trickling)
	})
	goodDeleteTook := time.Since(goodDeleteStart)
	t.Logf("the good tenant's session was deleted in %s, with the four workers held by trickled listings when it was deleted", goodDeleteTook.Round(time.Millisecond))

	// Every hostile deletion ends or says why it cannot, within 90 s of its start.
	waitSettled(t, c, hostileNS, deleteStart.Add(90*time.Second), map[string]string{ // session: what its condition must name ("" = gone)
		"huge-state": "", "huge-state-unsized": "",
		"endless-0": compaction.ErrTooManyPages.Error(), "endless-1": compaction.ErrTooManyPages.Error(),
		"trickle-0": "deadline", "trickle-1": "deadline", "trickle-2": "deadline", "trickle-3": "deadline",
	})
	for _, name := range []string{"huge-state", "huge-state-unsized"} {
		if _, err := getSession(ctx, c, hostileNS, name); !apierrors.IsNotFound(err) {
			t.Errorf("%s: its endpoint lists nothing, but the session was not deleted: %v", name, err)
		}
	}
	st := hs3.Stats(endless)
	t.Logf("endless listing: %d pages served, %d objects deleted; trickle: %+v", st.ListPages, st.Deletes, hs3.Stats(trickle))
	if st.ListPages == 0 {
		t.Error("the endless listing served no page: the attack did not happen")
	}
	alive("after the deletions")

	// Once the endpoint behaves, the held deletions finish.
	hs3.SetMode(endless, testenv.HostileNone)
	hs3.SetMode(trickle, testenv.HostileNone)
	testenv.Eventually(t, 60*time.Second, "the hostile sessions to be deleted once their endpoint behaves", func() (bool, string) {
		var left []string
		for name := range hostile {
			if _, err := getSession(ctx, c, hostileNS, name); !apierrors.IsNotFound(err) {
				left = append(left, name)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})

	answered, failures := good.stop()
	close(stopWatch)
	<-watchDone
	alive("at the end")
	if kb, err := vmHWM(mgr.Pid()); err == nil {
		peakRSS.Store(kb << 10)
	}
	peak := peakRSS.Load()
	t.Logf("good tenant: %d turns answered, %d failed; manager peak RSS (VmHWM) %d MiB with GOMEMLIMIT %d MiB; took %s in all",
		answered, len(failures), peak>>20, chartGOMEMLIMIT>>20, time.Since(start).Round(time.Second))
	for i, f := range failures {
		if i == 5 {
			t.Errorf("and %d more failed turns", len(failures)-5)
			break
		}
		t.Errorf("good tenant: %s", f)
	}
	if answered == 0 {
		t.Error("the good tenant's agent made no turn")
	}
	if peak == 0 || peak >= chartMemoryLimit && !overLimit {
		t.Errorf("manager peak RSS %d MiB: want under the chart's memory limit of %d MiB", peak>>20, chartMemoryLimit>>20)
	}
}

// goodTenant is an agent replaying the transcript turn by turn (starting over in a new
// conversation at its end) until stopped, counting its turns and their failures.
type goodTenant struct {
	once     sync.Once
	done     chan struct{}
	finished chan struct{}
	answered int
	failures []string
}

func startGoodTenant(api *compactclient.Client, namespace, name string, history []compaction.Message) *goodTenant {
	g := &goodTenant{done: make(chan struct{}), finished: make(chan struct{})}
	turns := compaction.AssistantTurns(history)
	go func() {
		defer close(g.finished)
		ctx := context.Background()
		for round := 0; ; round++ {
			agent := &compactclient.Session{Client: api, Namespace: namespace, Name: name}
			if round > 0 {
				agent.Conversation = fmt.Sprintf("round-%d", round)
			}
			for i, n := range turns {
				select {
				case <-g.done:
					return
				case <-time.After(250 * time.Millisecond):
				}
				begin := time.Now()
				if _, err := agent.Compact(ctx, history[:n], 0); err != nil {
					g.failures = append(g.failures, fmt.Sprintf("round %d turn %d, at %s, after %s: %v",
						round, i, begin.Format(time.TimeOnly), time.Since(begin).Round(time.Millisecond), err))
					continue
				}
				g.answered++
			}
		}
	}()
	return g
}

// stop ends the agent after its turn in flight and returns its counts.
func (g *goodTenant) stop() (int, []string) {
	g.once.Do(func() { close(g.done) })
	<-g.finished
	return g.answered, g.failures
}

// waitReady waits until the session namespace/name is Ready.
func waitReady(t *testing.T, c client.Client, namespace, name, policy string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("AgentSession %s/%s (policy %s) Ready", namespace, name, policy), func() (bool, string) {
		s, err := getSession(context.Background(), c, namespace, name)
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(s.Status.Conditions, compactionv1alpha1.ConditionReady), fmt.Sprintf("%+v", s.Status.Conditions)
	})
}

func getSession(ctx context.Context, c client.Client, namespace, name string) (*compactionv1alpha1.AgentSession, error) {
	var s compactionv1alpha1.AgentSession
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s)
	return &s, err
}

// vmHWM is the process's peak resident set size (VmHWM), in KiB.
func vmHWM(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no VmHWM in /proc/" + strconv.Itoa(pid) + "/status")
}

// attackAPI makes the attacks on the compaction API at once: four compactions each of the
// huge states (sized and unsized), one of every trickling session (each holds a trickled
// state read until the request's deadline), and a read of the endless listing's records.
// Each must fail with a reason that names why: an error answer, or (a compaction of a full
// history fails open on a state it cannot read) a valid view whose record's error names it.
func attackAPI(t *testing.T, api *compactclient.Client, hs3 *testenv.HostileS3, msgs []compaction.Message, requestTimeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	type outcome struct {
		what string
		resp *compactclient.CompactResponse
		err  error
		took time.Duration
	}
	var wg sync.WaitGroup
	outcomes := make(chan outcome, 32)
	compact := func(what, name string) {
		wg.Go(func() {
			begin := time.Now()
			resp, err := api.Compact(ctx, "hostile", name, compactclient.CompactRequest{Messages: msgs})
			outcomes <- outcome{what, resp, err, time.Since(begin)}
		})
	}
	for i := range 4 {
		compact(fmt.Sprintf("compact huge-state #%d", i), "huge-state")
		compact(fmt.Sprintf("compact huge-state-unsized #%d", i), "huge-state-unsized")
		compact(fmt.Sprintf("compact trickle-%d", i), fmt.Sprintf("trickle-%d", i))
	}
	wg.Go(func() {
		begin := time.Now()
		// A compaction first (the endpoint takes writes), so there is a trail to list.
		_, err := api.Compact(ctx, "hostile", "endless-0", compactclient.CompactRequest{Messages: msgs, Force: true})
		if err != nil {
			err = fmt.Errorf("compact before listing the records: %w", err)
		} else {
			err = api.Records(ctx, "hostile", "endless-0", io.Discard)
		}
		outcomes <- outcome{"records endless-0", nil, err, time.Since(begin)}
	})
	wg.Wait()
	close(outcomes)
	for o := range outcomes {
		var code int
		var reason, msg string
		var ae *compactclient.APIError
		switch {
		case errors.As(o.err, &ae):
			code, reason, msg = ae.Code, ae.Reason, ae.Message
		case o.err != nil:
			t.Errorf("%s: %v after %s, want an answer of the API", o.what, o.err, o.took.Round(time.Millisecond))
			continue
		case o.resp == nil || o.resp.Record == nil || o.resp.Record.Error == "":
			t.Errorf("%s: answered 200 after %s without an error in its record", o.what, o.took.Round(time.Millisecond))
			continue
		default:
			code, reason, msg = http.StatusOK, "record error", o.resp.Record.Error
			if err := compaction.Validate(o.resp.Messages); err != nil {
				t.Errorf("%s: the view it failed open with is invalid: %v", o.what, err)
			}
		}
		t.Logf("%s: %d %s after %s: %s", o.what, code, reason, o.took.Round(time.Millisecond), msg)
		switch {
		case strings.HasPrefix(o.what, "compact huge-state"):
			if code != http.StatusOK && code != http.StatusServiceUnavailable || !strings.Contains(msg, compaction.ErrObjectTooLarge.Error()) ||
				!strings.Contains(msg, "over the cap") && !strings.Contains(msg, "the cap for one") {
				t.Errorf("%s: want the state named too large (503, or 200 failing open with it in the record)", o.what)
			}
		case strings.HasPrefix(o.what, "compact trickle"):
			timedOut := (code == http.StatusGatewayTimeout || code == http.StatusServiceUnavailable) && reason == compactclient.ReasonTimeout ||
				code == http.StatusOK && (strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "context canceled"))
			if !timedOut {
				t.Errorf("%s: want the deadline named (504, or 200 failing open with it in the record)", o.what)
			}
			if o.took > requestTimeout+10*time.Second {
				t.Errorf("%s: answered after %s, the request timeout is %s", o.what, o.took, requestTimeout)
			}
		case strings.HasPrefix(o.what, "records"):
			if code != http.StatusServiceUnavailable || !strings.Contains(msg, compaction.ErrTooManyPages.Error()) {
				t.Errorf("%s: want 503 naming the page cap", o.what)
			}
		}
	}
	for _, b := range []string{"huge-state", "huge-state-unsized"} {
		st := hs3.Stats(b)
		t.Logf("%s: %d state GETs, %d huge bodies, %d MiB sent in all", b, st.StateGets, st.HugeBodies, st.HugeBytes>>20)
		if st.HugeBodies == 0 {
			t.Errorf("%s: no huge state was served: the attack did not happen", b)
		}
	}
	// The trickled reads were given up with the requests.
	testenv.Eventually(t, 15*time.Second, "the manager to hang up on the trickled state reads", func() (bool, string) {
		st := hs3.Stats("trickle")
		return st.Trickling == 0, fmt.Sprintf("%+v", st)
	})
	t.Logf("trickle after the compactions: %+v", hs3.Stats("trickle"))
}

// waitSettled waits until each session of want is gone (want "") or has StorageReady False
// for StorageDeleteFailed with a message naming want, and fails the test at deadline.
func waitSettled(t *testing.T, c client.Client, namespace string, deadline time.Time, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	settled := map[string]bool{}
	testenv.Eventually(t, time.Until(deadline), "every hostile deletion to end or report why not", func() (bool, string) {
		var pending []string
		for name, naming := range want {
			if settled[name] {
				continue
			}
			s, err := getSession(ctx, c, namespace, name)
			switch {
			case apierrors.IsNotFound(err):
				t.Logf("%s: deleted after %s", name, time.Since(start).Round(time.Second))
				settled[name] = true
				continue
			case err != nil:
				pending = append(pending, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			cond := meta.FindStatusCondition(s.Status.Conditions, compactionv1alpha1.ConditionStorageReady)
			if naming != "" && cond != nil && cond.Status == metav1.ConditionFalse &&
				cond.Reason == compactionv1alpha1.ReasonStorageDeleteFailed && strings.Contains(cond.Message, naming) {
				t.Logf("%s after %s: StorageReady %s %s: %s", name, time.Since(start).Round(time.Second), cond.Status, cond.Reason, cond.Message)
				settled[name] = true
				continue
			}
			detail := "no StorageReady condition"
			if cond != nil {
				detail = fmt.Sprintf("StorageReady %s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
			pending = append(pending, name+": "+detail)
		}
		return len(pending) == 0, strings.Join(pending, "; ")
	})
}
