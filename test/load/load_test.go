// Package load attacks the compaction API of a manager that runs as the Helm chart runs it:
// the chart's flags and environment (GOMEMLIMIT), against a real kube-apiserver and MinIO,
// its memory measured against the chart's memory limit. Controllers, garbage collection and
// every tenant's compactions share that process, so one caller must not be able to take it
// down or hold up the others: each attack (the subtests of TestLoad) must leave it up, under
// the limit and serving other sessions.
//
// Memory is the manager's peak resident set (VmHWM in /proc/PID/status, reset between
// attacks through /proc/PID/clear_refs), the figure a container's memory limit is compared
// with; the tests log it.
package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

const (
	ns       = "default"
	bucket   = "agent-context"
	prefix   = "load"
	policy   = "load"
	window   = 200000
	waitLong = 3 * time.Minute
)

// tooManyRequests is the reason of a 429 on the wire (compactclient.ReasonTooManyRequests),
// spelt out so that the attacks also build against a manager from before the budget.
const tooManyRequests = "TooManyRequests"

// env is one control plane, MinIO and manager shared by the attacks.
type env struct {
	cl        *operator.Cluster
	m         *testenv.MinIO
	mgr       *operator.Manager
	chart     chartManager
	token     string
	bystander string // a session of another tenant that must keep being served
	// metricsToken reads the manager's metrics (see metric).
	metricsToken string
}

func TestLoad(t *testing.T) {
	e := setUp(t)
	t.Run("StalledUpload", e.testStalledUpload)
	t.Run("HostileBodies", e.testHostileBodies)
	t.Run("ToolResultReaders", e.testToolResultReaders)
	t.Run("InflightBudget", e.testInflightBudget)
	if e.alive(t) {
		t.Logf("manager still up after the attacks")
	}
}

func setUp(t *testing.T) *env {
	e := &env{chart: renderChart(t)}
	t.Logf("the chart runs the manager with args %q, env %q, a memory limit of %d MiB and the configuration\n%s", e.chart.args, e.chart.env, e.chart.memoryLimit>>20, e.chart.config)
	e.cl = operator.Install(t)
	e.m = testenv.StartMinIO(t)
	for _, kv := range e.chart.env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // the manager inherits the test's environment
	}
	cfg, err := configv1alpha1.Decode(e.chart.config)
	if err != nil {
		t.Fatalf("the chart's configuration: %v", err)
	}
	e.mgr = e.cl.StartManager(testenv.BuildManager(t), func(c *configv1alpha1.Configuration) {
		loopback := c.Egress.NamespacedPolicyEndpoints // MinIO's, which StartManager allows
		*c = *cfg
		c.Egress.NamespacedPolicyEndpoints = loopback
	})
	e.cl.CreateMinIOPolicy(ns, policy, prefix, e.m, window, nil)
	e.token = e.cl.BindAgent(ns, "agent")
	e.bystander = e.cl.CreateReadySession(ns, "bystander", policy).Name
	return e
}

// chartManager is how the chart's Deployment runs the manager.
type chartManager struct {
	args        []string // flags, without --config and the addresses the test sets
	config      []byte   // the configuration file
	env         []string // NAME=value for the variables with a literal value
	memoryLimit int64
}

// renderChart renders the chart's Deployment with its default values.
func renderChart(t *testing.T) chartManager {
	t.Helper()
	root := testenv.RepoRoot(t)
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%v: run `make tools` to build bin/helm", err)
	}
	home := t.TempDir()
	cmd := exec.Command(helm, "template", "compaction-operator", filepath.Join(root, "charts", "compaction-operator"),
		"-n", "compaction-system", "--show-only", "templates/deployment.yaml", "--show-only", "templates/manager-config.yaml",
		// Rendered without a cluster, the chart needs the API server's address (issue 28).
		"--set-json", `networkPolicy.egress.apiServer.cidrs=["192.0.2.10/32"]`)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "KUBECONFIG="+filepath.Join(home, "none"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var d appsv1.Deployment
	var config corev1.ConfigMap
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		if strings.Contains(doc, "kind: ConfigMap") {
			if err := yaml.Unmarshal([]byte(doc), &config); err != nil {
				t.Fatalf("the chart's configuration: %v", err)
			}
		} else if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatalf("the chart's Deployment: %v", err)
		}
	}
	c := d.Spec.Template.Spec.Containers[0]
	cm := chartManager{config: []byte(config.Data["config.yaml"])}
	for _, a := range c.Args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasSuffix(name, "bind-address") || name == "config" {
			continue
		}
		cm.args = append(cm.args, a)
	}
	for _, v := range c.Env {
		if v.ValueFrom == nil {
			cm.env = append(cm.env, v.Name+"="+v.Value)
		}
	}
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Fatal("the chart sets no memory limit")
	}
	cm.memoryLimit = limit.Value()
	return cm
}

