// Package e2e runs an agent's session end to end: the manager binary as its ServiceAccount
// on a real kube-apiserver, real MinIO, an agent ServiceAccount bound to compaction-agent
// calling the compaction API turn by turn, a manager restart mid-replay, and deletion.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

const (
	ns     = "default"
	bucket = "agent-context"
	// window: at 16,000 tokens the replay of testdata/long-session.jsonl reaches Warn, Soft
	// (escalated to Full: its half of the head does not reach the 50% target) and Full
	// without Emergency; at 8,000 one Emergency happens (docs/benchmarks.md).
	window  = 16000
	waitFor = 60 * time.Second
)

// suite is one end-to-end run: the cluster, MinIO, the manager and the session.
type suite struct {
	t             *testing.T
	cl            *operator.Cluster
	c             client.Client
	m             *testenv.MinIO
	bin           string
	mgr           *operator.Manager
	history       []compaction.Message
	session       *compactionv1alpha1.AgentSession
	sid           string
	agentToken    string
	strangerToken string
}

// replayed is what the replay saw.
type replayed struct {
	tiers     map[compaction.Tier]int
	records   []*compaction.CompactionRecord // every record above TierNone
	changed   int                            // the records that changed the view: compactions
	offloaded map[string]bool
	originals map[string]string
}

func TestAgentSessionEndToEnd(t *testing.T) {
	s := &suite{t: t}
	s.setUp()
	r := s.replay()
	t.Logf("%d turns: %v", len(compaction.AssistantTurns(s.history)), r.tiers)
	for _, tier := range []compaction.Tier{compaction.TierWarn, compaction.TierFull} {
		if r.tiers[tier] == 0 {
			t.Errorf("no %s compaction in the replay: %v", tier, r.tiers)
		}
	}
	// Soft: done, or escalated to Full because its half of the head would not reach the
	// target (issue 13), which the record says.
	escalated := 0
	for _, rec := range r.records {
		for _, n := range rec.Notes {
			if strings.HasPrefix(n, "Soft escalated to Full") {
				escalated++
			}
		}
	}
	if r.tiers[compaction.TierSoft]+escalated == 0 {
		t.Errorf("no Soft compaction in the replay, done or escalated: %v", r.tiers)
	}
	s.checkStatusAndEvents(r)
	s.checkReadBack(r)
	t.Run("Auth", s.testAuth)
	t.Run("BadInput", s.testBadInput)
	t.Run("StaleWatermark", s.testStaleWatermark)
	t.Run("ConcurrentRequestsSerialized", s.testConcurrent)
	t.Run("TwoReplicasOneSession", s.testTwoReplicas)
	t.Run("TwoReplicasOffTurn", s.testTwoReplicasOffTurn)
	t.Run("Compactctl", func(t *testing.T) { s.testCompactctl(t, r) })
	t.Run("Metrics", s.testMetrics)
	s.checkDeletion()
}

func (s *suite) api(token string) *compactclient.Client {
	return s.mgr.APIClient(s.t, token)
}

// setUp: 1. a policy with a small window and a session, both Ready; 2. the agent's
// ServiceAccount bound to compaction-agent, and one without the binding.
func (s *suite) setUp() {
	t := s.t
	root := testenv.RepoRoot(t)
	s.history = testenv.MustLoad(t, filepath.Join(root, "testdata", "long-session.jsonl"))
	s.cl = operator.Install(t)
	s.m = testenv.StartMinIO(t)
	s.bin = testenv.BuildManager(t)
	s.mgr = s.cl.StartManager(s.bin, onTurnFastUsage)
	s.c = s.cl.Client
	c, m, ctx := s.c, s.m, context.Background()
	testenv.Must(t, c.Create(ctx, builder.MinIOSecret(ns, "minio-credentials", m.AccessKey, m.SecretKey)))
	// Anchors in status too, to check them there (the default keeps them out).
	testenv.Must(t, c.Create(ctx, builder.Policy(ns, "small-window").Window(window).AnchorsInStatus(compactionv1alpha1.AnchorsInclude).
		Storage(builder.MinIOStorage(m.Endpoint, bucket, "e2e", "minio-credentials")).Build()))
	session := builder.Session(ns, "swe-agent", "small-window").Build()
	testenv.Must(t, c.Create(ctx, session))
	waitSessionReady(t, c, session)
	s.session, s.sid = session, session.Status.SessionID

	// 2. The agent's ServiceAccount, bound to compaction-agent in its namespace.
	testenv.Must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}}))
	testenv.Must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-compaction"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: operator.AgentRole},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "agent"}},
	}))
	testenv.Must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stranger"}}))
	s.agentToken, s.strangerToken = s.cl.AgentToken(ns, "agent"), s.cl.AgentToken(ns, "stranger")
}

