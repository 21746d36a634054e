package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/controller"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// refuseStatusAnnotation on a policy or session makes the API server refuse the operator's
// status writes to it, once refuseOperatorStatusWrites installed the admission policy.
const refuseStatusAnnotation = "test.compaction.harness9.io/refuse-status"

// testEventsAfterStatusWrite: an event says what the status says, so it is emitted only
// once the status is written. While the API server refuses the operator's status writes (a
// conflict, an admission policy, an outage) the reconcile fails and is retried: no event;
// the retry that writes the status emits it, once.
func (e *env) testEventsAfterStatusWrite(t *testing.T) {
	ctx := context.Background()
	e.refuseOperatorStatusWrites(t)

	// A policy that becomes Ready.
	p := &compactionv1alpha1.CompactionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "refused-status", Annotations: map[string]string{refuseStatusAnnotation: "true"}},
		Spec:       e.policySpec(credsSecret),
	}
	testenv.Must(t, e.c.Create(ctx, p))
	e.expectNoEventWhileRefused(t, p.Name, compactionv1alpha1.ReasonPolicyReady)
	testenv.Must(t, e.c.Get(ctx, client.ObjectKeyFromObject(p), p))
	if c := meta.FindStatusCondition(p.Status.Conditions, compactionv1alpha1.ConditionReady); c != nil {
		t.Fatalf("the policy's status was written although refused: Ready = %+v", c)
	}
	e.allowStatusWrites(t, p)
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	e.expectOneEvent(t, p.Name, corev1.EventTypeNormal, compactionv1alpha1.ReasonPolicyReady)

	// A session whose status.sessionID someone else changed: the operator puts it back.
	s := e.createSession(t, "refused-correction", p.Name)
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	e.update(t, s, func() { s.Annotations = map[string]string{refuseStatusAnnotation: "true"} })
	e.patchStatus(t, s, func(st *compactionv1alpha1.AgentSessionStatus) { st.SessionID = "someone-else" })
	e.expectNoEventWhileRefused(t, s.Name, compactionv1alpha1.ReasonStatusCorrected)
	testenv.Must(t, e.c.Get(ctx, client.ObjectKeyFromObject(s), s))
	if s.Status.SessionID != "someone-else" {
		t.Fatalf("the session's status was written although refused: sessionID %q", s.Status.SessionID)
	}
	e.allowStatusWrites(t, s)
	testenv.Eventually(t, waitFor, "status.sessionID put back", func() (bool, string) {
		testenv.Must(t, e.c.Get(ctx, client.ObjectKeyFromObject(s), s))
		return s.Status.SessionID == string(s.UID), s.Status.SessionID
	})
	e.expectOneEvent(t, s.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonStatusCorrected)

	// A session whose deletion waits (its status names storage that no policy confirms):
	// the Warning that says why comes with the condition, not before it.
	held := e.createSession(t, "refused-deletion", "no-such-policy")
	testenv.Eventually(t, waitFor, "the session's finalizer", func() (bool, string) {
		testenv.Must(t, e.c.Get(ctx, client.ObjectKeyFromObject(held), held))
		return slices.Contains(held.Finalizers, controller.SessionFinalizer), fmt.Sprint(held.Finalizers)
	})
	e.patchStatus(t, held, func(st *compactionv1alpha1.AgentSessionStatus) {
		st.Records = &compactionv1alpha1.RecordsLocation{Endpoint: "minio.invalid:9000", Bucket: "loot", SessionPrefix: "x/"}
	})
	e.update(t, held, func() { held.Annotations = map[string]string{refuseStatusAnnotation: "true"} })
	testenv.Must(t, e.c.Delete(ctx, held))
	e.expectNoEventWhileRefused(t, held.Name, compactionv1alpha1.ReasonStorageLocationUnverified)
	e.allowStatusWrites(t, held)
	e.waitCondition(t, held, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
	e.expectOneEvent(t, held.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonStorageLocationUnverified)
	e.update(t, held, func() { held.Finalizers = nil }) // abandon it, as the event says
}