// alive fails the test when the manager has exited.
func (e *env) alive(t *testing.T) bool {
	t.Helper()
	if exited, err := e.mgr.Exited(); exited {
		t.Errorf("the manager exited (%v):\n%s", err, lastLines(e.mgr.Output(), 30))
		return false
	}
	return true
}

// resetPeak starts a new peak resident set measurement of the manager, from what it holds
// now.
func (e *env) resetPeak(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", e.mgr.Pid()), []byte("5"), 0); err != nil {
		t.Fatalf("reset the manager's peak RSS: %v", err)
	}
	_, rss := e.rss(t)
	t.Logf("the manager's RSS before the attack: %d MiB", rss>>20)
}

// rss returns the manager's peak and current resident set.
func (e *env) rss(t *testing.T) (hwm, rss int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.mgr.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		for _, f := range []struct {
			key string
			dst *int64
		}{{"VmHWM:", &hwm}, {"VmRSS:", &rss}} {
			if rest, ok := strings.CutPrefix(line, f.key); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				if err != nil {
					t.Fatalf("%s %q: %v", f.key, rest, err)
				}
				*f.dst = kb << 10
			}
		}
	}
	return hwm, rss
}

// checkPeak logs the manager's peak resident set since resetPeak and fails the test when it
// passed the chart's memory limit.
func (e *env) checkPeak(t *testing.T, what string) {
	t.Helper()
	if !e.alive(t) {
		return
	}
	hwm, rss := e.rss(t)
	t.Logf("%s: manager peak RSS %d MiB (now %d MiB), chart memory limit %d MiB", what, hwm>>20, rss>>20, e.chart.memoryLimit>>20)
	if hwm > e.chart.memoryLimit {
		t.Errorf("%s: the manager's peak RSS %d MiB is over the chart's memory limit %d MiB: in a pod it would have been OOM-killed",
			what, hwm>>20, e.chart.memoryLimit>>20)
	}
}

func (e *env) url(session, rest string) string {
	return e.mgr.URL + "/v1/namespaces/" + ns + "/sessions/" + session + "/" + rest
}

// httpClient verifies the API with the CA the manager published.
func (e *env) httpClient(timeout time.Duration) *http.Client {
	hc := e.mgr.HTTPClient()
	hc.Timeout = timeout
	return hc
}