// replay: 3. the transcript as the agent runs it: every tool result goes through the offload
// hook before it enters the history, and the history is compacted before every assistant
// turn (delta requests). The manager restarts halfway.
func (s *suite) replay() replayed {
	t, ctx, history := s.t, context.Background(), s.history
	agentAPI := s.api(s.agentToken)
	agent := &compactclient.Session{Client: agentAPI, Namespace: ns, Name: s.session.Name}
	r := replayed{tiers: map[compaction.Tier]int{}, offloaded: map[string]bool{}, originals: map[string]string{}}
	turns := compaction.AssistantTurns(history)
	restartAt := len(turns) / 2
	var live []compaction.Message
	turn := 0
	for i, msg := range history {
		if msg.Role == compaction.RoleTool {
			r.originals[msg.ToolCallID] = msg.Content
			off, err := agentAPI.OffloadToolResult(ctx, ns, s.session.Name, msg)
			if err != nil {
				t.Fatalf("offload message %d: %v", i, err)
			}
			if off.Offloaded != nil {
				r.offloaded[msg.ToolCallID] = true
			}
			live = append(live, off.Message)
			continue
		}
		if turn < len(turns) && turns[turn] == i {
			if turn == restartAt {
				if err := s.mgr.Stop(20 * time.Second); err != nil {
					t.Fatalf("manager did not stop cleanly: %v", err)
				}
				s.mgr = s.cl.StartManager(s.bin, onTurnFastUsage)
				agentAPI = s.api(s.agentToken)
				agent.Client = agentAPI
			}
			resp, err := agent.Compact(ctx, live, 0)
			if err != nil {
				t.Fatalf("turn %d (message %d): %v", turn, i, err)
			}
			rec := resp.Record
			r.tiers[rec.Tier]++
			if rec.Tier != compaction.TierNone {
				r.records = append(r.records, rec)
				if rec.ChangedView() {
					r.changed++
				}
				if turn >= restartAt && len(r.records) > 0 && rec.WatermarkBefore == 0 && r.tiers[compaction.TierFull]+r.tiers[compaction.TierSoft] > 0 {
					t.Errorf("turn %d after the restart started from watermark 0: the state was not read back from storage", turn)
				}
			}
			for _, o := range rec.Offloaded {
				r.offloaded[o.ToolCallID] = true
			}
			if rec.Error != "" {
				t.Errorf("turn %d: record error %q", turn, rec.Error)
			}
			if tokens := compaction.EstimateTokens(resp.Messages); tokens > window {
				t.Errorf("turn %d: view of %d tokens exceeds the %d-token window", turn, tokens, window)
			}
			turn++
		}
		live = append(live, msg)
	}
	return r
}

// checkStatusAndEvents: kubectl shows tier and ratio; status counts match; events carry the
// notifications.
func (s *suite) checkStatusAndEvents(r replayed) {
	t, c, ctx := s.t, s.c, context.Background()
	testenv.Eventually(t, waitFor, "kubectl get agentsessions shows the tier and ratio", func() (bool, string) {
		out := s.cl.Run("get", "agentsessions", s.session.Name, "--no-headers")
		f := strings.Fields(out)
		return len(f) >= 6 && f[2] != "<none>" && strings.HasPrefix(f[4], "0.") && f[5] == "True", out
	})
	// Status writes are coalesced off the request path: wait for the last flush.
	var st compactionv1alpha1.AgentSessionStatus
	// A turn above TierNone that waited (changed nothing) is recorded but is no compaction.
	testenv.Eventually(t, waitFor, "status counts every compaction", func() (bool, string) {
		testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(s.session), s.session))
		st = s.session.Status
		c := st.Compactions
		got := ptr.Deref(c.Warn, 0) + ptr.Deref(c.Soft, 0) + ptr.Deref(c.Full, 0) + ptr.Deref(c.Emergency, 0)
		return got == int64(r.changed), fmt.Sprintf("status counts %d compactions (%+v), the replay made %d", got, st.Compactions, r.changed)
	})
	if len(st.Anchors) == 0 || st.LastCompactionTime == nil || ptr.Deref(st.OffloadedCount, 0) == 0 {
		t.Errorf("status lacks anchors, lastCompactionTime or offloads: %+v", st)
	}
	testenv.Eventually(t, waitFor, "ContextCompacted events", func() (bool, string) {
		var list eventsv1.EventList
		testenv.Must(t, c.List(ctx, &list, client.InNamespace(ns)))
		for _, e := range list.Items {
			if e.Regarding.Name == s.session.Name && e.Reason == compactionv1alpha1.ReasonContextCompacted && strings.Contains(e.Note, "Context compressed [") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(list.Items))
	})

}

