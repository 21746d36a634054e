package compactapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// compactedOnce compacts a short history of the session's conversation with force (the
// manual /compact: Emergency, whatever the usage), so its watermark moves and what it
// passed is archived, and returns the history and the watermark.
func compactedOnce(t *testing.T, e *conversationEnv, conversation, mark string) ([]compaction.Message, int) {
	t.Helper()
	history := markedHistory(mark, 8)
	resp, err := e.api.Compact(context.Background(), conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: history, Force: true},
		compactclient.InConversation(conversation))
	if err != nil {
		t.Fatalf("forced compaction of %q: %v", conversation, err)
	}
	if resp.Watermark < 3 || resp.Record.Archive == "" || resp.Record.Error != compaction.EmergencyError {
		t.Fatalf("forced compaction of %q: watermark %d, archive %q, error %q", conversation, resp.Watermark, resp.Record.Archive, resp.Record.Error)
	}
	return history, resp.Watermark
}

// checkHistory: every message of resp is the history's message at its index, and the
// indices are want.
func checkHistory(t *testing.T, what string, resp *compactclient.HistoryResponse, history []compaction.Message, want []int) {
	t.Helper()
	got := make([]int, 0, len(resp.Messages))
	for _, m := range resp.Messages {
		got = append(got, m.Index)
		if m.Index >= len(history) || !m.Message.Equal(&history[m.Index]) || m.Role != history[m.Index].Role {
			t.Errorf("%s: message %d is not the history's: %+v", what, m.Index, m.Message)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: indices %v, want %v", what, got, want)
	}
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestHistoryRecallAndReset: issue 30. Through the whole API on a real kube-apiserver and
// MinIO: a compaction archives what it passed (archive/{uid}/..., under the session's
// prefix); GET .../history reads a range of it back, message for message as the agent sent
// it, in pages; GET .../history/search finds messages by substring or regex, with their
// index and role; each conversation reads its own archive only; bad parameters are a 400
// that names them and change nothing; POST .../reset makes the next turn's view the full
// history, ends the trail with a Reset record and keeps the archive; deleting the session's
// objects, as the finalizer does, removes the archives too.
func TestHistoryRecallAndReset(t *testing.T) {
	e := startConversationEnv(t)
	// The replica trusts its kept state for delta turns (as the manager does by default):
	// a reset must not leave this replica answering from the forgotten one.
	e.server.cfg.StateTrust = time.Minute
	ctx := context.Background()
	uid := string(e.sess.UID)
	history, wm := compactedOnce(t, e, "", "ALPHA")
	subHistory, subWM := compactedOnce(t, e, "sub", "BRAVO")
	def := &compactclient.Session{Client: e.api, Namespace: conversationNS, Name: e.sess.Name}
	sub := &compactclient.Session{Client: e.api, Namespace: conversationNS, Name: e.sess.Name, Conversation: "sub"}

	// The whole archive, a range, and pages.
	resp, err := def.History(ctx, compactclient.HistoryRange{})
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "whole", resp, history, span(1, wm))
	if resp.Truncated || resp.Next != wm || len(resp.Messages) == 0 || resp.Messages[0].Archive != (compaction.ArchiveSpan{From: 1, To: wm}).String() {
		t.Errorf("whole: truncated %v, next %d, archive %q; want all of 1-%d", resp.Truncated, resp.Next, resp.Messages[0].Archive, wm)
	}
	resp, err = def.History(ctx, compactclient.HistoryRange{From: 3, To: 6})
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "range 3-6", resp, history, []int{3, 4, 5})
	var paged []int
	for from, pages := 0, 0; ; pages++ {
		resp, err = def.History(ctx, compactclient.HistoryRange{From: from, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		checkHistory(t, "page", resp, history, span(max(from, 1), min(max(from, 1)+2, wm)))
		for _, m := range resp.Messages {
			paged = append(paged, m.Index)
		}
		if !resp.Truncated || pages > wm {
			break
		}
		from = resp.Next
	}
	if !slices.Equal(paged, span(1, wm)) {
		t.Errorf("pages of 2 gave %v, want %v", paged, span(1, wm))
	}

	// Search: substring (case-insensitive, literal), regex, and the other conversation's.
	resp, err = def.SearchHistory(ctx, compactclient.HistorySearch{Text: "step 2 OF alpha: reading"})
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "search", resp, history, []int{6})
	if resp.Messages[0].Role != compaction.RoleAssistant {
		t.Errorf("search: role %s, want assistant", resp.Messages[0].Role)
	}
	resp, err = def.SearchHistory(ctx, compactclient.HistorySearch{Text: `alpha output line [01]\n`, Regex: true})
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "regex search", resp, history, []int{3, 5})
	resp, err = def.SearchHistory(ctx, compactclient.HistorySearch{Text: "BRAVO"})
	if err != nil || len(resp.Messages) != 0 {
		t.Errorf("the default conversation finds another conversation's messages: %+v, %v", resp, err)
	}
	resp, err = sub.SearchHistory(ctx, compactclient.HistorySearch{Text: "bravo output line 0"})
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "search of conversation sub", resp, subHistory, []int{3})
	resp, err = sub.History(ctx, compactclient.HistoryRange{})
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "conversation sub", resp, subHistory, span(1, subWM))

	checkBadHistoryParams(t, e)

	// Reset: the view is the full history again, the trail ends with Reset, the archive stays.
	view, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: history})
	if err != nil || view.Record.WatermarkBefore != wm || !strings.Contains(viewText(view.Messages), compaction.CompactionHeader) {
		t.Fatalf("before the reset: %v, watermark %d; want the compaction message", err, view.Record.WatermarkBefore)
	}
	reset, err := def.Reset(ctx)
	if err != nil || reset.Record == nil || !reset.Record.Reset || reset.Record.WatermarkBefore != wm || reset.RecordError != "" {
		t.Fatalf("reset: %+v, %v", reset, err)
	}
	// A caller that does not know of the reset sends a delta from the old watermark: stale,
	// so it sends the full history.
	delta := append([]compaction.Message{history[0]}, history[wm:]...)
	if _, err := e.api.Compact(ctx, conversationNS, e.sess.Name, compactclient.CompactRequest{Messages: delta, Watermark: view.Watermark,
		PrefixHash: view.PrefixHash}); !compactclient.IsStaleWatermark(err) {
		t.Errorf("a delta from the forgotten watermark after the reset: %v, want 409 %s", err, ReasonStaleWatermark)
	}
	after, err := def.Compact(ctx, history, 0)
	if err != nil || after.Record.Tier != compaction.TierNone || after.Record.WatermarkBefore != 0 || !compaction.EqualMessages(after.Messages, history) {
		t.Fatalf("after the reset: %v, tier %s, watermark %d, %d messages for %d", err, after.Record.Tier, after.Record.WatermarkBefore, len(after.Messages), len(history))
	}
	// Turns that compact nothing leave no record: the trail is the forced compaction, then
	// the reset.
	recs := e.records(t, "")
	if len(recs) != 2 || recs[0].Tier != compaction.TierEmergency || !recs[1].Reset || recs[1].WatermarkBefore != wm {
		t.Errorf("the trail is %d records, want the compaction then the Reset: %+v", len(recs), recs)
	}
	resp, err = def.History(ctx, compactclient.HistoryRange{})
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "after the reset", resp, history, span(1, wm))
	// The other conversation was not reset.
	if v, err := sub.Compact(ctx, subHistory, 0); err != nil || v.Record.WatermarkBefore != subWM {
		t.Errorf("conversation sub after the default one's reset: %v, watermark %d, want %d", err, v.Record.WatermarkBefore, subWM)
	}

	e.checkDeleteSession(t, []string{
		"conv/" + compaction.ArchiveKey(uid, 1, wm),
		"conv/" + compaction.ArchiveKey(compaction.ConversationSessionID(uid, "sub"), 1, subWM),
	})
}

