package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
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

// The admission policy and binding config/default installs, and the access key ID of a Secret
// in kube-system that no policy names.
const (
	statusPolicyBinding = "compaction-operator-agentsession-status"
	stolenKey           = "AKIASTOLENFROMKUBESYSTEM"
)

// TestStatusIsNotTrusted is issue 14, vulnerability 1: an AgentSession's status is a report,
// never an input. With config/default installed and the manager binary running as its
// ServiceAccount:
//
//   - (c) the ValidatingAdmissionPolicy refuses a status write by a namespace admin (a
//     wildcard Role, which RBAC lets write agentsessions/status) and by a cluster admin, and
//     lets the operator's own status writes through;
//   - (a) a session whose status.sessionID names another session's UID compacts, reads its
//     records and tool results, and is deleted without reading, changing or deleting a byte of
//     the other session;
//   - (b) a session whose status.records names a Secret in kube-system and an endpoint the
//     attacker runs never makes the operator send that Secret's key, neither from /compact
//     nor from the deletion's garbage collection.
//
// For (a) and (b) the binding of the admission policy is deleted (a cluster older than 1.30,
// or one that does not install it) and the controllers are paused (another holder takes the
// leader election Lease; the compaction API needs no leader), so the tampered status is what
// the API and the finalizer find, not one the controller has already put right.
func TestStatusIsNotTrusted(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	trap := testenv.StartCredentialTrap(t)
	mgr := cl.StartManager(bin, func(c *configv1alpha1.Configuration) {
		c.API.UsageInterval, c.Controllers.GCRetryMaxDelay = operator.Duration(100*time.Millisecond), operator.Duration(2*time.Second)
	})
	c, ctx := cl.Client, context.Background()
	history := testenv.MustLoad(t, filepath.Join(testenv.RepoRoot(t), "testdata", "long-session.jsonl"))
	turns := compaction.AssistantTurns(history)

	cl.CreateMinIOPolicy(ns, "shared", "e2e", m, window, nil)
	victim := cl.CreateReadySession(ns, "victim", "shared")
	byID := cl.CreateReadySession(ns, "attacker-id", "shared")
	byRecords := cl.CreateReadySession(ns, "attacker-records", "shared")
	agentToken := cl.BindAgent(ns, "agent")
	agentOf := func(mgr *operator.Manager) *compactclient.Client {
		return mgr.APIClient(t, agentToken)
	}
	agent := agentOf(mgr)

	// The victim has a state, a record and an offloaded tool result.
	victimLog := strings.Repeat("the victim's private build log\n", 2000)
	_, err := agent.Compact(ctx, ns, victim.Name, compactclient.CompactRequest{Messages: history[:turns[10]], Force: true})
	testenv.Must(t, err)
	off, err := agent.OffloadToolResult(ctx, ns, victim.Name, compaction.Message{Role: compaction.RoleTool, ToolCallID: "call_victim", Content: victimLog})
	testenv.Must(t, err)
	vid := string(victim.UID)
	victimBefore := sessionSnapshot(t, m, vid)
	if off.Offloaded == nil || len(victimBefore) < 3 {
		t.Fatalf("the victim should have a state, a record and a tool result stored; it has %v", victimBefore)
	}
	victimRecords := readRecords(t, agent, victim.Name)

	stolen := compactionv1alpha1.S3CredentialsSecretRef{
		SecretReference: compactionv1alpha1.SecretReference{Namespace: "kube-system", Name: "cloud-admin"},
		AccessKeyIDKey:  "accessKeyID", SecretAccessKeyKey: "secretAccessKey",
	}
	err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Labelled for policies' use: what keeps its key from the attacker's endpoint here is
	// the pinned location, not the label.
	testenv.Must(t, c.Create(ctx, builder.CredentialsSecret("kube-system", "cloud-admin",
		map[string]string{"accessKeyID": stolenKey, "secretAccessKey": "the-cluster-admins-secret-key"})))
	tamperID := func(st *compactionv1alpha1.AgentSessionStatus) { st.SessionID = vid }
	tamperRecords := func(st *compactionv1alpha1.AgentSessionStatus) {
		st.Records = &compactionv1alpha1.RecordsLocation{Endpoint: trap.Endpoint(), Bucket: "loot", Protocol: compactionv1alpha1.S3HTTP,
			SessionPrefix: "compaction_records/" + string(byRecords.UID) + "/", CredentialsSecretRef: stolen}
	}
	tenant := tenantAdmin(t, cl)

	t.Run("AdmissionPolicyRefusesTenantStatusWrites", func(t *testing.T) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + ns + ":team-admin", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: compactionv1alpha1.GroupVersion.Group,
				Resource: "agentsessions", Subresource: "status", Name: byID.Name},
		}}
		testenv.Must(t, c.Create(ctx, sar))
		if !sar.Status.Allowed {
			t.Fatalf("RBAC does not let the namespace admin patch agentsessions/status (%s): the test would prove nothing", sar.Status.Reason)
		}
		for who, cc := range map[string]client.Client{"a namespace admin": tenant, "a cluster admin": c} {
			err := patchStatus(ctx, cc, byID, tamperID)
			if err == nil {
				t.Errorf("%s changed status.sessionID of an AgentSession: the admission policy should refuse it", who)
				continue
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only the compaction operator") {
				t.Errorf("%s: %v, want 403 from the admission policy", who, err)
			}
		}
	})

	// A cluster without the admission policy from here on, and no controller running.
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	err = c.Get(ctx, client.ObjectKey{Name: statusPolicyBinding}, &binding)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	hadBinding := err == nil
	if hadBinding {
		testenv.Must(t, c.Delete(ctx, &binding))
	}
	mgr = pauseControllers(t, cl, mgr, bin)
	agent = agentOf(mgr)
	testenv.Eventually(t, waitFor, "the namespace admin's status writes pass without the binding", func() (bool, string) {
		err := patchStatus(ctx, tenant, byID, tamperID)
		return err == nil, fmt.Sprint(err)
	})
	testenv.Must(t, patchStatus(ctx, tenant, byRecords, tamperRecords))
	waitStatus(t, c, byID, func(st compactionv1alpha1.AgentSessionStatus) bool { return st.SessionID == vid })
	waitStatus(t, c, byRecords, func(st compactionv1alpha1.AgentSessionStatus) bool {
		return st.Records != nil && st.Records.Endpoint == trap.Endpoint()
	})
	// The API serves from the manager's cache: give it the tampered objects.
	time.Sleep(time.Second)

	t.Run("SessionIDOfAnotherSession", func(t *testing.T) {
		resp, err := agent.Compact(ctx, ns, byID.Name, compactclient.CompactRequest{Messages: history[:turns[12]], Force: true})
		if err != nil {
			t.Fatalf("compact: %v", err)
		}
		if resp.Record.WatermarkBefore != 0 {
			t.Errorf("the compaction started at watermark %d: it read the victim's state", resp.Record.WatermarkBefore)
		}
		for _, r := range readRecords(t, agent, byID.Name) {
			for _, v := range victimRecords {
				if r.ID == v.ID {
					t.Errorf("GET .../sessions/%s/records returned the victim's record %s", byID.Name, v.ID)
				}
			}
		}
		got, err := agent.GetToolResult(ctx, ns, byID.Name, "call_victim")
		if err == nil || strings.Contains(string(got), "victim") {
			t.Errorf("GET .../sessions/%s/toolresults/call_victim returned %d bytes of the victim's tool result", byID.Name, len(got))
		} else {
			expectAPIError(t, err, 404)
		}
		if n := len(objectsOf(t, m, string(byID.UID))); n == 0 {
			t.Errorf("the compaction stored nothing under the session's own UID")
		}
		if diff := snapshotDiff(victimBefore, sessionSnapshot(t, m, vid)); diff != "" {
			t.Errorf("the victim's objects changed:\n%s", diff)
		}
	})

	t.Run("RecordsNameAnotherNamespacesSecret", func(t *testing.T) {
		_, err := agent.Compact(ctx, ns, byRecords.Name, compactclient.CompactRequest{Messages: history[:turns[12]], Force: true})
		if r := trap.Saw(stolenKey); r != "" {
			t.Fatalf("POST /compact sent kube-system/cloud-admin's access key to the endpoint in status.records: %s", r)
		}
		if err != nil {
			t.Errorf("compact: %v", err)
		}
		if _, err := agent.OffloadToolResult(ctx, ns, byRecords.Name, compaction.Message{Role: compaction.RoleTool, ToolCallID: "call_1", Content: victimLog}); err != nil {
			t.Errorf("offload: %v", err)
		}
		readRecords(t, agent, byRecords.Name)
		if reqs := trap.Requests(); len(reqs) != 0 {
			t.Errorf("the compaction API sent %d requests to the endpoint in status.records: %v", len(reqs), reqs)
		}
		if n := len(objectsOf(t, m, string(byRecords.UID))); n == 0 {
			t.Errorf("nothing stored where the session's policy stores")
		}
	})

	t.Run("DeletionCollectsOnlyItsOwnObjects", func(t *testing.T) {
		// Deleted while the controllers are paused: the finalizer runs on the tampered status.
		seen, victimNow := len(trap.Requests()), sessionSnapshot(t, m, vid)
		testenv.Must(t, c.Delete(ctx, byID))
		testenv.Must(t, c.Delete(ctx, byRecords))
		waitStatus(t, c, byID, func(st compactionv1alpha1.AgentSessionStatus) bool { return st.SessionID == vid })
		cl.ExpireLease() // the manager leads, and the finalizers run
		for _, s := range []*compactionv1alpha1.AgentSession{byID, byRecords} {
			testenv.Eventually(t, waitFor, s.Name+" deleted", func() (bool, string) {
				if r := trap.SawAfter(seen, stolenKey); r != "" {
					t.Fatalf("the garbage collection sent kube-system/cloud-admin's access key to the endpoint in status.records: %s", r)
				}
				err := c.Get(ctx, client.ObjectKeyFromObject(s), s)
				return apierrors.IsNotFound(err), fmt.Sprintf("get: %v, finalizers %v", err, s.Finalizers)
			})
			if left := objectsOf(t, m, string(s.UID)); len(left) != 0 {
				t.Errorf("%d objects of %s left after its deletion: %v", len(left), s.Name, left[:min(5, len(left))])
			}
		}
		if reqs := trap.Requests()[seen:]; len(reqs) != 0 {
			t.Errorf("the garbage collection sent %d requests to the endpoint in status.records: %v", len(reqs), reqs)
		}
		if diff := snapshotDiff(victimNow, sessionSnapshot(t, m, vid)); diff != "" {
			t.Errorf("deleting the attacker's sessions changed the victim's objects:\n%s", diff)
		}
	})

	t.Run("OperatorStatusWritesPass", func(t *testing.T) {
		if !hadBinding {
			t.Fatalf("config/default installs no ValidatingAdmissionPolicyBinding %s", statusPolicyBinding)
		}
		restored := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: binding.Name}, Spec: binding.Spec}
		testenv.Must(t, c.Create(ctx, restored))
		testenv.Eventually(t, waitFor, "the restored binding refuses the namespace admin", func() (bool, string) {
			err := patchStatus(ctx, tenant, victim, func(st *compactionv1alpha1.AgentSessionStatus) { st.SessionID = "x" })
			return apierrors.IsForbidden(err), fmt.Sprint(err)
		})
		// The controller's status writes: a new session becomes Ready.
		cl.CreateReadySession(ns, "after-the-policy", "shared")
		// The compaction API's status writes: the victim's counters move.
		testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(victim), victim))
		before := ptr.Deref(victim.Status.Compactions.Emergency, 0)
		_, err := agent.Compact(ctx, ns, victim.Name, compactclient.CompactRequest{Messages: history[:turns[14]], Force: true})
		testenv.Must(t, err)
		waitStatus(t, c, victim, func(st compactionv1alpha1.AgentSessionStatus) bool {
			return ptr.Deref(st.Compactions.Emergency, 0) > before
		})
		if out := mgr.Output(); strings.Contains(out, "ValidatingAdmissionPolicy") {
			t.Errorf("the admission policy refused a status write of the manager:\n%s", out)
		}
	})
}