// checkReadBack: 4. an offloaded result reads back byte for byte; the records are one per
// compaction; offload at source works.
func (s *suite) checkReadBack(r replayed) {
	t, ctx := s.t, context.Background()
	agentAPI := s.api(s.agentToken)
	if len(r.offloaded) == 0 {
		t.Fatal("nothing was offloaded in the replay")
	}
	for id := range r.offloaded {
		got, err := agentAPI.GetToolResult(ctx, ns, s.session.Name, id)
		testenv.Must(t, err)
		if string(got) != r.originals[id] {
			t.Errorf("tool result %s read back: %d bytes, want the original %d bytes", id, len(got), len(r.originals[id]))
		}
		break
	}
	trail := readRecords(t, agentAPI, s.session.Name)
	if len(trail) != len(r.records) {
		t.Errorf("records: %d lines, the replay made %d compactions", len(trail), len(r.records))
	}
	for i := range min(len(trail), len(r.records)) {
		if trail[i].ID != r.records[i].ID || trail[i].Tier != r.records[i].Tier {
			t.Errorf("record %d: %s %s, the replay got %s %s", i, trail[i].ID, trail[i].Tier, r.records[i].ID, r.records[i].Tier)
			break
		}
	}

	// Offload at source: a large result comes back as a placeholder and reads back whole.
	big := strings.Repeat("line of a very long build log\n", 1000)
	off, err := agentAPI.OffloadToolResult(ctx, ns, s.session.Name, compaction.Message{Role: compaction.RoleTool, ToolCallID: "call_hook_1", Content: big})
	testenv.Must(t, err)
	if off.Offloaded == nil || len(off.Message.Content) >= len(big) {
		t.Errorf("large tool result not offloaded at source: %+v", off.Offloaded)
	}
	if got, err := agentAPI.GetToolResult(ctx, ns, s.session.Name, "call_hook_1"); err != nil || string(got) != big {
		t.Errorf("hook-offloaded result read back: %d bytes, %v", len(got), err)
	}

}

// testAuth: 5. no token: 401; a ServiceAccount without the binding: 403.
func (s *suite) testAuth(t *testing.T) {
	ctx := context.Background()
	compact := func(cc *compactclient.Client) error {
		_, err := cc.Compact(ctx, ns, s.session.Name, compactclient.CompactRequest{Messages: s.history[:5]})
		return err
	}
	expectAPIError(t, compact(s.api("")), http.StatusUnauthorized)
	expectAPIError(t, compact(s.api("not-a-token")), http.StatusUnauthorized)
	expectAPIError(t, compact(s.api(s.strangerToken)), http.StatusForbidden)
	_, err := s.api(s.strangerToken).GetToolResult(ctx, ns, s.session.Name, "call_hook_1")
	expectAPIError(t, err, http.StatusForbidden)
}

