package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/devenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/proxy"
)

// Issue 29's measurement: what an agent waits for when its session's summarizer is slow. An
// unmodified OpenAI SDK loop of 60 tool turns at a 16,000-token window goes through the proxy
// (its default 10 s compact timeout) to the manager binary, whose policy summarizes with a
// scripted OpenAI-compatible endpoint answering in 2 s or 15 s; the model answers each turn
// in latencyModelDelay. Run with the summaries on the turn (--api-summaries-off-turn=false,
// the behaviour before issue 29) and off it (the default):
//
//	make bench-latency
//
// Each run reports the latency the proxy and the compaction API added to a turn (the time
// from the SDK's request to its arrival at the model), for the turns whose compaction crossed
// Soft or Full and for the others, the share of those compactions that used an LLM summary,
// the turns that reached the proxy's timeout, and the prepared summaries wasted.
const (
	latencyTurns      = 60
	latencyModelDelay = 500 * time.Millisecond
)

func BenchmarkSummarizerLatency(b *testing.B) {
	llm := scriptedSummarizer()
	b.Cleanup(llm.Close)
	for _, offTurn := range []bool{false, true} {
		mode := "OnTurn"
		if offTurn {
			mode = "OffTurn"
		}
		b.Run(mode, func(b *testing.B) {
			lb := startLatencyEnv(b, offTurn)
			for _, delay := range latencyDelays(b) {
				b.Run(fmt.Sprintf("Summarizer%s", delay), func(b *testing.B) {
					var last latencyRun
					for i := range b.N {
						name := fmt.Sprintf("lat-%s-%d-%d", strings.ToLower(mode), int(delay.Seconds()), i)
						last = lb.run(b, name, llm.URL+fmt.Sprintf("/delay%d/v1", int(delay/time.Millisecond)))
					}
					last.report(b)
				})
			}
		})
	}
}

// latencyDelays are the summarizer's delays to measure: 2 s and 15 s, or the comma-separated
// durations of BENCH_LATENCY_DELAYS (CI runs one short delay, to keep the benchmark working).
func latencyDelays(b *testing.B) []time.Duration {
	v := os.Getenv("BENCH_LATENCY_DELAYS")
	if v == "" {
		return []time.Duration{2 * time.Second, 15 * time.Second}
	}
	var out []time.Duration
	for _, f := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			b.Fatalf("BENCH_LATENCY_DELAYS=%q: %q is not a positive duration", v, f)
		}
		out = append(out, d)
	}
	return out
}

// latencyEnv is the manager, its MinIO and a client of its API.
type latencyEnv struct {
	env *devenv.Env
	c   client.Client
	api *compactclient.Client
}

func startLatencyEnv(b *testing.B, offTurn bool) *latencyEnv {
	b.Helper()
	ctx := context.Background()
	env, err := devenv.Start(ctx, devenv.Options{Root: testenv.RepoRoot(b), Dir: b.TempDir(), ManagerBin: testenv.BuildManager(b),
		Config: &configv1alpha1.Configuration{API: configv1alpha1.API{SummariesOffTurn: &offTurn}}})
	testenv.Must(b, err)
	b.Cleanup(env.Stop)
	scheme := runtime.NewScheme()
	testenv.Must(b, clientgoscheme.AddToScheme(scheme))
	testenv.Must(b, compactionv1alpha1.AddToScheme(scheme))
	// The client logs through controller-runtime's logger, which warns with a stack trace
	// when it was never set.
	ctrllog.SetLogger(logr.Discard())
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	testenv.Must(b, err)
	testenv.Must(b, c.Create(ctx, builder.MinIOSecret(ns, "minio", devenv.MinIOAccessKey, devenv.MinIOSecretKey)))
	testenv.Must(b, c.Create(ctx, builder.CredentialsSecret(ns, "llm", map[string]string{"apiKey": "sk-test"})))
	api, err := compactclient.New(env.APIURL, compactclient.WithTokenFile(env.AgentTokenFile), compactclient.WithCAFile(env.CAFile))
	testenv.Must(b, err)
	return &latencyEnv{env: env, c: c, api: api}
}