// sessionSnapshot is every object of session sid in the bucket: key -> ETag, size and time.
func sessionSnapshot(t *testing.T, m *testenv.MinIO, sid string) map[string]string {
	t.Helper()
	all := bucketSnapshot(t, m)
	out := map[string]string{}
	for _, k := range objectsOf(t, m, sid) {
		out[k] = all[k]
	}
	return out
}

// tenantAdmin is a client of the ServiceAccount team-admin, bound in ns to a Role that allows
// everything in ns: a namespace admin as many clusters have them.
func tenantAdmin(t *testing.T, cl *operator.Cluster) client.Client {
	t.Helper()
	ctx := context.Background()
	testenv.Must(t, cl.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-admin"}}))
	testenv.Must(t, cl.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "everything"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
	}))
	testenv.Must(t, cl.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "everything"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "team-admin"}},
	}))
	cfg := &rest.Config{Host: cl.Config.Host, BearerToken: cl.Token(ns, "team-admin"),
		TLSClientConfig: rest.TLSClientConfig{CAData: cl.Config.CAData}}
	cc, err := client.New(cfg, client.Options{Scheme: cl.Client.Scheme()})
	testenv.Must(t, err)
	return cc
}

// patchStatus merge-patches the status of s's current version as c.
func patchStatus(ctx context.Context, c client.Client, s *compactionv1alpha1.AgentSession, change func(*compactionv1alpha1.AgentSessionStatus)) error {
	var cur compactionv1alpha1.AgentSession
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
		return err
	}
	base := cur.DeepCopy()
	change(&cur.Status)
	return c.Status().Patch(ctx, &cur, client.MergeFrom(base))
}

