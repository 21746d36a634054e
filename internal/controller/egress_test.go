package controller_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/controller"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/egress"
)

// TestAllowedEndpoints: issue 14. With egress.allowedEndpoints, a policy naming another endpoint
// (an attacker's, the cloud metadata service) is not Ready (EndpointNotAllowed) and the
// endpoint is never dialled, its Secret never sent; a name that resolves outside the
// allowed addresses gets no connection either. The allowed MinIO works.
func TestAllowedEndpoints(t *testing.T) {
	var minioPort string
	e := startEnv(t, func(m *testenv.MinIO, cfg *controller.Config) {
		_, minioPort, _ = net.SplitHostPort(m.Endpoint)
		allowed, err := egress.Parse([]string{"127.0.0.1:" + minioPort, "10.0.0.0/8"})
		testenv.Must(t, err)
		cfg.AllowedEndpoints = allowed
	})
	ctx := context.Background()
	testenv.Must(t, e.c.Create(ctx, e.credentials(ns, credsSecret)))

	ok := e.createPolicy(t, "allowed", credsSecret)
	e.waitCondition(t, ok, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	// localhost is no name entry: it is dialled, as its address is allowed.
	byName := e.createPolicy(t, "allowed-by-address", credsSecret)
	e.update(t, byName, func() { byName.Spec.Storage.S3.Endpoint = "localhost:" + minioPort })
	e.waitCondition(t, byName, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)

	trap := testenv.StartCredentialTrap(t)
	_, trapPort, _ := net.SplitHostPort(trap.Endpoint())
	cases := []struct {
		name   string
		mutate func(*compactionv1alpha1.CompactionPolicySpec)
		want   string
	}{
		{"attacker-endpoint", func(s *compactionv1alpha1.CompactionPolicySpec) { s.Storage.S3.Endpoint = trap.Endpoint() }, trap.Endpoint()},
		// Checked when dialling: localhost resolves to 127.0.0.1, whose trap port is not allowed.
		// (The message names the address dialled: 127.0.0.1 or ::1, with the trap's port.)
		{"dns-name-to-other-address", func(s *compactionv1alpha1.CompactionPolicySpec) { s.Storage.S3.Endpoint = "localhost:" + trapPort }, ":" + trapPort},
		{"summarizer-metadata-service", func(s *compactionv1alpha1.CompactionPolicySpec) {
			s.Summarizer.Mode = compactionv1alpha1.SummarizerOpenAI
			s.Summarizer.OpenAI = compactionv1alpha1.OpenAISummarizerSpec{BaseURL: "http://169.254.169.254/v1", Model: "m"}
		}, "169.254.169.254:80"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name}, Spec: e.policySpec(credsSecret)}
			c.mutate(&p.Spec)
			testenv.Must(t, e.c.Create(ctx, p))
			var st metav1.Condition
			testenv.Eventually(t, waitFor, "StorageReady "+compactionv1alpha1.ReasonEndpointNotAllowed, func() (bool, string) {
				st = e.waitCondition(t, p, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
				return st.Reason == compactionv1alpha1.ReasonEndpointNotAllowed, st.Reason + ": " + st.Message
			})
			if !strings.Contains(st.Message, c.want) {
				t.Errorf("StorageReady message %q does not name %s", st.Message, c.want)
			}
			if r := meta.FindStatusCondition(p.Status.Conditions, compactionv1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse {
				t.Errorf("Ready = %+v", r)
			}
		})
	}
	if reqs := trap.Requests(); len(reqs) > 0 {
		t.Errorf("the attacker's endpoint was contacted: %q", reqs)
	}
}