// testBadInput: bad bodies, media types and paths get a 4xx with a JSON reason and change
// nothing: not the session's records or state, and no object of the bucket, of this session
// or of another one.
func (s *suite) testBadInput(t *testing.T) {
	ctx := context.Background()
	agentAPI := s.api(s.agentToken)
	// A second session with state, a record and an offloaded result.
	bystander := builder.Session(ns, "bystander", "small-window").Build()
	testenv.Must(t, s.c.Create(ctx, bystander))
	waitSessionReady(t, s.c, bystander)
	bystanderSID := bystander.Status.SessionID
	_, err := agentAPI.Compact(ctx, ns, bystander.Name, compactclient.CompactRequest{Messages: s.history[:compaction.AssistantTurns(s.history)[10]], Force: true})
	testenv.Must(t, err)
	bystanderLog := strings.Repeat("the bystander's build log\n", 2000)
	off, err := agentAPI.OffloadToolResult(ctx, ns, bystander.Name, compaction.Message{Role: compaction.RoleTool, ToolCallID: "call_bystander", Content: bystanderLog})
	testenv.Must(t, err)
	if objs := objectsOf(t, s.m, bystanderSID); off.Offloaded == nil || len(objs) < 3 {
		t.Fatalf("the bystander session should have a state, a record and a tool result stored; it has %v (offloaded: %v)", objs, off.Offloaded)
	}

	before := readRecords(t, agentAPI, s.session.Name)
	stateBefore := stateObject(t, s.m, s.sid)
	bucketBefore := bucketSnapshot(t, s.m)
	base := s.mgr.URL + "/v1/namespaces/"
	url := base + ns + "/sessions/" + s.session.Name + "/compact"
	bystanderURL := base + ns + "/sessions/" + bystander.Name

	// Bad bodies, sent as application/json: 400. JSON nested deeper than the decoder's limit
	// (10,000) is refused before it is decoded, wherever it is.
	deepContent := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	deepArguments := strings.Repeat(`{"a":`, 40_000) + "1" + strings.Repeat("}", 40_000)
	bodies := []struct{ name, url, body, says string }{
		{"malformed JSON", url, `{"messages": [`, ""},
		{"unknown role", url, `{"messages": [{"role": "wizard", "content": "hi"}]}`, ""},
		{"orphaned result", url, `{"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_x", "content": "out"}]}`, ""},
		{"unsafe id", url, `{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "call one\\n", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}`, ""},
		{"invalid UTF-8", url, "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}", ""},
		{"unknown field", url, `{"mesages": []}`, ""},
		{"100,000 levels of [ in a message's content", url,
			`{"messages": [{"role": "user", "content": ` + deepContent + `}], "force": true}`, "exceeded max depth"},
		{"40,000 levels of objects in tool-call arguments", url,
			`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "call_deep", "type": "function", "function": {"name": "f", "arguments": ` +
				deepArguments + `}}]}, {"role": "tool", "tool_call_id": "call_deep", "content": "ok"}], "force": true}`, "exceeded max depth"},
		{"100,000 levels of [ in the bystander's tool result", bystanderURL + "/toolresults",
			`{"message": {"role": "tool", "tool_call_id": "call_deep", "content": ` + deepContent + `}}`, "exceeded max depth"},
	}
	for _, b := range bodies {
		r := post(t, s.mgr.HTTPClient(), b.url, s.agentToken, "application/json", b.body)
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, `"reason"`) || !strings.Contains(r.body, b.says) {
			t.Errorf("%s: %d %.300s, want 400 with a JSON reason saying %q", b.name, r.code, r.body, b.says)
		}
	}
	if r := post(t, s.mgr.HTTPClient(), url, s.agentToken, "application/json", `{"messages": [{"role": "user", "content": "`+strings.Repeat("x", 33<<20)+`"}]}`); r.code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d, want 413", r.code)
	}
	unknown := strings.Replace(url, s.session.Name, "no-such-session", 1)
	if r := post(t, s.mgr.HTTPClient(), unknown, s.agentToken, "application/json", `{"messages": [{"role": "user", "content": "hi"}]}`); r.code != http.StatusNotFound {
		t.Errorf("unknown session: %d, want 404", r.code)
	}

	// Bodies that are not JSON by their Content-Type: 415, even when the bytes would be a
	// valid request that writes (a forced compaction, an offload over the threshold).
	compactBody := `{"messages": [{"role": "user", "content": "hi"}], "force": true}`
	offloadBody := `{"message": {"role": "tool", "tool_call_id": "call_media", "content": "` + strings.Repeat("log line\\n", 5000) + `"}}`
	for _, m := range []struct{ url, contentType, body string }{
		{url, "text/plain", compactBody},
		{url, "text/plain;charset=UTF-8", compactBody}, // what fetch() sends for a string body
		{url, "application/x-www-form-urlencoded", compactBody},
		{url, "multipart/form-data; boundary=xyz", "--xyz\r\nContent-Disposition: form-data; name=\"messages\"\r\n\r\n[]\r\n--xyz--\r\n"},
		{url, "application/json; charset=iso-8859-1", compactBody},
		{bystanderURL + "/toolresults", "text/plain", offloadBody},
		{bystanderURL + "/compact", "application/x-www-form-urlencoded", compactBody},
	} {
		r := post(t, s.mgr.HTTPClient(), m.url, s.agentToken, m.contentType, m.body)
		var e compactclient.ErrorResponse
		if r.code != http.StatusUnsupportedMediaType || json.Unmarshal([]byte(r.body), &e) != nil ||
			e.Reason != compactclient.ReasonMediaType || r.header.Get("Accept") != "application/json" {
			t.Errorf("POST %s as %s: %d, Accept %q, %.300s; want 415 %s with Accept: application/json",
				strings.TrimPrefix(m.url, base), m.contentType, r.code, r.header.Get("Accept"), r.body, compactclient.ReasonMediaType)
		}
	}
	// No Content-Type, or application/json in any case with a UTF-8 charset, is JSON: these
	// get past the media type to the body's 400.
	for _, contentType := range []string{"", "Application/JSON; charset=UTF-8"} {
		if r := post(t, s.mgr.HTTPClient(), url, s.agentToken, contentType, `{"mesages": []}`); r.code != http.StatusBadRequest || !strings.Contains(r.body, compactclient.ReasonBadRequest) {
			t.Errorf("Content-Type %q: %d %s, want the body's 400 %s", contentType, r.code, r.body, compactclient.ReasonBadRequest)
		}
	}

	// Hostile paths: another namespace's session with a valid token, traversal in names and
	// IDs (to this session's state and to the bystander's result), a wrong method. Each a
	// clean 4xx with a JSON body.
	hostile := []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "kube-system/sessions/" + s.session.Name + "/compact", http.StatusForbidden},
		{http.MethodGet, ns + "/sessions/" + s.session.Name + "/toolresults/..%2F..%2Fstate", http.StatusNotFound},
		{http.MethodGet, ns + "/sessions/" + s.session.Name + "/toolresults/..%2F" + bystanderSID + "%2Fcall_bystander", http.StatusNotFound},
		{http.MethodGet, ns + "/sessions/" + s.session.Name + "/toolresults/call%20one", http.StatusBadRequest},
		{http.MethodGet, ns + "/sessions/..%2F" + s.session.Name + "/records", http.StatusNotFound},
		{http.MethodDelete, ns + "/sessions/" + s.session.Name + "/records", http.StatusNotFound},
	}
	for _, h := range hostile {
		req, err := http.NewRequest(h.method, base+h.path, nil)
		testenv.Must(t, err)
		req.Header.Set("Authorization", "Bearer "+s.agentToken)
		resp, err := s.mgr.HTTPClient().Do(req)
		testenv.Must(t, err)
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != h.want || !strings.Contains(b.String(), `"reason"`) {
			t.Errorf("%s %s: %d %s, want %d with a JSON reason", h.method, h.path, resp.StatusCode, b.String(), h.want)
		}
	}

	// Reads write nothing either.
	if got, err := agentAPI.GetToolResult(ctx, ns, bystander.Name, "call_bystander"); err != nil || string(got) != bystanderLog {
		t.Errorf("the bystander's tool result read back: %d bytes, %v", len(got), err)
	}
	if after := readRecords(t, agentAPI, s.session.Name); len(after) != len(before) {
		t.Errorf("bad requests changed the records: %d -> %d", len(before), len(after))
	}
	if after := stateObject(t, s.m, s.sid); !bytes.Equal(after, stateBefore) {
		t.Errorf("bad requests changed the stored state")
	}
	if diff := snapshotDiff(bucketBefore, bucketSnapshot(t, s.m)); diff != "" {
		t.Errorf("bad requests changed the bucket (key: before -> after):\n%s", diff)
	}
}