// waitStatus waits until s's status satisfies ok.
func waitStatus(t *testing.T, c client.Client, s *compactionv1alpha1.AgentSession, ok func(compactionv1alpha1.AgentSessionStatus) bool) {
	t.Helper()
	testenv.Eventually(t, waitFor, s.Name+" status", func() (bool, string) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return false, err.Error()
		}
		return ok(s.Status), fmt.Sprintf("%+v", s.Status)
	})
}

// pauseControllers stops mgr and starts it again while another holder has the leader election
// Lease for an hour: the new manager serves the compaction API but runs no controller until
// the Lease is deleted (Cluster.ExpireLease).
func pauseControllers(t *testing.T, cl *operator.Cluster, mgr *operator.Manager, bin string) *operator.Manager {
	t.Helper()
	ctx := context.Background()
	if err := mgr.Stop(20 * time.Second); err != nil {
		t.Fatalf("manager did not stop cleanly: %v", err)
	}
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To("paused-by-the-test"), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now}
	var lease coordinationv1.Lease
	err := cl.Client.Get(ctx, client.ObjectKey{Namespace: operator.SystemNamespace, Name: operator.LeaseName}, &lease)
	switch {
	case apierrors.IsNotFound(err):
		testenv.Must(t, cl.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: operator.SystemNamespace, Name: operator.LeaseName}, Spec: spec}))
	case err != nil:
		t.Fatal(err)
	default:
		lease.Spec = spec
		testenv.Must(t, cl.Client.Update(ctx, &lease))
	}
	return cl.StartManager(bin, func(c *configv1alpha1.Configuration) {
		c.API.UsageInterval, c.Controllers.GCRetryMaxDelay = operator.Duration(100*time.Millisecond), operator.Duration(2*time.Second)
	})
}
