package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

const (
	// replicasPrefix is the key prefix of the two-replica policy in the bucket.
	replicasPrefix = "replicas"
	// replicasWindow is the two-replica policy's window. With every message cut to
	// replicasMaxContent bytes no turn adds more than about 1,750 tokens (12% of it), so a
	// prefix of the history lands in Soft or Full without jumping to Emergency.
	replicasWindow     = 14000
	replicasMaxContent = 6000
	replicasRounds     = 8
	// replicasCeiling is the highest usage a round sends: below Emergency (0.95), which
	// would truncate without calling the summarizer. The test computes the usage as the
	// engine does, so the margin only has to be above a turn (12%) over the Full threshold.
	replicasCeiling = 0.94
	// partnerWait bounds how long the first summarizer call of a round waits for the other
	// replica's; the round then fails as not overlapping. Generous: the machine is shared.
	partnerWait = 30 * time.Second
)

// testTwoReplicas: two replicas of the manager compact one session at the same time, round
// after round, each with a history in Soft or Full. The summarizer holds the first call of
// a round until the other replica's call arrives, so both compactions have loaded the same
// stored state before either saves: with conditional state writes the one that saves
// second gets a conflict and runs again on the new state; without, it overwrites the first.
// It checks what a lost update would break, as the agent and an auditor see it:
//   - the record trail is one chain: each record starts from the watermark the previous one
//     ended at, and there is one record per compaction answered above TierNone;
//   - the anchors are one lineage: the fake summarizer writes into execution_progress the
//     previous anchors' list of summarizer calls plus its own, so each summarizing record
//     must carry the list of the one before it plus one call, and the stored state every
//     answered summary's call;
//   - the stored state is the last record's (watermark, prefix hash, anchors);
//   - each tool result was offloaded by one compaction, and every offloaded result the
//     records or the state name is in the bucket under its key, byte for byte.
func (s *suite) testTwoReplicas(t *testing.T) {
	ctx := context.Background()
	llm := newPairingLLM(t)
	testenv.Must(t, s.c.Create(ctx, builder.CredentialsSecret(ns, "replicas-llm", map[string]string{"apiKey": "sk-test"})))
	s.cl.CreateMinIOPolicy(ns, "replicas", replicasPrefix, s.m, replicasWindow, func(spec *compactionv1alpha1.CompactionPolicySpec) {
		spec.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
			BaseURL: llm.srv.URL + "/v1", Model: "test-model", TimeoutSeconds: int32(2 * partnerWait / time.Second),
			APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: "replicas-llm"}, Key: "apiKey"},
		}}
	})
	sess := s.cl.CreateReadySession(ns, "two-replicas", "replicas")
	sid := sess.Status.SessionID

	// A second replica serves the API too; it is not the controllers' leader.
	second := s.cl.StartManager(s.bin, func(c *configv1alpha1.Configuration) { c.API.SummariesOffTurn = ptr.To(false) })
	t.Cleanup(func() { _ = second.Stop(20 * time.Second) })
	// Both replicas serve the certificate of one CA: the bundle the first published verifies
	// the second.
	api2, err := compactclient.New(second.URL, compactclient.WithToken(s.agentToken), compactclient.WithCAPool(s.mgr.CAPool))
	testenv.Must(t, err)
	replicas := [2]*compactclient.Client{s.api(s.agentToken), api2}
	for i, cc := range replicas {
		testenv.Eventually(t, waitFor, fmt.Sprintf("replica %d serves the session", i+1), func() (bool, string) {
			err := cc.Records(ctx, ns, sess.Name, io.Discard)
			return err == nil, fmt.Sprint(err)
		})
	}

	history, originals := cappedHistory(s.history, replicasMaxContent)
	turns := compaction.AssistantTurns(history)
	cfg := compaction.DefaultConfig(replicasWindow)
	var answered []*compaction.CompactionRecord // compactions above TierNone, as answered
	next := 0                                   // index in turns the next round starts from
	for round := range replicasRounds {
		st := loadStateAt(t, s.m, replicasPrefix, sid)
		usage := func(n int) float64 { return cfg.Usage(compaction.EstimateTokens(viewOf(history[:n], st))) }
		// The shortest prefix at the round's target (Soft on even rounds, Full on odd ones),
		// and one turn more for the other replica when that stays under the ceiling and
		// within the tail the winner keeps verbatim (a history shorter than the other's
		// watermark would be a reset, not a race).
		target := cfg.SoftThreshold + 0.02
		if round%2 == 1 {
			target = cfg.FullThreshold + 0.01
		}
		i := next
		for i < len(turns) && usage(turns[i]) < target {
			i++
		}
		if i == len(turns) || usage(turns[i]) >= replicasCeiling {
			t.Fatalf("round %d: no prefix of the history between %.2f and %.2f of the window from turn %d (state at watermark %d)",
				round, target, replicasCeiling, next, st.Watermark)
		}
		lens := [2]int{turns[i], turns[i]}
		if i+1 < len(turns) && turns[i+1]-turns[i] < cfg.MinTailMessages && usage(turns[i+1]) < replicasCeiling {
			lens[round%2] = turns[i+1] // the longer history goes to either replica in turn
			i++
		}
		next = i + 1

		llm.arm(round)
		type result struct {
			resp *compactclient.CompactResponse
			err  error
		}
		var results [2]result
		var wg sync.WaitGroup
		for r := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := replicas[r].Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: history[:lens[r]]})
				results[r] = result{resp, err}
			}()
		}
		wg.Wait()
		paired := llm.disarm()
		for r, res := range results {
			if res.err != nil {
				t.Fatalf("round %d, replica %d (%d messages): %v", round, r+1, lens[r], res.err)
			}
		}
		if !paired {
			t.Errorf("round %d: the two replicas' summarizer calls were not in flight together: the round proves nothing", round)
		}
		started := make([]string, 0, len(results))
		for r, res := range results {
			rec := res.resp.Record
			call := ""
			if l := lineage(rec.Anchors); len(l) > 0 {
				call = l[len(l)-1]
			}
			started = append(started, fmt.Sprintf("replica %d: %d messages at %.2f -> %s from watermark %d to %d %s",
				r+1, lens[r], usage(lens[r]), rec.Tier, rec.WatermarkBefore, rec.WatermarkAfter, call))
			if rec.Error != "" {
				t.Errorf("round %d, replica %d: record error %q", round, r+1, rec.Error)
			}
			if rec.Tier != compaction.TierNone {
				answered = append(answered, rec)
			}
		}
		t.Logf("round %d (state at watermark %d): %s", round, st.Watermark, strings.Join(started, "; "))
		// Both loaded the state at st.Watermark: exactly one may have compacted from it,
		// the other must have run again on the state the first saved.
		a, b := results[0].resp.Record, results[1].resp.Record
		if a.Tier != compaction.TierNone && b.Tier != compaction.TierNone && a.WatermarkBefore == b.WatermarkBefore {
			t.Errorf("round %d: both replicas compacted from watermark %d: one saved over the other's state", round, a.WatermarkBefore)
		}
		if won := (a.Tier == compaction.TierSoft || a.Tier == compaction.TierFull) && a.WatermarkBefore == st.Watermark ||
			(b.Tier == compaction.TierSoft || b.Tier == compaction.TierFull) && b.WatermarkBefore == st.Watermark; !won {
			t.Errorf("round %d: no replica answered a Soft or Full compaction from the stored state's watermark %d", round, st.Watermark)
		}
	}
	t.Logf("%d summarizer calls for %d answered compactions in %d rounds", llm.count(), len(answered), replicasRounds)

	trail := readRecords(t, replicas[0], sess.Name)
	st := loadStateAt(t, s.m, replicasPrefix, sid)
	checkChain(t, trail, answered)
	checkLineage(t, trail, answered, st)
	checkOffloads(t, s.m, sid, trail, st, originals)
}