// testConcurrent: concurrent requests for one session on one replica are serialized: every
// compaction's record is kept and each starts from the state the previous one saved. (Forced
// compactions are too quick to overlap across replicas; testTwoReplicas covers that.)
func (s *suite) testConcurrent(t *testing.T) {
	ctx := context.Background()
	sess := builder.Session(ns, "parallel", "small-window").Build()
	testenv.Must(t, s.c.Create(ctx, sess))
	waitSessionReady(t, s.c, sess)
	// The same history n times at once, forced: every request compacts.
	turns := compaction.AssistantTurns(s.history)
	const n = 8
	type result struct {
		resp *compactclient.CompactResponse
		err  error
	}
	results := make(chan result, n)
	api := s.api(s.agentToken)
	for range n {
		go func() {
			resp, err := api.Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: s.history[:turns[20]], Force: true})
			results <- result{resp, err}
		}()
	}
	compactions, maxWatermark := 0, 0
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatalf("concurrent compaction: %v", r.err)
		}
		if r.resp.Record.Tier != compaction.TierNone {
			compactions++
		}
		maxWatermark = max(maxWatermark, r.resp.Watermark)
	}
	trail := readRecords(t, api, sess.Name)
	if len(trail) != compactions {
		t.Errorf("%d records for %d compactions", len(trail), compactions)
	}
	// Serialized, each compaction starts from the state the previous one saved.
	for i := 1; i < len(trail); i++ {
		if trail[i].WatermarkBefore != trail[i-1].WatermarkAfter {
			t.Errorf("record %d starts at watermark %d, the previous one ended at %d: two compactions ran on the same state",
				i, trail[i].WatermarkBefore, trail[i-1].WatermarkAfter)
		}
	}
	var st compaction.State
	testenv.Must(t, json.Unmarshal(stateObject(t, s.m, string(sess.UID)), &st))
	if st.Watermark != maxWatermark {
		t.Errorf("stored watermark %d, the compactions reached %d: an update was lost", st.Watermark, maxWatermark)
	}
}