// dial opens a raw TLS connection to the API, verified with the published CA.
func (e *env) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", e.mgr.APIAddr, &tls.Config{RootCAs: e.mgr.CAPool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func (e *env) client(t *testing.T, timeout time.Duration) *compactclient.Client {
	t.Helper()
	c, err := compactclient.New(e.mgr.URL, compactclient.WithToken(e.token), compactclient.WithHTTPClient(e.httpClient(timeout)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serveBystander compacts the bystander session; any failure fails the test.
func (e *env) serveBystander(t *testing.T, what string) {
	t.Helper()
	if _, err := e.client(t, 30*time.Second).Compact(context.Background(), ns, e.bystander,
		compactclient.CompactRequest{Messages: history(10, 200)}); err != nil {
		t.Errorf("%s: the bystander session was not served: %v", what, err)
	}
}

// keepServingBystander compacts the bystander session in a loop until the returned function
// is called, which reports how many were served and fails the test for any that was not.
func (e *env) keepServingBystander(t *testing.T) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	var served int
	var errs []error
	go func() {
		defer close(done)
		c := e.client(t, 60*time.Second)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Compact(context.Background(), ns, e.bystander, compactclient.CompactRequest{Messages: history(10, 200)}); err != nil {
				errs = append(errs, err)
			} else {
				served++
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() {
		t.Helper()
		close(stop)
		<-done
		t.Logf("the bystander session was served %d times meanwhile", served)
		for _, err := range errs {
			t.Errorf("the bystander session was not served: %v", err)
		}
	}
}

// history is a valid history of n user/assistant messages of about size bytes each.
func history(n, size int) []compaction.Message {
	msgs := make([]compaction.Message, 0, 1+n)
	msgs = append(msgs, compaction.Message{Role: compaction.RoleSystem, Content: "You are a coding agent."})
	for i := range n {
		role := compaction.RoleUser
		if i%2 == 1 {
			role = compaction.RoleAssistant
		}
		msgs = append(msgs, compaction.Message{Role: role, Content: fmt.Sprintf("turn %d: ", i) + strings.Repeat("all work and no play ", size/21)})
	}
	return msgs
}

func compactBody(t *testing.T, msgs []compaction.Message) []byte {
	t.Helper()
	body, err := json.Marshal(compactclient.CompactRequest{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// response is an answer of the API, read whole.
type response struct {
	code   int
	header http.Header
	body   string
	err    error
}

func (r response) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	return fmt.Sprintf("%d %.300s", r.code, r.body)
}

// record says what the compaction record of a compact answer reports: why a compaction that
// was to call the summarizer did not.
func (r response) record() string {
	var answer struct {
		Record *compaction.CompactionRecord `json:"record"`
	}
	if err := json.Unmarshal([]byte(r.body), &answer); err != nil || answer.Record == nil {
		return "no record"
	}
	rec := answer.Record
	return fmt.Sprintf("record: tier %s, usage %.2f, %d summarizer calls, summarized %d, notes %q, error %q, %.0f ms",
		rec.Tier, rec.UsageBefore, rec.SummarizerCalls, rec.Summarized, rec.Notes, rec.Error, rec.DurationMs)
}

func (e *env) post(url string, body []byte, timeout time.Duration) response {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return response{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.httpClient(timeout).Do(req)
	if err != nil {
		return response{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, header: resp.Header, body: string(data), err: err}
}

// reason is the reason of a JSON error answer.
func (r response) reason() string {
	var er compactclient.ErrorResponse
	if json.Unmarshal([]byte(r.body), &er) != nil {
		return ""
	}
	return er.Reason
}

// testStalledUpload: a client that sends its headers and half of a compaction's body and
// then stops sending holds nothing of the session: the session's other requests are served
// meanwhile, and the stalled request is answered 408 once the read timeout has passed.
func (e *env) testStalledUpload(t *testing.T) {
	sess := e.cl.CreateReadySession(ns, "stalled", policy)
	body := compactBody(t, history(20, 500))
	conn := e.dial(t)
	defer func() { _ = conn.Close() }()
	header := fmt.Sprintf("POST /v1/namespaces/%s/sessions/%s/compact HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", ns, sess.Name, e.mgr.APIAddr, e.token, len(body))
	if _, err := conn.Write(append([]byte(header), body[:len(body)/2]...)); err != nil {
		t.Fatal(err)
	}
	// Time for the server to authenticate the stalled request and look its session up (it
	// would take the session's lock next).
	time.Sleep(2 * time.Second)

	c := e.client(t, 20*time.Second)
	for i := range 3 {
		if _, err := c.Compact(context.Background(), ns, sess.Name, compactclient.CompactRequest{Messages: history(10+i, 300)}); err != nil {
			t.Fatalf("compaction %d of the session while another of its requests stalls mid-body: %v", i+1, err)
		}
	}
	e.serveBystander(t, "a stalled upload")

	if err := conn.SetReadDeadline(time.Now().Add(90 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the stalled request got no answer: %v", err)
	}
	data, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if r := (response{code: resp.StatusCode, body: string(data)}); r.code != http.StatusRequestTimeout || r.reason() != compactclient.ReasonTimeout {
		t.Errorf("the stalled request: %s, want 408 %s", r, compactclient.ReasonTimeout)
	}
}

// testHostileBodies sends bodies built to make decoding expensive, among them the 32
// MiB of tiny messages with an unknown key: each gets a clear 4xx, stores nothing, and
// leaves the manager under its memory limit, serving another tenant's session throughout.
func (e *env) testHostileBodies(t *testing.T) {
	sess := e.cl.CreateReadySession(ns, "hostile", policy)
	e.resetPeak(t)
	done := e.keepServingBystander(t)

	tiny := func(size int, msg string) func() []byte {
		return func() []byte {
			var b bytes.Buffer
			b.Grow(size + 64)
			b.WriteString(`{"messages": [`)
			for b.Len() < size-len(msg)-2 {
				b.WriteString(msg)
				b.WriteByte(',')
			}
			b.WriteString(msg + `]}`)
			return b.Bytes()
		}
	}
	unknown := func(msgs, fields int) func() []byte {
		return func() []byte {
			var b bytes.Buffer
			b.WriteString(`{"messages": [`)
			for i := range msgs {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`{"role": "user", "content": "hi"`)
				for j := range fields {
					fmt.Fprintf(&b, `, "x%d": %d`, j, j)
				}
				b.WriteByte('}')
			}
			b.WriteString(`]}`)
			return b.Bytes()
		}
	}
	const limit = 8 << 20 // just under the default body limit
	bodies := []struct {
		name string
		body func() []byte
		want int
	}{
		{"32 MiB of tiny messages with an unknown key (the issue's)", tiny(32<<20-4096, `{"role":"user","x":1}`), http.StatusRequestEntityTooLarge},
		{"8 MiB of tiny messages with an unknown key", tiny(limit-4096, `{"role":"user","x":1}`), http.StatusRequestEntityTooLarge},
		{"8 MiB of numbers for messages", tiny(limit-4096, `1`), http.StatusRequestEntityTooLarge},
		{"8 MiB of empty tool calls", func() []byte {
			calls := tiny(limit-4096, `{}`)()
			return append(append([]byte(`{"messages": [{"role": "assistant", "tool_calls": `), bytes.TrimSuffix(bytes.TrimPrefix(calls, []byte(`{"messages": `)), []byte("}"))...), "}]}"...)
		}, http.StatusRequestEntityTooLarge},
		{"a message with 450,000 unknown fields", unknown(1, 450_000), http.StatusRequestEntityTooLarge},
		{"a message with 17 unknown fields", unknown(1, 17), http.StatusBadRequest},
		{"10,001 messages", func() []byte { return compactBody(t, history(10_000, 10)) }, http.StatusRequestEntityTooLarge},
		{"40,001 unknown fields in all", unknown(2_858, 14), http.StatusRequestEntityTooLarge},
	}
	for _, b := range bodies {
		body := b.body()
		r := e.post(e.url(sess.Name, "compact"), body, waitLong)
		t.Logf("%s (%d KiB): %s", b.name, len(body)>>10, r)
		if r.code != b.want || r.reason() == "" {
			t.Errorf("%s: %s, want %d with a JSON reason", b.name, r, b.want)
		}
		if !e.alive(t) {
			t.FailNow()
		}
	}
	done()
	if objs := e.objectsOf(t, sess.Status.SessionID); len(objs) > 0 {
		t.Errorf("hostile bodies stored objects of the session: %v", objs)
	}
	e.checkPeak(t, "hostile bodies")
}

// testInflightBudget: large compactions that wait on a slow summarizer hold the in-flight
// budget; once it is spent the next large one is answered 429 with Retry-After at once
// (counted in compaction_api_throttled_requests_total) instead of piling into memory,
// another tenant's small requests are still served, and every admitted compaction completes
// once the summarizer answers.
func (e *env) testInflightBudget(t *testing.T) {
	const (
		bodyBytes = 4 << 20
		maxLarge  = 16
	)
	llm := newBlockingLLM(t)
	c, ctx := e.cl.Client, context.Background()
	msgs := history(bodyBytes/2100, 2100)
	// The window puts the history in Soft: one summarizer call, which waits.
	window := int32(float64(compaction.EstimateTokens(msgs)) / 0.72)
	if err := c.Create(ctx, builder.CredentialsSecret(ns, "slow-llm", map[string]string{"apiKey": "sk-test"})); err != nil {
		t.Fatal(err)
	}
	e.cl.CreateMinIOPolicy(ns, "slow-llm", prefix, e.m, window, func(spec *compactionv1alpha1.CompactionPolicySpec) {
		spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
			BaseURL: llm.srv.URL + "/v1", Model: "test-model", TimeoutSeconds: 120,
			APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "slow-llm"}, Key: "apiKey"},
		}}
	})
	sessions := make([]string, maxLarge)
	for i := range sessions {
		sessions[i] = e.cl.CreateReadySession(ns, fmt.Sprintf("large-%d", i), "slow-llm").Name
	}
	body := compactBody(t, msgs)
	e.resetPeak(t)

	results := make(chan response, maxLarge)
	admitted, throttled := 0, response{}
	for i := 0; i < maxLarge && throttled.code == 0; i++ {
		go func() { results <- e.post(e.url(sessions[i], "compact"), body, waitLong) }()
		// Either the request reaches the summarizer (it was admitted and waits there) or it
		// is answered.
		select {
		case <-llm.arrived:
			admitted++
		case r := <-results:
			if r.code != http.StatusTooManyRequests {
				t.Fatalf("large compaction %d: %s (%s), want it to wait on the summarizer or a 429", i+1, r, r.record())
			}
			throttled = r
		case <-time.After(waitLong):
			t.Fatalf("large compaction %d neither reached the summarizer nor was answered", i+1)
		}
	}
	t.Logf("%d compactions of %d KiB admitted and waiting on the summarizer, then %s", admitted, len(body)>>10, throttled)
	if throttled.code != http.StatusTooManyRequests || throttled.reason() != tooManyRequests || throttled.header.Get("Retry-After") == "" {
		t.Errorf("after %d large compactions held at once: %s (Retry-After %q), want a 429 %s with Retry-After",
			admitted, throttled, throttled.header.Get("Retry-After"), tooManyRequests)
	}
	if admitted == 0 {
		t.Error("no large compaction was admitted")
	}
	// While the budget is spent, small requests of other sessions are still served.
	e.serveBystander(t, "a spent in-flight budget")
	if n := e.metric(t, `compaction_api_throttled_requests_total{route="compact"}`); n < 1 {
		t.Errorf("compaction_api_throttled_requests_total{route=\"compact\"} = %v, want at least 1", n)
	}

	llm.release()
	for range admitted {
		if r := <-results; r.code != http.StatusOK {
			t.Errorf("an admitted compaction: %s, want 200", r)
		}
	}
	e.checkPeak(t, fmt.Sprintf("%d compactions of %d KiB at once", admitted, len(body)>>10))
}

// testToolResultReaders: many clients read one large offloaded result at once and stop
// reading after its first bytes. The result is streamed from storage, so the readers cost
// the manager next to nothing (it used to read the whole object into memory for each), and
// one that reads on gets every byte.
func (e *env) testToolResultReaders(t *testing.T) {
	const (
		size    = 32 << 20 // offloads were allowed this large before the 8 MiB body limit
		readers = 16
		callID  = "call_big_log"
	)
	sess := e.cl.CreateReadySession(ns, "reader", policy)
	line := []byte("a line of the build log that the agent offloaded\n")
	content := bytes.Repeat(line, size/len(line))
	if _, err := e.store(t).PutToolResult(context.Background(), sess.Status.SessionID, callID, string(content)); err != nil {
		t.Fatal(err)
	}
	e.resetPeak(t)

	request := fmt.Sprintf("GET /v1/namespaces/%s/sessions/%s/toolresults/%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n",
		ns, sess.Name, callID, e.mgr.APIAddr, e.token)
	conns := make([]net.Conn, readers)
	for i := range conns {
		conn := e.dial(t)
		defer func() { _ = conn.Close() }()
		if _, err := io.WriteString(conn, request); err != nil {
			t.Fatal(err)
		}
		conns[i] = conn
	}
	// Every reader gets the answer's start, then stops reading.
	bodies := make([]io.Reader, readers)
	for i, conn := range conns {
		if err := conn.SetReadDeadline(time.Now().Add(waitLong)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reader %d: %v", i+1, err)
		}
		if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(content)) {
			t.Fatalf("reader %d: %d, Content-Length %d; want 200 and %d", i+1, resp.StatusCode, resp.ContentLength, len(content))
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
			t.Fatalf("reader %d: %v", i+1, err)
		}
		bodies[i] = resp.Body
	}
	e.serveBystander(t, fmt.Sprintf("%d readers of a %d MiB result", readers, size>>20))
	e.checkPeak(t, fmt.Sprintf("%d readers of a %d MiB tool result", readers, size>>20))

	// One reads on: the rest of the result, byte for byte.
	rest, err := io.ReadAll(bodies[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(content[64<<10:]); sha256.Sum256(rest) != want {
		t.Errorf("the rest of the result read back: %d bytes that differ from the %d stored", len(rest), len(content)-64<<10)
	}
}

// metric scrapes the manager's metrics endpoint (HTTPS, as a ServiceAccount bound to the
// metrics-reader ClusterRole) and returns the value of the sample that starts with series.
func (e *env) metric(t *testing.T, series string) float64 {
	t.Helper()
	if e.metricsToken == "" {
		ctx := context.Background()
		if err := e.cl.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scraper"}}); err != nil {
			t.Fatal(err)
		}
		if err := e.cl.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: operator.MetricsReader},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "scraper"}},
		}); err != nil {
			t.Fatal(err)
		}
		e.metricsToken = e.cl.Token(ns, "scraper")
	}
	// The metrics are served with the API's certificate: verified with the published CA.
	hc := e.httpClient(10 * time.Second)
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequest(http.MethodGet, "https://"+e.mgr.MetricsAddr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.metricsToken)
		resp, err := hc.Do(req)
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				for line := range strings.SplitSeq(string(data), "\n") {
					if rest, ok := strings.CutPrefix(line, series+" "); ok {
						v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
						if err != nil {
							t.Fatal(err)
						}
						return v
					}
				}
				return 0
			}
			err = fmt.Errorf("%d %s", resp.StatusCode, data)
		}
		if time.Now().After(deadline) { // the authorizer's RBAC cache fills in within seconds
			t.Fatalf("GET /metrics: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// blockingLLM is an OpenAI-compatible summarizer that holds every call until release.
type blockingLLM struct {
	srv      *httptest.Server
	arrived  chan struct{}
	released chan struct{}
	once     sync.Once
}

func newBlockingLLM(t *testing.T) *blockingLLM {
	l := &blockingLLM{arrived: make(chan struct{}, 100), released: make(chan struct{})}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		l.arrived <- struct{}{}
		select {
		case <-l.released:
		case <-r.Context().Done():
			return
		}
		content := "USER_INTENT: fix the failing test\nEXECUTION_PROGRESS: read the code\nKEY_DECISION: N/A\nTRIED_SOLUTION: N/A\nNEXT_STEP: run the tests\n\nSummary: the agent read the code."
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": content}}}})
	}))
	t.Cleanup(func() {
		l.release()
		l.srv.Close()
	})
	return l
}

func (l *blockingLLM) release() { l.once.Do(func() { close(l.released) }) }

func (e *env) store(t *testing.T) *s3.Store {
	t.Helper()
	st, err := s3.New(context.Background(), s3.Config{Endpoint: e.m.Endpoint, Bucket: bucket, Prefix: prefix, Insecure: true,
		AccessKey: e.m.AccessKey, SecretKey: e.m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// objectsOf lists the stored objects of a session.
func (e *env) objectsOf(t *testing.T, sid string) []string {
	t.Helper()
	mc, err := minio.New(e.m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(e.m.AccessKey, e.m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for obj := range mc.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		if strings.Contains(obj.Key, sid) {
			keys = append(keys, obj.Key)
		}
	}
	return keys
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