// refuseOperatorStatusWrites installs a ValidatingAdmissionPolicy that refuses the operator's
// status writes to policies and sessions annotated refuseStatusAnnotation, and waits until
// the API server enforces it.
func (e *env) refuseOperatorStatusWrites(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-refuse-operator-status"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{compactionv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"compactionpolicies/status", "agentsessions/status"},
					},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "operator", Expression: fmt.Sprintf("request.userInfo.username == %q", operatorUser),
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(object.metadata.annotations) || !(%q in object.metadata.annotations)", refuseStatusAnnotation),
				Message:    "status write refused by the test",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: vap.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: vap.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	testenv.Must(t, e.c.Create(ctx, vap))
	testenv.Must(t, e.c.Create(ctx, binding))
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), binding)
		_ = e.c.Delete(context.Background(), vap)
	})

	// Enforced once a status write as the operator to an annotated object is refused. (The
	// probe's Secret does not exist: the operator does nothing with it but fail to write.)
	probe := &compactionv1alpha1.CompactionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admission-probe", Annotations: map[string]string{refuseStatusAnnotation: "true"}},
		Spec:       e.policySpec("no-such-secret"),
	}
	testenv.Must(t, e.c.Create(ctx, probe))
	defer func() { testenv.Must(t, e.c.Delete(ctx, probe)) }()
	testenv.Eventually(t, waitFor, "the admission policy enforced", func() (bool, string) {
		err := e.operator.Status().Patch(ctx, probe, client.RawPatch(types.MergePatchType, []byte(`{"status":{"sessions":7}}`)))
		return err != nil && strings.Contains(err.Error(), "refused by the test"), fmt.Sprint(err)
	})
}

// allowStatusWrites removes refuseStatusAnnotation from obj (a metadata change: no
// reconcile follows but the retries of the failed ones).
func (e *env) allowStatusWrites(t *testing.T, obj client.Object) {
	t.Helper()
	e.update(t, obj, func() {
		a := obj.GetAnnotations()
		delete(a, refuseStatusAnnotation)
		obj.SetAnnotations(a)
	})
}

// expectNoEventWhileRefused lets the operator retry its refused status write for a while
// (about ten attempts with the controllers' backoff) and checks no event of reason was
// emitted about name meanwhile.
func (e *env) expectNoEventWhileRefused(t *testing.T, name, reason string) {
	t.Helper()
	time.Sleep(3 * time.Second)
	if evs := e.eventsAbout(t, name, reason); len(evs) > 0 {
		t.Errorf("%s event on %s emitted while its status write was refused: %s", reason, name, describeEvents(evs))
	}
}

// expectOneEvent waits for the event, then checks it was emitted once: one Event object, no
// series (the recorder turns a repeat into a series).
func (e *env) expectOneEvent(t *testing.T, name, eventType, reason string) {
	t.Helper()
	e.waitEvent(t, name, eventType, reason)
	time.Sleep(time.Second) // a repeat would follow at once
	if evs := e.eventsAbout(t, name, reason); len(evs) != 1 || evs[0].Series != nil {
		t.Errorf("%s event on %s: %s; want it once", reason, name, describeEvents(evs))
	}
}

// eventsAbout lists the events of reason about the object name.
func (e *env) eventsAbout(t *testing.T, name, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	testenv.Must(t, e.c.List(context.Background(), &list, client.InNamespace("")))
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Name == name && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

func describeEvents(evs []eventsv1.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events", len(evs))
	for _, ev := range evs {
		count := int32(1)
		if ev.Series != nil {
			count = ev.Series.Count
		}
		fmt.Fprintf(&b, "; %s/%s x%d: %s", ev.Type, ev.Reason, count, ev.Note)
	}
	return b.String()
}