// checkChain: one record per answered compaction, and each starts where the previous ended.
// The trail is in record ID order, which is the order the compactions started in; a
// compaction that lost a conflict runs again, with a new ID, after the winner saved, so
// with conditional writes this is also the order in which the state was saved.
func checkChain(t *testing.T, trail []compaction.CompactionRecord, answered []*compaction.CompactionRecord) {
	t.Helper()
	ids := map[string]bool{}
	for _, r := range trail {
		ids[r.ID] = true
	}
	if len(trail) != len(answered) {
		t.Errorf("%d records, the replicas answered %d compactions above TierNone", len(trail), len(answered))
	}
	for _, rec := range answered {
		if !ids[rec.ID] {
			t.Errorf("compaction %s (%s) was answered but has no record", rec.ID, rec.Tier)
		}
	}
	if len(trail) > 0 && trail[0].WatermarkBefore != 0 {
		t.Errorf("the first record starts at watermark %d, want 0", trail[0].WatermarkBefore)
	}
	for i := 1; i < len(trail); i++ {
		if trail[i].WatermarkBefore != trail[i-1].WatermarkAfter {
			t.Errorf("record %d (%s) starts at watermark %d, record %d (%s) ended at %d: two compactions ran on the same state",
				i, trail[i].Tier, trail[i].WatermarkBefore, i-1, trail[i-1].Tier, trail[i-1].WatermarkAfter)
		}
	}
}