// testCompactctl: the cluster verbs read the same records and results, with the token of
// the kubeconfig's current context.
func (s *suite) testCompactctl(t *testing.T, r replayed) {
	bin := testenv.Build(t, "./cmd/compactctl")
	kubeconfig := s.cl.TokenKubeconfig(s.agentToken)
	run := func(args ...string) string {
		t.Helper()
		args = append([]string{args[0], "--server", s.mgr.URL, "--ca-file", s.mgr.CAFile, "--kubeconfig", kubeconfig}, args[1:]...)
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("compactctl %v: %v", args, err)
		}
		return string(out)
	}
	lines := strings.Count(run("records", ns+"/"+s.session.Name), "\n")
	if lines != len(r.records) {
		t.Errorf("compactctl records: %d lines, want %d", lines, len(r.records))
	}
	for id := range r.offloaded {
		if got := run("tool-result", ns+"/"+s.session.Name, id); got != r.originals[id] {
			t.Errorf("compactctl tool-result %s: %d bytes, want %d", id, len(got), len(r.originals[id]))
		}
		break
	}
}

// testMetrics scrapes the manager's /metrics (HTTPS, authorized like Prometheus would be).
func (s *suite) testMetrics(t *testing.T) {
	ctx := context.Background()
	testenv.Must(t, s.c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-reads-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: operator.MetricsReader},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "agent"}},
	}))
	// The metrics are served with the API's certificate: verified with the published CA,
	// as the chart's ServiceMonitor does.
	hc := s.mgr.HTTPClient()
	// The metrics endpoint checks tokens for the Kubernetes API's audience, as Prometheus's
	// are; the agent's token for the compaction API is not one.
	scrapeToken := s.cl.Token(ns, "agent")
	var body string
	testenv.Eventually(t, waitFor, "metrics readable", func() (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.mgr.MetricsAddr+"/metrics", nil)
		testenv.Must(t, err)
		req.Header.Set("Authorization", "Bearer "+scrapeToken)
		resp, err := hc.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		body = b.String()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	// The manager restarted halfway, so these count the second half of the replay.
	for _, want := range []string{
		`compaction_compactions_total{tier="Warn"}`,
		`compaction_api_requests_total{code="200",route="compact"}`,
		`compaction_api_requests_total{code="200",route="toolresults"}`,
		`compaction_api_request_duration_seconds_bucket{route="compact"`,
		`compaction_summarizer_duration_seconds_count{summarizer="extractive"}`,
		`compaction_tokens_saved_total`,
		`compaction_sessions{ready="true",tier=`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// testStaleWatermark: a delta request whose watermark is not the session's is a 409.
func (s *suite) testStaleWatermark(t *testing.T) {
	_, err := s.api(s.agentToken).Compact(context.Background(), ns, s.session.Name, compactclient.CompactRequest{
		Messages: s.history[:1], Watermark: 3, PrefixHash: "not-the-hash"})
	if !compactclient.IsStaleWatermark(err) {
		t.Errorf("delta request with a wrong prefix hash: %v, want 409 StaleWatermark", err)
	}
}

// checkDeletion: 7. deleting the session deletes every object of it.
func (s *suite) checkDeletion() {
	t, ctx := s.t, context.Background()
	// 7. Deleting the session deletes every object of it.
	if n := len(objectsOf(t, s.m, s.sid)); n == 0 {
		t.Fatal("no stored objects for the session before deletion")
	}
	testenv.Must(t, s.c.Delete(ctx, s.session))
	testenv.Eventually(t, waitFor, "session deleted", func() (bool, string) {
		err := s.c.Get(ctx, client.ObjectKeyFromObject(s.session), s.session)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if left := objectsOf(t, s.m, s.sid); len(left) != 0 {
		t.Errorf("%d objects left after deletion: %v", len(left), left[:min(5, len(left))])
	}
}

func readRecords(t *testing.T, cc *compactclient.Client, name string) []compaction.CompactionRecord {
	t.Helper()
	var buf bytes.Buffer
	testenv.Must(t, cc.Records(context.Background(), ns, name, &buf))
	var out []compaction.CompactionRecord
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r compaction.CompactionRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("record line %d: %v", len(out)+1, err)
		}
		out = append(out, r)
	}
	testenv.Must(t, sc.Err())
	return out
}

// response is a raw reply of the API.
type response struct {
	code   int
	header http.Header
	body   string
}

// post sends body with the agent's token and contentType ("": no Content-Type header).
func post(t *testing.T, hc *http.Client, url, token, contentType, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	testenv.Must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := hc.Do(req)
	testenv.Must(t, err)
	defer func() { _ = resp.Body.Close() }()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return response{resp.StatusCode, resp.Header, b.String()}
}

func expectAPIError(t *testing.T, err error, code int) {
	t.Helper()
	var ae *compactclient.APIError
	if !errors.As(err, &ae) || ae.Code != code {
		t.Errorf("error = %v, want HTTP %d", err, code)
	}
}

func s3Client(t *testing.T, m *testenv.MinIO) *minio.Client {
	t.Helper()
	mc, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	testenv.Must(t, err)
	return mc
}

func objectsOf(t *testing.T, m *testenv.MinIO, sid string) []string {
	t.Helper()
	var keys []string
	for obj := range s3Client(t, m).ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		testenv.Must(t, obj.Err)
		if strings.Contains(obj.Key, "/"+sid+"/") || strings.HasSuffix(obj.Key, "/"+sid+".json") {
			keys = append(keys, obj.Key)
		}
	}
	return keys
}

// bucketSnapshot is every object in the bucket: key -> ETag, size and modification time.
func bucketSnapshot(t *testing.T, m *testenv.MinIO) map[string]string {
	t.Helper()
	out := map[string]string{}
	for obj := range s3Client(t, m).ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		testenv.Must(t, obj.Err)
		out[obj.Key] = fmt.Sprintf("%s %d %s", obj.ETag, obj.Size, obj.LastModified.UTC().Format(time.RFC3339Nano))
	}
	return out
}