// scriptedSummarizer is an OpenAI-compatible endpoint that answers a summary after the delay
// its path names (/delay{ms}/v1/chat/completions).
func scriptedSummarizer() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ms int
		if _, err := fmt.Sscanf(r.URL.Path, "/delay%d/", &ms); err != nil {
			http.Error(w, "path: "+err.Error(), http.StatusNotFound)
			return
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"USER_INTENT: fix the failing tests\nEXECUTION_PROGRESS: ran the test cases one by one\nKEY_DECISION: run each case alone\nTRIED_SOLUTION: N/A\nNEXT_STEP: run the next case\n\nSummary: LLM-SUMMARY the agent ran pytest case by case."}}],"usage":{"prompt_tokens":3000,"completion_tokens":80}}`))
	}))
}

// latencyRun is what one loop measured.
type latencyRun struct {
	crossing, other []time.Duration // added latency of the turns
	compactions     int             // Soft and Full compactions that changed the view
	llmUsed         int             // of which used an LLM summary (on the turn or prepared)
	lateMerged      int             // compactions that merged an LLM summary made late
	timeouts        int             // turns that reached the proxy's timeout
	wasted          int             // prepared summaries discarded
}

func (e *latencyEnv) run(b *testing.B, name, summarizerURL string) latencyRun {
	b.Helper()
	ctx := context.Background()
	testenv.Must(b, e.c.Create(ctx, builder.Policy(ns, name).Window(window).
		Storage(builder.MinIOStorage(e.env.MinIO.Endpoint, "agent-context", "", "minio")).
		Spec(func(s *compactionv1alpha1.CompactionPolicySpec) {
			s.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
				BaseURL: summarizerURL, Model: "summarizer", TimeoutSeconds: 60,
				APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "llm"}, Key: "apiKey"},
			}}
		}).Build()))
	testenv.Must(b, e.c.Create(ctx, builder.Session(ns, name, name).Build()))
	testenv.Eventually(b, time.Minute, "session "+name+" Ready", func() (bool, string) {
		var got compactionv1alpha1.AgentSession
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &got); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, compactionv1alpha1.ConditionReady), fmt.Sprint(got.Status.Conditions)
	})

	model := &timedUpstream{up: &upstream{toolTurns: latencyTurns, turns: map[string]int{}}, delay: latencyModelDelay}
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()
	base, err := url.Parse(modelSrv.URL + "/v1")
	testenv.Must(b, err)
	m, err := proxy.NewMetrics(prometheus.NewRegistry())
	testenv.Must(b, err)
	p, err := proxy.New(proxy.Config{Upstream: base, Compactor: proxy.NewAPICompactor(e.api, ns, name), PromptCacheKey: true, Metrics: m, Log: logr.Discard()})
	testenv.Must(b, err)
	proxySrv := httptest.NewServer(p)
	defer proxySrv.Close()

	// The agent: the OpenAI SDK's tool loop, timing each request to its arrival at the model.
	sdk := openai.NewClient(option.WithBaseURL(proxySrv.URL+"/v1"), option.WithAPIKey("sk-agent"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(agentSystem), openai.UserMessage("Run the test cases and fix what fails."),
	}}
	// Each turn's span, from the SDK's request to its arrival at the model: a compaction
	// belongs to the turn whose span holds its record's timestamp (the record's message
	// counts are the derived view's, not the agent's history).
	type turnSpan struct{ sent, arrived time.Time }
	var turns []turnSpan
	b.ResetTimer()
	for turn := 1; ; turn++ {
		sent := time.Now()
		resp, err := sdk.Chat.Completions.New(ctx, params)
		if err != nil {
			b.Fatalf("turn %d: %v", turn, err)
		}
		turns = append(turns, turnSpan{sent, sent.Add(model.arrivedAfter(sent))})
		msg := resp.Choices[0].Message
		params.Messages = append(params.Messages, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			break
		}
		for _, tc := range msg.ToolCalls {
			params.Messages = append(params.Messages, openai.ToolMessage(toolOutput("/src/app", turn), tc.ID))
		}
	}
	b.StopTimer()

	// Late summaries may still be running: wait for the records to settle a moment.
	time.Sleep(2 * time.Second)
	var run latencyRun
	var crossings []time.Time
	// The proxy keeps the loop's records under its conversation, which it also sends the
	// model as prompt_cache_key.
	reqs := model.up.requests()
	if len(reqs) == 0 || reqs[0].promptCacheKey == "" {
		b.Fatal("the model got no prompt_cache_key naming the conversation")
	}
	recs := readRecords(b, e.api, name, compactclient.InConversation(strings.TrimPrefix(reqs[0].promptCacheKey, "compaction-")))
	if len(recs) == 0 {
		b.Fatalf("no records in conversation %s", reqs[0].promptCacheKey)
	}
	for _, rec := range recs {
		run.wasted += rec.PreparedWasted
		if rec.PreparedLateMerged {
			run.lateMerged++
		}
		if !rec.ChangedView() || (rec.Tier != compaction.TierSoft && rec.Tier != compaction.TierFull) {
			continue
		}
		crossings = append(crossings, rec.Timestamp)
		run.compactions++
		if rec.PreparedUsed > 0 || (rec.SummarizerCalls > 0 && !rec.SummarizerDeferred && rec.Error == "") || rec.PreparedLateMerged {
			run.llmUsed++
		}
	}
	for _, ts := range turns {
		d := ts.arrived.Sub(ts.sent)
		if d >= proxy.DefaultCompactTimeout {
			run.timeouts++
		}
		if slices.ContainsFunc(crossings, func(at time.Time) bool { return !at.Before(ts.sent) && !at.After(ts.arrived) }) {
			run.crossing = append(run.crossing, d)
		} else {
			run.other = append(run.other, d)
		}
	}
	return run
}

func readRecords(b *testing.B, api *compactclient.Client, name string, opts ...compactclient.CallOption) []*compaction.CompactionRecord {
	b.Helper()
	var buf strings.Builder
	testenv.Must(b, api.Records(context.Background(), ns, name, &buf, opts...))
	var recs []*compaction.CompactionRecord
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec compaction.CompactionRecord
		testenv.Must(b, json.Unmarshal([]byte(line), &rec))
		recs = append(recs, &rec)
	}
	return recs
}

func (r latencyRun) report(b *testing.B) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	q := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	b.ReportMetric(ms(q(r.crossing, 0.5)), "crossing-p50-ms")
	b.ReportMetric(ms(q(r.crossing, 0.99)), "crossing-p99-ms")
	b.ReportMetric(ms(slices.Max(append([]time.Duration{0}, r.crossing...))), "crossing-max-ms")
	b.ReportMetric(ms(q(r.other, 0.5)), "other-p50-ms")
	b.ReportMetric(ms(q(r.other, 0.99)), "other-p99-ms")
	b.ReportMetric(float64(r.compactions), "soft+full")
	share := 0.0
	if r.compactions > 0 {
		share = float64(r.llmUsed) / float64(r.compactions)
	}
	b.ReportMetric(share, "llm-share")
	b.ReportMetric(float64(r.lateMerged), "late-merged")
	b.ReportMetric(float64(r.timeouts), "timeouts")
	b.ReportMetric(float64(r.wasted), "wasted")
}

// timedUpstream is the scripted model, answering after delay and noting when each request
// arrived.
type timedUpstream struct {
	up    *upstream
	delay time.Duration

	mu      sync.Mutex
	arrived []time.Time
}

func (u *timedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.arrived = append(u.arrived, time.Now())
	u.mu.Unlock()
	time.Sleep(u.delay)
	u.up.ServeHTTP(w, r)
}

// arrivedAfter is how long after sent the last request reached the model.
func (u *timedUpstream) arrivedAfter(sent time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.arrived[len(u.arrived)-1].Sub(sent)
}
