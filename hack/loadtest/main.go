// Command loadtest measures the operator under many concurrent agents: it starts the local
// environment (internal/dev/devenv: kube-apiserver, etcd, MinIO, the manager binary), creates N
// AgentSessions, and has agents replay a transcript turn by turn through the compaction API
// at once (offload hook for every tool result, a delta compaction before every assistant
// turn). It reports the time until all sessions are Ready with the manager's Kubernetes API
// requests per session, throughput, latency per tier, status writes per turn and per
// compaction, and the manager's CPU time and RSS (from its own metrics and /proc).
//
//	go run ./hack/loadtest -sessions 200 -turns 60
//	go run ./hack/loadtest -sessions 5000 -agents 0   # the controllers alone
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/devenv"
	"github.com/harness9/compaction-operator/internal/dev/proc"
	"github.com/harness9/compaction-operator/internal/dev/replay"
)

func main() {
	sessions := flag.Int("sessions", 200, "AgentSessions to create")
	agents := flag.Int("agents", -1, "concurrent agents, each on its own session (-1: one per session, 0: measure the controllers only)")
	turns := flag.Int("turns", 60, "assistant turns each agent replays (0: the whole transcript)")
	window := flag.Int("window", 8000, "the policy's context window")
	transcript := flag.String("transcript", "testdata/long-session.jsonl", "agent transcript (JSONL)")
	managerBin := flag.String("manager", "", "the manager binary (default bin/manager)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the manager, taken over the first 30 s of the agents' run, to this file")
	managerConfig := flag.String("manager-config", "", "a configuration file for the manager (docs/operations.md; e.g. one setting api: {statusInterval: 30s}), to measure what a setting costs")
	think := flag.Duration("think", 0, "mean pause of an agent before each turn, standing for its LLM call (uniform in [0.5, 1.5] x think); 0: closed loop, as fast as answered")
	flag.Parse()
	if *agents < 0 || *agents > *sessions {
		*agents = *sessions
	}
	if err := run(*sessions, *agents, *turns, int32(*window), *transcript, *think, *managerBin, *cpuProfile, *managerConfig); err != nil { //nolint:gosec // flag value, bounded by the CRD
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// ns holds the load test's objects.
const ns = "default"

// hookKind is the kind of the samples of offload-hook calls.
const hookKind = "hook"

type sample struct {
	kind string // hookKind or the tier
	d    time.Duration
}

func run(n, agents, maxTurns int, window int32, transcript string, think time.Duration, managerBin, cpuProfile, managerConfig string) error {
	ctx := context.Background()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	history, err := replay.Load(transcript)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "loadtest-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ports, err := proc.FreeLoopbackPorts(2)
	if err != nil {
		return err
	}
	metrics := &scraper{url: "http://" + ports[0] + "/metrics"}
	args := []string{"--metrics-bind-address", ports[0]}
	if cpuProfile != "" {
		args = append(args, "--pprof-bind-address", ports[1])
	}
	mcfg := &configv1alpha1.Configuration{}
	if managerConfig != "" {
		if mcfg, err = configv1alpha1.Load(managerConfig); err != nil {
			return err
		}
	}
	mcfg.Metrics.Secure = ptr.To(false) // scraped over plain HTTP
	env, err := devenv.Start(ctx, devenv.Options{Root: root, Dir: dir, ManagerBin: managerBin, ManagerArgs: args, Config: mcfg})
	if err != nil {
		return err
	}
	defer env.Stop()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the load generator itself is not throttled
	c, err := devenv.Client(cfg)
	if err != nil {
		return err
	}
	if err := env.CreateMinIOPolicy(ctx, c, ns, "load", window); err != nil {
		return err
	}

	time.Sleep(2 * time.Second) // the policy is Ready: what follows is the sessions' cost
	cpu0 := cpuSeconds(env.Manager().Pid())
	before, err := metrics.scrape(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := createSessions(ctx, c, n); err != nil {
		return err
	}
	created := time.Since(start)
	for {
		var list compactionv1alpha1.AgentSessionList
		if err := c.List(ctx, &list); err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			if meta.IsStatusConditionTrue(list.Items[i].Status.Conditions, compactionv1alpha1.ConditionReady) {
				ready++
			}
		}
		if ready == n {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return fmt.Errorf("only %d of %d sessions Ready after 10 minutes", ready, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	readyIn := time.Since(start)
	afterReady, err := metrics.scrape(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%d sessions created in %s, all Ready in %s; manager CPU %.1fs, RSS %d MiB (peak %d MiB)\n",
		n, created.Round(time.Millisecond), readyIn.Round(time.Millisecond), cpuSeconds(env.Manager().Pid())-cpu0,
		rss(env.Manager().Pid(), "VmRSS:")>>20, rss(env.Manager().Pid(), "VmHWM:")>>20)
	requests := afterReady.sub(before)
	fmt.Printf("manager requests to kube-apiserver per session: %.2f (%s)\n",
		requests.sum("rest_client_requests_total")/float64(n), requests.byLabel("rest_client_requests_total", "method", float64(n)))
	if agents == 0 {
		return nil
	}

	token, err := os.ReadFile(env.AgentTokenFile)
	if err != nil {
		return err
	}
	samples := make(chan sample, 4096)
	var all []sample
	collected := make(chan struct{})
	go func() {
		for s := range samples {
			all = append(all, s)
		}
		close(collected)
	}()
	storage := &scraper{url: env.MinIO.URL() + "/minio/v2/metrics/cluster"}
	time.Sleep(minioMetricsCache)
	s3Before, err := storage.scrape(ctx)
	if err != nil {
		return err
	}
	profiled := make(chan error, 1)
	if cpuProfile != "" {
		go func() { profiled <- saveProfile(ctx, "http://"+ports[1]+"/debug/pprof/profile?seconds=30", cpuProfile) }()
	} else {
		profiled <- nil
	}
	cpu1 := cpuSeconds(env.Manager().Pid())
	start = time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A client each, as each agent pod has its own: one shared client would keep two
			// idle connections and make the others do a TLS handshake per request.
			api, err := compactclient.New(env.APIURL, compactclient.WithToken(string(token)), compactclient.WithCAFile(env.CAFile))
			if err != nil {
				errs <- err
				return
			}
			if err := agent(ctx, api, fmt.Sprintf("agent-%04d", i), history, maxTurns, think, samples); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(samples)
	<-collected
	close(errs)
	for err := range errs {
		return err
	}
	if err := <-profiled; err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the status writer's last flush
	afterRun, err := metrics.scrape(ctx)
	if err != nil {
		return err
	}
	cpu := cpuSeconds(env.Manager().Pid()) - cpu1
	time.Sleep(minioMetricsCache)
	s3After, err := storage.scrape(ctx)
	if err != nil {
		return err
	}
	report(all, elapsed, agents, cpu, rss(env.Manager().Pid(), "VmHWM:"))
	reportStatusWrites(afterRun.sub(afterReady))
	reportStorage(s3After.sub(s3Before), all, cpu)
	return nil
}

// createSessions creates n AgentSessions, a few at a time.
func createSessions(ctx context.Context, c client.Client, n int) error {
	names := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				s := builder.Session(ns, fmt.Sprintf("agent-%04d", i), "load").Build()
				if err := c.Create(ctx, s); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		select {
		case names <- i:
		case err = <-errs:
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	if err != nil {
		return err
	}
	return <-errs // nil when closed and empty
}

// reportStatusWrites prints the compaction API's status writes against the turns and the
// compactions (above TierNone) it served.
func reportStatusWrites(m samples) {
	turns := m.sum("compaction_compactions_total")
	compactions := turns - m.get(`compaction_compactions_total{tier="None"}`)
	written := m.get(`compaction_api_status_writes_total{result="written"}`)
	fmt.Printf("status writes by the compaction API: %.0f written, %.0f unchanged, %.0f failed; %.3f per turn (%.0f turns), %.3f per compaction (%.0f compactions)\n",
		written, m.get(`compaction_api_status_writes_total{result="unchanged"}`), m.get(`compaction_api_status_writes_total{result="failed"}`),
		written/max(turns, 1), turns, written/max(compactions, 1), compactions)
	fmt.Printf("manager requests to kube-apiserver during the run: %s\n", m.byLabel("rest_client_requests_total", "method", 1))
	// Every HTTP request the API answered, the 409s that sent a delta's caller back with
	// its full history among them.
	fmt.Printf("compaction API requests served: %.0f; by code: %s\n", m.sum("compaction_api_requests_total"), m.byLabel("compaction_api_requests_total", "code", 1))
}

// saveProfile fetches a pprof profile from url into path.
func saveProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CPU profile: %s, %v", resp.Status, err)
	}
	return os.WriteFile(path, data, 0o600)
}

// minioMetricsCache is longer than MinIO caches its cluster metrics (10 s): a scrape after it
// counts every request before it.
const minioMetricsCache = 11 * time.Second

// reportStorage prints the S3 requests MinIO served during the run (minio_s3_requests_total
// by API) per turn and per request, and the manager's CPU per request.
func reportStorage(m samples, all []sample, cpu float64) {
	turns, none := 0, 0
	for _, s := range all {
		switch s.kind {
		case hookKind:
		case "None":
			none++
			turns++
		default:
			turns++
		}
	}
	requests := len(all)
	total := m.sum("minio_s3_requests_total")
	fmt.Printf("manager CPU per API request: %.3f ms (%d requests: %d turns, %d of them None, %d hook offloads); per turn, hooks included: %.3f ms\n",
		cpu*1000/float64(max(requests, 1)), requests, turns, none, requests-turns, cpu*1000/float64(max(turns, 1)))
	fmt.Printf("S3 requests: %.0f, %.2f per API request, %.2f per turn (hooks included); by API: %s\n",
		total, total/float64(max(requests, 1)), total/float64(max(turns, 1)), m.byLabel("minio_s3_requests_total", "api", 1))
}

func agent(ctx context.Context, api *compactclient.Client, name string, history []compaction.Message, maxTurns int, think time.Duration, out chan<- sample) error {
	s := &compactclient.Session{Client: api, Namespace: ns, Name: name}
	var live []compaction.Message
	turns, seenUser := 0, false
	for _, m := range history {
		switch m.Role {
		case compaction.RoleUser:
			seenUser = true
		case compaction.RoleTool:
			// As a Go agent does: through the Session, which sends only results over the
			// policy's hook threshold once an answer has given it.
			sent := s.HookThreshold() == 0 || len(m.Content) > s.HookThreshold()
			t0 := time.Now()
			off, err := s.OffloadToolResult(ctx, m)
			if err != nil {
				return fmt.Errorf("%s: offload: %w", name, err)
			}
			if sent {
				out <- sample{hookKind, time.Since(t0)}
			}
			live = append(live, off.Message)
			continue
		case compaction.RoleAssistant:
			if seenUser {
				if maxTurns > 0 && turns == maxTurns {
					return nil
				}
				if think > 0 {
					time.Sleep(think/2 + rand.N(think)) //nolint:gosec // jitter, not security
				}
				t0 := time.Now()
				resp, err := s.Compact(ctx, live, 0)
				if err != nil {
					return fmt.Errorf("%s turn %d: %w", name, turns, err)
				}
				out <- sample{resp.Record.Tier.String(), time.Since(t0)}
				turns++
			}
		}
		live = append(live, m)
	}
	return nil
}

func report(all []sample, elapsed time.Duration, n int, cpu float64, rss int64) {
	by := map[string][]time.Duration{}
	turns := 0
	for _, s := range all {
		by[s.kind] = append(by[s.kind], s.d)
		if s.kind != hookKind {
			turns++
		}
	}
	fmt.Printf("%d agents, %d turns and %d hook offloads in %s: %.1f turns/s; manager CPU %.1fs (%.2f cores), peak RSS %d MiB\n",
		n, turns, len(by[hookKind]), elapsed.Round(time.Millisecond), float64(turns)/elapsed.Seconds(), cpu, cpu/elapsed.Seconds(), rss>>20)
	fmt.Println("| request | count | p50 | p90 | p99 | max |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, k := range []string{"None", "Warn", "Soft", "Full", "Emergency", hookKind} {
		d := by[k]
		if len(d) == 0 {
			continue
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		q := func(p float64) string { return ms(d[min(len(d)-1, int(p*float64(len(d))))]) }
		fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", k, len(d), q(0.5), q(0.9), q(0.99), ms(d[len(d)-1]))
	}
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
}

// cpuSeconds is the CPU time pid has used; 0, with the error on stderr, when it cannot be read.
func cpuSeconds(pid int) float64 {
	cpu, err := proc.CPUSeconds(pid)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return cpu
}

// rss is field (VmRSS: now, VmHWM: peak) of pid's /proc status, in bytes.
func rss(pid int, field string) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