// snapshotDiff lists the keys added, removed or changed between two bucket snapshots.
func snapshotDiff(before, after map[string]string) string {
	var lines []string
	for k, v := range before {
		if w, ok := after[k]; !ok || w != v {
			lines = append(lines, fmt.Sprintf("%s: %s -> %s", k, v, w))
		}
	}
	for k, w := range after {
		if _, ok := before[k]; !ok {
			lines = append(lines, fmt.Sprintf("%s: (none) -> %s", k, w))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func stateObject(t *testing.T, m *testenv.MinIO, sid string) []byte {
	t.Helper()
	obj, err := s3Client(t, m).GetObject(context.Background(), bucket, "e2e/"+compaction.StateKey(sid), minio.GetObjectOptions{})
	testenv.Must(t, err)
	defer func() { _ = obj.Close() }()
	var b bytes.Buffer
	_, err = b.ReadFrom(obj)
	testenv.Must(t, err)
	return b.Bytes()
}

func waitSessionReady(t *testing.T, c client.Client, s *compactionv1alpha1.AgentSession) {
	t.Helper()
	testenv.Eventually(t, waitFor, s.Name+" Ready", func() (bool, string) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(s.Status.Conditions, compactionv1alpha1.ConditionReady), fmt.Sprintf("%+v", s.Status.Conditions)
	})
}

// onTurnFastUsage configures the manager of the main e2e run: usage written within 100 ms,
// and the LLM summarizer called on the turn that crosses Soft or Full.
func onTurnFastUsage(c *configv1alpha1.Configuration) {
	c.API.UsageInterval = operator.Duration(100 * time.Millisecond)
	c.API.SummariesOffTurn = ptr.To(false)
}
