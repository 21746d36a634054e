package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// TestAllowedServiceAccounts is issue 28, item 7: a session without a Pod owner is open to
// every agent of its namespace (the compaction-agent role is namespace-wide), and
// spec.allowedServiceAccounts closes it. Against the manager binary on a real kube-apiserver:
//
//   - with no list, agent B (a second ServiceAccount bound to compaction-agent) compacts,
//     offloads into and reads agent A's session: the open default, as documented;
//   - with the list naming agent A, agent B gets 403 on every route, with a message naming the
//     session and the allowed accounts, and nothing stored for the session changes; agent A
//     gets 200; a caller allowed to update agentsessions (an editor) still passes;
//   - the API server refuses a list entry that is not a ServiceAccount name, and more than 32;
//   - on a pod-owned session the list adds accounts and keeps the pod's own token.
func TestAllowedServiceAccounts(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	mgr := cl.StartManager(bin)
	c, ctx := cl.Client, context.Background()
	history := testenv.MustLoad(t, filepath.Join(testenv.RepoRoot(t), "testdata", "long-session.jsonl"))
	turns := compaction.AssistantTurns(history)

	cl.CreateMinIOPolicy(ns, "team", "allowed-sa", m, window, nil)
	a := mgr.APIClient(t, cl.BindAgent(ns, "agent-a"))
	b := mgr.APIClient(t, cl.BindAgent(ns, "agent-b"))
	// The editor holds the compaction-agent role too (the API's RBAC check comes first) and
	// may update the namespace's AgentSessions, as the edit and admin roles allow.
	editor := mgr.APIClient(t, cl.BindAgent(ns, "editor"))
	testenv.Must(t, c.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agentsession-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{compactionv1alpha1.GroupVersion.Group}, Resources: []string{"agentsessions"},
			Verbs: []string{"get", "list", "watch", "update", "patch"}}},
	}))
	testenv.Must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "editor-edits-agentsessions"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agentsession-editor"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "editor"}},
	}))

	sess := cl.CreateReadySession(ns, "agent-a-session", "team")
	sid := string(sess.UID)
	secret := strings.Repeat("agent A's private tool output\n", 1000)
	toolResult := func(id string) compaction.Message {
		return compaction.Message{Role: compaction.RoleTool, ToolCallID: id, Content: secret}
	}

	// No list: the session is open to every agent of the namespace.
	if _, err := a.Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: history[:turns[2]]}); err != nil {
		t.Fatalf("agent A compacts its session: %v", err)
	}
	if _, err := a.OffloadToolResult(ctx, ns, sess.Name, toolResult("call_a")); err != nil {
		t.Fatalf("agent A offloads into its session: %v", err)
	}
	if _, err := b.Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: history[:turns[3]]}); err != nil {
		t.Errorf("no list: agent B compacts agent A's session: %v (the documented open default)", err)
	}
	if got, err := b.GetToolResult(ctx, ns, sess.Name, "call_a"); err != nil || string(got) != secret {
		t.Errorf("no list: agent B reads agent A's tool result: %d bytes, %v (the documented open default)", len(got), err)
	}
	if err := b.Records(ctx, ns, sess.Name, io.Discard); err != nil {
		t.Errorf("no list: agent B reads agent A's records: %v", err)
	}

	// The list names agent A. The manager reads it from its cache: B's first refusal, on a
	// route that stores nothing, says the manager has seen it.
	setAllowed(t, c, sess, "agent-a")
	wantMessage := fmt.Sprintf(`AgentSession %s/%s may only be used by the ServiceAccounts its spec.allowedServiceAccounts lists, ["agent-a"]`, ns, sess.Name)
	testenv.Eventually(t, waitFor, "agent B refused once the list names agent A", func() (bool, string) {
		err := b.Records(ctx, ns, sess.Name, io.Discard)
		return err != nil && strings.Contains(err.Error(), wantMessage), fmt.Sprint(err)
	})
	before := sessionSnapshot(t, m, sid)
	if len(before) == 0 {
		t.Fatal("the session has no stored objects: the comparison below proves nothing")
	}
	refused := map[string]error{}
	_, refused["compact"] = b.Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: history[:turns[5]]})
	_, refused["forced compact"] = b.Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: history[:turns[5]], Force: true})
	_, refused["offload"] = b.OffloadToolResult(ctx, ns, sess.Name, toolResult("call_b"))
	_, refused["read a tool result"] = b.GetToolResult(ctx, ns, sess.Name, "call_a")
	refused["records"] = b.Records(ctx, ns, sess.Name, io.Discard)
	refused["pass-through report"] = b.ReportPassThrough(ctx, ns, sess.Name, compactclient.PassThroughReport{
		Protocol: "openai", Reason: compactclient.PassThroughTooLarge, Count: 1})
	for route, err := range refused {
		expectAPIError(t, err, http.StatusForbidden)
		if err != nil && (!strings.Contains(err.Error(), wantMessage) || !strings.Contains(err.Error(), "system:serviceaccount:"+ns+":agent-b")) {
			t.Errorf("agent B, %s: the 403 should name the session, the allowed accounts and the caller: %v", route, err)
		}
	}
	if diff := snapshotDiff(before, sessionSnapshot(t, m, sid)); diff != "" {
		t.Errorf("agent B's refused requests changed the session's stored objects (key: before -> after):\n%s", diff)
	}
	// Agent A, listed, still gets its answers; the same forced compaction agent B was refused
	// changes what is stored, so the comparison above could see a change.
	if _, err := a.Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: history[:turns[5]], Force: true}); err != nil {
		t.Errorf("agent A, listed, forces a compaction: %v", err)
	}
	if got, err := a.GetToolResult(ctx, ns, sess.Name, "call_a"); err != nil || string(got) != secret {
		t.Errorf("agent A, listed, reads its tool result: %d bytes, %v", len(got), err)
	}
	if snapshotDiff(before, sessionSnapshot(t, m, sid)) == "" {
		t.Error("agent A's forced compaction stored nothing: the comparison of agent B's requests proves nothing")
	}
	// Nor did agent B's pass-through report reach the status: once agent A's forced
	// compaction (after it) is in status, status.passThrough is still empty.
	testenv.Eventually(t, waitFor, "agent A's forced compaction in status", func() (bool, string) {
		testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(sess), sess))
		return ptr.Deref(sess.Status.Compactions.Emergency, 0) > 0, fmt.Sprintf("%+v", sess.Status.Compactions)
	})
	if pt := sess.Status.PassThrough; pt.Requests != nil {
		t.Errorf("agent B's refused pass-through report is in status: %+v", pt)
	}
	// A caller allowed to update the AgentSession, not listed, passes.
	if _, err := editor.Compact(ctx, ns, sess.Name, compactclient.CompactRequest{Messages: history[:turns[6]]}); err != nil {
		t.Errorf("an editor of agentsessions, not listed: %v", err)
	}
	if got, err := editor.GetToolResult(ctx, ns, sess.Name, "call_a"); err != nil || string(got) != secret {
		t.Errorf("an editor of agentsessions reads the tool result: %d bytes, %v", len(got), err)
	}

	t.Run("Validation", func(t *testing.T) {
		for what, list := range map[string][]string{
			"an uppercase name":        {"Agent-A"},
			"a username":               {"system:serviceaccount:" + ns + ":agent-a"},
			"an empty name":            {""},
			"an empty list":            {},
			"33 accounts":              manyAccounts(33),
			"a name of 254 characters": {strings.Repeat("a", 254)},
		} {
			s := builder.Session(ns, "invalid", "team").Build()
			s.Spec.AllowedServiceAccounts = list
			if len(list) == 0 {
				// omitempty drops an empty list: send it as JSON.
				err := c.Patch(ctx, s, client.RawPatch("application/apply-patch+yaml", fmt.Appendf(nil,
					`{"apiVersion":%q,"kind":"AgentSession","metadata":{"namespace":%q,"name":"invalid"},"spec":{"policyRef":{"name":"team"},"allowedServiceAccounts":[]}}`,
					compactionv1alpha1.GroupVersion.String(), ns)), client.FieldOwner("test"))
				if err == nil {
					t.Errorf("%s: accepted", what)
					_ = c.Delete(ctx, s)
				}
				continue
			}
			if err := c.Create(ctx, s); err == nil {
				t.Errorf("%s: accepted", what)
				_ = c.Delete(ctx, s)
			} else if !strings.Contains(err.Error(), "allowedServiceAccounts") {
				t.Errorf("%s: %v, want the field named", what, err)
			}
		}
		ok := builder.Session(ns, "valid", "team").Build()
		ok.Spec.AllowedServiceAccounts = append(manyAccounts(31), "agent.a-1")
		testenv.Must(t, c.Create(ctx, ok))
	})

	t.Run("PodOwned", func(t *testing.T) {
		// agentPod runs as the ServiceAccount "agent"; its session's list names agent A only.
		agentSA := mgr.APIClient(t, cl.BindAgent(ns, "agent")) // a token not bound to the pod
		pod := agentPod(t, c, "agent-pod", "team")
		ps := podSession(t, c, pod)
		p := mgr.APIClient(t, cl.PodToken(ns, pod.Name))
		setAllowed(t, c, ps, "agent-a")
		// The pod controller brings the rest of the spec in line with the pod's annotations;
		// it keeps the list.
		time.Sleep(3 * time.Second)
		var got compactionv1alpha1.AgentSession
		testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(ps), &got))
		if !slices.Equal(got.Spec.AllowedServiceAccounts, []string{"agent-a"}) {
			t.Fatalf("the pod's session lost its list: %+v", got.Spec)
		}
		small := compactclient.CompactRequest{Messages: history[:turns[2]]}
		testenv.Eventually(t, waitFor, "agent B refused on the pod's session with the list", func() (bool, string) {
			err := b.Records(ctx, ns, ps.Name, io.Discard)
			return err != nil && strings.Contains(err.Error(), "spec.allowedServiceAccounts") &&
				strings.Contains(err.Error(), fmt.Sprintf("the token of pod %q", pod.Name)), fmt.Sprint(err)
		})
		if _, err := p.Compact(ctx, ns, ps.Name, small); err != nil {
			t.Errorf("the pod's own token, its ServiceAccount not listed: %v", err)
		}
		if _, err := a.Compact(ctx, ns, ps.Name, small); err != nil {
			t.Errorf("agent A, listed, on the pod's session: %v", err)
		}
		_, err := agentSA.Compact(ctx, ns, ps.Name, small)
		expectAPIError(t, err, http.StatusForbidden)
	})
}

// setAllowed sets the session's spec.allowedServiceAccounts.
func setAllowed(t *testing.T, c client.Client, s *compactionv1alpha1.AgentSession, accounts ...string) {
	t.Helper()
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		s.Spec.AllowedServiceAccounts = accounts
		return c.Update(context.Background(), s)
	}))
}

// manyAccounts is n distinct ServiceAccount names.
func manyAccounts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("agent-%d", i)
	}
	return out
}