// checkBadHistoryParams: every malformed parameter of the history routes is a 400 naming
// it, and nothing in the bucket changes.
func checkBadHistoryParams(t *testing.T, e *conversationEnv) {
	t.Helper()
	before := e.keys(t)
	base := e.url + "/v1/namespaces/" + conversationNS + "/sessions/" + e.sess.Name
	for _, tc := range []struct{ path, query, names string }{
		{"/history", "from=-1", "from"},
		{"/history", "from=x", "from"},
		{"/history", "from=99999999999999999999999", "from"},
		{"/history", "to=0", "to"},
		{"/history", "from=5&to=5", "to"},
		{"/history", "from=6&to=5", "to"},
		{"/history", "limit=0", "limit"},
		{"/history", "limit=1001", "limit"},
		{"/history", "from=1&from=2", "from"},
		{"/history", "conversation=../x", "conversation"},
		{"/history/search", "", "q"},
		{"/history/search", "q=", "q"},
		{"/history/search", "q=a&q=b", "q"},
		{"/history/search", "q=(unclosed&regex=1", "regular expression"},
		{"/history/search", "q=a{5000}&regex=1", "regular expression"},
		{"/history/search", "q=" + strings.Repeat("a", compaction.MaxHistoryQueryBytes+1), "longer than"},
		{"/history/search", "q=a&regex=yes", "regex"},
		{"/history/search", "q=a&limit=-3", "limit"},
	} {
		u := base + tc.path + "?" + tc.query
		if strings.Contains(tc.query, "(") || strings.Contains(tc.query, "{") {
			q, _ := url.ParseQuery(tc.query)
			u = base + tc.path + "?" + q.Encode()
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var er compactclient.ErrorResponse
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(data, &er) != nil || er.Reason != ReasonBadRequest || !strings.Contains(er.Message, tc.names) {
			t.Errorf("%s?%s: %d %s; want 400 %s naming %q", tc.path, tc.query, resp.StatusCode, data, ReasonBadRequest, tc.names)
		}
	}
	after := e.keys(t)
	if len(after) != len(before) {
		t.Errorf("bad requests changed the bucket: %d keys before, %d after", len(before), len(after))
	}
	for k, etag := range before {
		if after[k] != etag {
			t.Errorf("bad requests changed %s", k)
		}
	}
}

// TestHistoryAuthorization: the history, search and reset routes have the same
// authorization and per-pod isolation as the other routes: a pod's token uses its pod's
// session; another pod's token, an agent of another namespace, an agent without the
// toolresults permission (for reads) or without compact (for reset), and no token are
// refused, and a refused reset changes nothing.
func TestHistoryAuthorization(t *testing.T) {
	e := startConversationEnv(t)
	ctx := context.Background()
	podSession := func(name string) (*compactionv1alpha1.AgentSession, string) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: name}, Spec: corev1.PodSpec{ServiceAccountName: "agent",
			Containers: []corev1.Container{{Name: "agent", Image: "agent:latest"}}}}
		if err := e.c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		sess := e.addSession(t, name)
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(sess), sess); err != nil {
			t.Fatal(err)
		}
		sess.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
		if err := e.c.Update(ctx, sess); err != nil {
			t.Fatal(err)
		}
		return sess, e.mintToken(t, "agent", pod)
	}
	sessA, tokenA := podSession("pod-a")
	_, tokenB := podSession("pod-b")
	a, b := e.client(t, tokenA), e.client(t, tokenB)

	// Pod A compacts its session, so there is an archive and a state to protect.
	history := markedHistory("SECRET", 8)
	resp, err := a.Compact(ctx, conversationNS, sessA.Name, compactclient.CompactRequest{Messages: history, Force: true})
	if err != nil || resp.Record.Archive == "" {
		t.Fatalf("pod A's forced compaction: %v", err)
	}
	if got, err := a.History(ctx, conversationNS, sessA.Name, compactclient.HistoryRange{}); err != nil || len(got.Messages) == 0 {
		t.Fatalf("pod A reads its own archive: %+v, %v", got, err)
	}
	if got, err := a.SearchHistory(ctx, conversationNS, sessA.Name, compactclient.HistorySearch{Text: "secret output"}); err != nil || len(got.Messages) == 0 {
		t.Fatalf("pod A searches its own archive: %+v, %v", got, err)
	}

	// Another namespace's agent, with the agent role there.
	const otherNS = "other"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: otherNS}}))
	must(e.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: otherNS, Name: "agent"}}))
	must(e.c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: otherNS, Name: "agent"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{compactionv1alpha1.GroupVersion.Group}, Resources: []string{"agentsessions/compact", "agentsessions/toolresults", "agentsessions/records"},
		Verbs: []string{"create", "get"}}}}))
	must(e.c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: otherNS, Name: "agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: otherNS, Name: "agent"}}}))
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{compactclient.DefaultTokenAudience}, ExpirationSeconds: ptr.To[int64](3600)}}
	must(e.c.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: otherNS, Name: "agent"}}, tr))
	other := e.client(t, tr.Status.Token)

	// An agent of the namespace allowed records only: not the conversation content.
	must(e.c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: "records-only"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{compactionv1alpha1.GroupVersion.Group}, Resources: []string{"agentsessions/records"}, Verbs: []string{"get"}}}}))
	must(e.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: "auditor"}}))
	must(e.c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: conversationNS, Name: "auditor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "records-only"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: conversationNS, Name: "auditor"}}}))
	// The default session is owned by no pod: only RBAC stands between the auditor and it.
	auditor := e.client(t, e.mintToken(t, "auditor", nil))
	if err := auditor.Records(ctx, conversationNS, e.sess.Name, io.Discard); err != nil {
		t.Fatalf("the auditor reads records: %v", err)
	}

	before := e.keys(t)
	refused := func(who string, c *compactclient.Client, name string, code int) {
		t.Helper()
		calls := map[string]func() error{
			"history": func() error {
				_, err := c.History(ctx, conversationNS, name, compactclient.HistoryRange{})
				return err
			},
			"search": func() error {
				_, err := c.SearchHistory(ctx, conversationNS, name, compactclient.HistorySearch{Text: "secret"})
				return err
			},
			"reset": func() error {
				_, err := c.Reset(ctx, conversationNS, name)
				return err
			},
		}
		for route, call := range calls {
			var ae *compactclient.APIError
			if err := call(); !errors.As(err, &ae) || ae.Code != code {
				t.Errorf("%s: %s of %s: %v, want %d", who, route, name, err, code)
			}
		}
	}
	refused("pod B's token", b, sessA.Name, http.StatusForbidden)
	refused("another namespace's agent", other, sessA.Name, http.StatusForbidden)
	refused("no token", e.client(t, ""), sessA.Name, http.StatusUnauthorized)
	refused("an agent allowed records only", auditor, e.sess.Name, http.StatusForbidden)
	if _, err := b.History(ctx, conversationNS, sessA.Name, compactclient.HistoryRange{}); err == nil || !strings.Contains(err.Error(), "belongs to pod") {
		t.Errorf("pod B's history read of pod A's session: %v, want a 403 that says why", err)
	}
	after := e.keys(t)
	for k, etag := range before {
		if after[k] != etag {
			t.Errorf("refused requests changed %s", k)
		}
	}
	if len(after) != len(before) {
		t.Errorf("refused requests changed the bucket: %d keys, were %d", len(after), len(before))
	}
	// Pod A's state is as it was: a delta from its watermark is still current.
	delta := append([]compaction.Message{history[0]}, history[resp.Watermark:]...)
	if _, err := a.Compact(ctx, conversationNS, sessA.Name, compactclient.CompactRequest{Messages: delta,
		Watermark: resp.Watermark, PrefixHash: resp.PrefixHash}); err != nil {
		t.Errorf("pod A's delta after refused resets: %v", err)
	}
	var ae *compactclient.APIError
	if _, err := a.History(ctx, conversationNS, "nobody", compactclient.HistoryRange{}); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("history of a session that does not exist: %v, want 404", err)
	}
	if _, err := a.Reset(ctx, conversationNS, sessA.Name); err != nil {
		t.Errorf("pod A resets its own session: %v", err)
	}
}