// checkLineage: each summarizing record's anchors extend the previous one's by its own
// summarizer call; the stored state holds the last one's anchors, so every answered
// summary's call.
func checkLineage(t *testing.T, trail []compaction.CompactionRecord, answered []*compaction.CompactionRecord, st *compaction.State) {
	t.Helper()
	var last []string
	var lastAnchors []compaction.Anchor
	for i, r := range trail {
		l := lineage(r.Anchors)
		if r.Tier != compaction.TierSoft && r.Tier != compaction.TierFull {
			continue
		}
		if len(l) == 0 {
			t.Errorf("record %d (%s) carries no summarizer call in its anchors: %v", i, r.Tier, r.Anchors)
			continue
		}
		if !slices.Equal(l[:len(l)-1], last) {
			t.Errorf("record %d (%s, summarizer call %s) merged its anchors onto the calls [%s], but the summary recorded before it left [%s]: anchor state was lost",
				i, r.Tier, l[len(l)-1], strings.Join(l[:len(l)-1], " "), strings.Join(last, " "))
		}
		last, lastAnchors = l, r.Anchors
	}
	if len(last) == 0 {
		t.Fatal("no record summarized: the histories do not reach Soft or Full")
	}
	stored := lineage(st.LastAnchors)
	for _, rec := range answered {
		if l := lineage(rec.Anchors); len(l) > 0 && !slices.Contains(stored, l[len(l)-1]) {
			t.Errorf("compaction %s (%s, summarizer call %s) was answered to the agent, but its anchors are not in the stored state (calls [%s])",
				rec.ID, rec.Tier, l[len(l)-1], strings.Join(stored, " "))
		}
	}
	if !slices.Equal(st.LastAnchors, lastAnchors) {
		t.Errorf("stored anchors %v, the last summarizing record's %v", st.LastAnchors, lastAnchors)
	}
	if n := len(trail); n > 0 && (st.Watermark != trail[n-1].WatermarkAfter || st.PrefixHash != trail[n-1].PrefixHash) {
		t.Errorf("stored state at watermark %d (%.12s), the last record ended at %d (%.12s)",
			st.Watermark, st.PrefixHash, trail[n-1].WatermarkAfter, trail[n-1].PrefixHash)
	}
}

