package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// TestNamespacedPolicyEndpoints is issue 28, item 1: a namespace admin's CompactionPolicy
// must not point the shared manager at an endpoint of their choice (one that answers a 1 GiB
// state or lists forever) unless a platform admin allowed it. Against the manager binary
// with its defaults (no egress.allowedEndpoints, no egress.namespacedPolicyEndpoints):
//
//   - a CompactionPolicy naming an endpoint the tenant runs (storage and summarizer) is not
//     Ready, EndpointNotAllowed, naming the flag that would allow it, and the endpoint gets
//     no request at all; a CompactionPolicy on MinIO is refused the same way;
//   - a ClusterCompactionPolicy, which only a cluster admin writes, on the same MinIO is Ready;
//   - with egress.namespacedPolicyEndpoints naming MinIO's address (another manager), the
//     CompactionPolicy on MinIO is Ready and the one on the tenant's endpoint is still not.
func TestNamespacedPolicyEndpoints(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	trap := testenv.StartCredentialTrap(t)
	c, ctx := cl.Client, context.Background()

	mgr := cl.StartManager(bin, operator.NamespacedEndpointsUnset, func(c *configv1alpha1.Configuration) {
		c.Controllers.StorageRetryInterval = operator.Duration(2 * time.Second)
	})
	testenv.Must(t, c.Create(ctx, builder.MinIOSecret(ns, "tenant-minio", m.AccessKey, m.SecretKey)))
	storage := builder.MinIOStorage(trap.Endpoint(), bucket, "tenant", "tenant-minio")
	storage.S3.CreateBucket = compactionv1alpha1.BucketCreationNever
	own := builder.Policy(ns, "tenant-endpoint").Window(window).Storage(storage).Spec(func(s *compactionv1alpha1.CompactionPolicySpec) {
		s.Summarizer = compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
			BaseURL: "http://" + trap.Endpoint() + "/v1", Model: "m", TimeoutSeconds: 5,
		}}
	}).Build()
	testenv.Must(t, c.Create(ctx, own))
	onMinIO := builder.Policy(ns, "tenant-minio").Window(window).Storage(builder.MinIOStorage(m.Endpoint, bucket, "tenant", "tenant-minio")).Build()
	testenv.Must(t, c.Create(ctx, onMinIO))
	for _, p := range []*compactionv1alpha1.CompactionPolicy{own, onMinIO} {
		got := waitCondition(t, c, p, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
		if got.Reason != compactionv1alpha1.ReasonEndpointNotAllowed || !strings.Contains(got.Message, "egress.namespacedPolicyEndpoints") {
			t.Errorf("policy %s: StorageReady = %s: %q; want %s naming egress.namespacedPolicyEndpoints", p.Name, got.Reason, got.Message, compactionv1alpha1.ReasonEndpointNotAllowed)
		}
	}

	// The cluster policy on the same MinIO, its Secret in the operator's namespace.
	testenv.Must(t, c.Create(ctx, builder.MinIOSecret(operator.SystemNamespace, "shared-minio", m.AccessKey, m.SecretKey)))
	shared := &compactionv1alpha1.ClusterCompactionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec:       compactionv1alpha1.ClusterCompactionPolicySpec{CompactionPolicySpec: *builder.DefaultedSpec(window)},
	}
	shared.Spec.Storage = builder.MinIOStorage(m.Endpoint, bucket, "shared", "shared-minio")
	testenv.Must(t, c.Create(ctx, shared))
	testenv.Eventually(t, waitFor, "the ClusterCompactionPolicy Ready", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(shared), shared); err != nil {
			return false, err.Error()
		}
		r := meta.FindStatusCondition(shared.Status.Conditions, compactionv1alpha1.ConditionReady)
		if r == nil {
			return false, "no Ready condition"
		}
		return r.Status == metav1.ConditionTrue, r.Reason + ": " + r.Message
	})
	// The namespaced policies were checked again meanwhile (every 2 s): still nothing sent.
	time.Sleep(3 * time.Second)
	if reqs := trap.Requests(); len(reqs) != 0 {
		t.Errorf("the endpoint a CompactionPolicy names got %d requests: %q", len(reqs), reqs)
	}
	testenv.Must(t, mgr.Stop(20*time.Second))

	// A platform admin lists MinIO's address: that policy becomes Ready, the other is still
	// refused (the trap listens on 127.0.0.1 too, on another port).
	_, minioPort, _ := strings.Cut(m.Endpoint, ":")
	cl.StartManager(bin, func(c *configv1alpha1.Configuration) {
		c.Egress.NamespacedPolicyEndpoints = []string{"127.0.0.1:" + minioPort}
		c.Controllers.StorageRetryInterval = operator.Duration(2 * time.Second)
	})
	waitCondition(t, c, onMinIO, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	if got := waitCondition(t, c, own, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse); got.Reason != compactionv1alpha1.ReasonEndpointNotAllowed {
		t.Errorf("policy on the tenant's endpoint, MinIO allowed: StorageReady = %s: %q", got.Reason, got.Message)
	}
	if reqs := trap.Requests(); len(reqs) != 0 {
		t.Errorf("the endpoint a CompactionPolicy names got %d requests: %q", len(reqs), reqs)
	}
}