// checkOffloads: every tool result was offloaded by one compaction only, and each one the
// records or the stored state name is in the bucket at its key with its original content.
func checkOffloads(t *testing.T, m *testenv.MinIO, sid string, trail []compaction.CompactionRecord, st *compaction.State, originals map[string]string) {
	t.Helper()
	ctx := context.Background()
	mc := s3Client(t, m)
	prefix := replicasPrefix + "/"
	stored := map[string]bool{}
	for obj := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix + "tool_results/" + sid + "/", Recursive: true}) {
		testenv.Must(t, obj.Err)
		stored[obj.Key] = true
	}
	refs := map[string]string{} // tool call ID -> ref, from the records and the state
	by := map[string]string{}   // tool call ID -> the record that offloaded it
	for i, r := range trail {
		for _, o := range r.Offloaded {
			if prev, ok := by[o.ToolCallID]; ok {
				t.Errorf("tool result %s offloaded by two compactions, %s and record %d (%s): the second ran on a state that did not know of the first",
					o.ToolCallID, prev, i, r.Tier)
			}
			by[o.ToolCallID] = fmt.Sprintf("record %d (%s)", i, r.Tier)
			refs[o.ToolCallID] = o.Ref
		}
	}
	for id, o := range st.Offloaded {
		refs[id] = o.Ref
	}
	if len(by) == 0 {
		t.Error("no compaction offloaded a tool result: the histories hold none over the offload threshold")
	}
	for id, ref := range refs {
		key := prefix + compaction.ToolResultKey(sid, id)
		if want := "s3://" + bucket + "/" + key; ref != want {
			t.Errorf("tool result %s: ref %q, want %q", id, ref, want)
		}
		if !stored[key] {
			t.Errorf("tool result %s: %s is not in the bucket", id, key)
			continue
		}
		obj, err := mc.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		testenv.Must(t, err)
		var b bytes.Buffer
		_, err = b.ReadFrom(obj)
		_ = obj.Close()
		testenv.Must(t, err)
		if b.String() != originals[id] {
			t.Errorf("tool result %s: %d bytes stored, the original has %d", id, b.Len(), len(originals[id]))
		}
	}
	// A compaction that lost a conflict may have written results that its rerun, on the
	// winner's state, no longer offloads: harmless (same key, same content, deleted with
	// the session), so only counted.
	unnamed := 0
	for key := range stored {
		named := false
		for id := range refs {
			named = named || key == prefix+compaction.ToolResultKey(sid, id)
		}
		if !named {
			unnamed++
		}
	}
	t.Logf("%d tool results offloaded by the records, %d kept in the state; %d objects in the bucket, %d of them named by neither",
		len(by), len(st.Offloaded), len(stored), unnamed)
}

// cappedHistory is history with every message's content cut to maxBytes (on a rune
// boundary), and the tool results' contents by call ID.
func cappedHistory(history []compaction.Message, maxBytes int) ([]compaction.Message, map[string]string) {
	out := make([]compaction.Message, len(history))
	originals := map[string]string{}
	for i, m := range history {
		if len(m.Content) > maxBytes {
			m = m.Clone()
			m.Content = strings.ToValidUTF8(m.Content[:maxBytes], "")
		}
		out[i] = m
		if m.Role == compaction.RoleTool {
			originals[m.ToolCallID] = m.Content
		}
	}
	return out, originals
}

// viewOf is the view the engine builds for history on state st: the system messages, the
// pins, the compaction message and the messages after the watermark (the whole history without one).
func viewOf(history []compaction.Message, st *compaction.State) []compaction.Message {
	if st.Watermark == 0 {
		return history
	}
	p := 0
	for p < len(history) && history[p].Role == compaction.RoleSystem {
		p++
	}
	view := append([]compaction.Message(nil), history[:p]...)
	for _, pin := range st.Pins {
		view = append(view, pin.Message)
	}
	view = append(view, compaction.Message{Role: compaction.RoleUser, Content: st.CompactionMessage})
	return append(view, history[st.Watermark:]...)
}

// loadStateAt reads a session's stored state under prefix; none yet is an empty state.
func loadStateAt(t *testing.T, m *testenv.MinIO, prefix, sid string) *compaction.State {
	t.Helper()
	obj, err := s3Client(t, m).GetObject(context.Background(), bucket, prefix+"/"+compaction.StateKey(sid), minio.GetObjectOptions{})
	testenv.Must(t, err)
	defer func() { _ = obj.Close() }()
	var b bytes.Buffer
	if _, err := b.ReadFrom(obj); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return &compaction.State{}
		}
		t.Fatal(err)
	}
	var st compaction.State
	testenv.Must(t, json.Unmarshal(b.Bytes(), &st))
	return &st
}

// callToken is how the fake summarizer names one of its calls in execution_progress.
var callToken = regexp.MustCompile(`^c\d+$`)

// lineage is the list of summarizer calls an execution_progress anchor holds, oldest first.
func lineage(anchors []compaction.Anchor) []string {
	for _, a := range anchors {
		if a.Type != compaction.AnchorExecutionProgress {
			continue
		}
		var out []string
		for _, f := range strings.Fields(a.Content) {
			if callToken.MatchString(f) {
				out = append(out, f)
			}
		}
		return out
	}
	return nil
}

// pairingLLM is an OpenAI-compatible summarizer. Armed for a round, it holds the round's
// first call until a second one arrives (or partnerWait passes), so two compactions are in
// their summarizer call, past loading the state and before saving it, at the same time; then
// it answers them 300 ms and 800 ms later, the first arrival first on even rounds. Its
// answer's execution_progress is the previous anchors' list of calls plus its own.
type pairingLLM struct {
	srv *httptest.Server

	mu       sync.Mutex
	calls    int
	round    int
	armed    bool
	arrivals int
	partner  chan struct{} // closed by the round's second call
	paired   bool
}

func newPairingLLM(t *testing.T) *pairingLLM {
	l := &pairingLLM{}
	l.srv = httptest.NewServer(http.HandlerFunc(l.serve))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *pairingLLM) arm(round int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.round, l.armed, l.arrivals, l.paired, l.partner = round, true, 0, false, make(chan struct{})
}

// disarm ends the round and reports whether its first two calls were in flight together.
func (l *pairingLLM) disarm() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false
	return l.paired
}

func (l *pairingLLM) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

func (l *pairingLLM) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error": {"message": "bad request"}}`, http.StatusBadRequest)
		return
	}
	prompt := req.Messages[len(req.Messages)-1].Content

	l.mu.Lock()
	l.calls++
	call := l.calls
	delay := 300 * time.Millisecond
	if l.armed {
		l.arrivals++
		first := l.arrivals == 1
		if !first {
			l.armed, l.paired = false, true
			close(l.partner)
		}
		if first == (l.round%2 == 1) {
			delay = 800 * time.Millisecond
		}
		partner := l.partner
		l.mu.Unlock()
		if first {
			select {
			case <-partner:
			case <-time.After(partnerWait):
				l.mu.Lock()
				l.armed = false // the round failed; do not hold a late call
				l.mu.Unlock()
			case <-r.Context().Done():
				return
			}
		}
	} else {
		l.mu.Unlock()
	}
	select {
	case <-time.After(delay):
	case <-r.Context().Done():
		return
	}
	calls := strings.TrimSpace(strings.Join(append(previousCalls(prompt), fmt.Sprintf("c%d", call)), " "))
	content := fmt.Sprintf("USER_INTENT: keep the session whole across replicas\nEXECUTION_PROGRESS: calls %s\nKEY_DECISION: call c%d summarized this span\nTRIED_SOLUTION: N/A\nNEXT_STEP: continue the session\n\nSummary: summary written by summarizer call c%d.", calls, call, call)
	body, err := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": content}}}})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// previousCalls reads the list of calls from the previous anchors of a summary prompt.
func previousCalls(prompt string) []string {
	i := strings.Index(prompt, "Previous anchors:\n")
	if i < 0 {
		return nil
	}
	section := prompt[i:]
	if j := strings.Index(section, "\nPrevious summary:"); j >= 0 {
		section = section[:j]
	}
	for line := range strings.SplitSeq(section, "\n") {
		if rest, ok := strings.CutPrefix(line, "- "+string(compaction.AnchorExecutionProgress)+": "); ok {
			return lineage([]compaction.Anchor{{Type: compaction.AnchorExecutionProgress, Content: rest}})
		}
	}
	return nil
}
