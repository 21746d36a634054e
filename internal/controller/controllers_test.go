package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/controller"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
	"github.com/harness9/compaction-operator/internal/policy"
)

const (
	ns          = "default"
	bucket      = "agent-context"
	prefix      = "team-a"
	credsSecret = "minio-credentials"
	waitFor     = 30 * time.Second
)

// env is one control plane, one MinIO and one in-process manager running the controllers,
// shared by the subtests of TestControllers.
type env struct {
	c client.Client
	// operator is a client of the operator's user (operatorUser), for requests that must
	// meet what the manager's meet.
	operator client.Client
	minio    *testenv.MinIO
	s3       *minio.Client
	reg      *prometheus.Registry
}

func TestControllers(t *testing.T) {
	e := startEnv(t, func(m *testenv.MinIO, cfg *controller.Config) {
		cfg.ClusterSecretNamespaces = []string{"shared-secrets"}
	})
	testenv.Must(t, e.c.Create(context.Background(), e.credentials(ns, credsSecret)))

	t.Run("PolicyReady", e.testPolicyReady)
	t.Run("PolicyWaitsForSecret", e.testPolicyWaitsForSecret)
	t.Run("PolicyUsesOnlyLabelledSecrets", e.testPolicyUsesOnlyLabelledSecrets)
	t.Run("ClusterPolicyReady", e.testClusterPolicyReady)
	t.Run("ClusterPolicySecretNamespace", e.testClusterPolicySecretNamespace)
	t.Run("ClusterPolicyNamespaceSelector", e.testClusterPolicyNamespaceSelector)
	t.Run("StorageErrorsDoNotEchoTheEndpoint", e.testStorageErrorsDoNotEcho)
	t.Run("SessionReady", e.testSessionReady)
	t.Run("SessionPolicyAppearsLater", e.testSessionPolicyAppearsLater)
	t.Run("DeleteRemovesOnlyItsObjects", e.testDeleteRemovesOnlyItsObjects)
	t.Run("DeleteAfterPolicyDeleted", e.testDeleteAfterPolicyDeleted)
	t.Run("DeleteWhileStorageDown", e.testDeleteWhileStorageDown)
	t.Run("TamperedSessionIDDeletesOnlyItsObjects", e.testTamperedSessionID)
	t.Run("TamperedRecordsSendNoCredentials", e.testTamperedRecords)
	t.Run("TamperedStatusIsCorrected", e.testTamperedStatusCorrected)
	t.Run("AnnotatedPod", e.testAnnotatedPod)
	t.Run("EventsAfterStatusWrite", e.testEventsAfterStatusWrite)
	t.Run("Metrics", e.testMetrics)
}

// startEnv starts a control plane, MinIO and a manager running the controllers with the
// test's settings, changed by configure.
func startEnv(t *testing.T, configure func(*testenv.MinIO, *controller.Config)) *env {
	t.Helper()
	root := testenv.RepoRoot(t)
	_, cfg := kubeenv.Start(t, kubeenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	m := testenv.StartMinIO(t)

	scheme := runtime.NewScheme()
	testenv.Must(t, clientgoscheme.AddToScheme(scheme))
	testenv.Must(t, compactionv1alpha1.AddToScheme(scheme))
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(testWriter{t})))

	// The manager runs as a user holding exactly the operator's generated ClusterRole and its
	// Role in the cluster resource namespace, so a controller that needs more (a list or
	// watch of Secrets, say) fails here as it would in a cluster.
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	testenv.Must(t, err)
	testenv.Must(t, admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "compaction-system"}}))
	mgrCfg := bindOperatorRBAC(t, admin, cfg, root, "compaction-system")

	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Cache:   cache.Options{ByObject: policy.LocationCache("compaction-system")},
		// Several tests run a manager each in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	testenv.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	// Long probe intervals: a policy that becomes Ready here did so because its Secret
	// changed, not because a probe timer fired. Secrets are not watched: the policy
	// controllers look at them again every SecretRecheckInterval, short here. The session
	// GC retries quickly.
	ccfg := controller.Config{
		Registerer:               reg,
		ClusterResourceNamespace: "compaction-system",
		ProbeInterval:            time.Hour,
		RetryInterval:            time.Hour,
		SecretRecheckInterval:    time.Second,
		RetryMaxDelay:            time.Second,
	}
	if configure != nil {
		configure(m, &ccfg)
	}
	testenv.Must(t, controller.Setup(ctx, mgr, ccfg))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	s3c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	testenv.Must(t, err)
	// The test reads through a direct client, not the manager's cache, so it sees writes
	// as soon as they happen.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	testenv.Must(t, err)
	operator, err := client.New(mgrCfg, client.Options{Scheme: scheme})
	testenv.Must(t, err)
	return &env{c: direct, operator: operator, minio: m, s3: s3c, reg: reg}
}

// testMetrics runs last: garbage collection above deleted sessions (one after an outage).
func (e *env) testMetrics(t *testing.T) {
	values := map[string]float64{}
	families, err := e.reg.Gather()
	testenv.Must(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				values[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				values[name] = m.GetGauge().GetValue()
			}
		}
	}
	checks := []struct {
		name string
		min  float64
	}{
		{"compaction_gc_sessions_total", 3},
		{"compaction_gc_deleted_objects_total", 15},
		{"compaction_gc_failures_total,reason=" + compactionv1alpha1.ReasonStorageUnreachable, 1},
		{"compaction_sessions,ready=true,tier=None", 1},
		{"compaction_policy_ready,kind=CompactionPolicy,name=ready,namespace=default,reason=Ready", 1},
		{"compaction_policy_sessions,kind=CompactionPolicy,name=for-sessions,namespace=default", 2},
	}
	for _, c := range checks {
		if got, ok := values[c.name]; !ok || got < c.min {
			t.Errorf("%s = %v (present %v), want >= %v", c.name, got, ok, c.min)
		}
	}
	if v, ok := values["compaction_policy_ready,kind=ClusterCompactionPolicy,name=cluster-default,namespace=,reason=Ready"]; !ok || v != 1 {
		t.Errorf("cluster policy readiness metric = %v (present %v)", v, ok)
	}
}

// credentials is a Secret holding MinIO's key pair, labelled for policies' use.
func (e *env) credentials(namespace, name string) *corev1.Secret {
	return builder.MinIOSecret(namespace, name, e.minio.AccessKey, e.minio.SecretKey)
}

func (e *env) policySpec(secret string) compactionv1alpha1.CompactionPolicySpec {
	return compactionv1alpha1.CompactionPolicySpec{ContextWindow: builder.DefaultWindow,
		Storage: builder.MinIOStorage(e.minio.Endpoint, bucket, prefix, secret)}
}

func (e *env) clusterSpec(secret string) compactionv1alpha1.ClusterCompactionPolicySpec {
	return compactionv1alpha1.ClusterCompactionPolicySpec{CompactionPolicySpec: e.policySpec(secret)}
}

func (e *env) createPolicy(t *testing.T, name, secret string) *compactionv1alpha1.CompactionPolicy {
	t.Helper()
	p := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: e.policySpec(secret)}
	testenv.Must(t, e.c.Create(context.Background(), p))
	return p
}

func (e *env) createSession(t *testing.T, name, policyName string) *compactionv1alpha1.AgentSession {
	t.Helper()
	s := builder.Session(ns, name, policyName).Build()
	testenv.Must(t, e.c.Create(context.Background(), s))
	return s
}

// waitCondition waits until obj's condition t has status want, and returns it.
func (e *env) waitCondition(t *testing.T, obj client.Object, condType string, want metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	testenv.Eventually(t, waitFor, fmt.Sprintf("%T %s: %s=%s", obj, obj.GetName(), condType, want), func() (bool, string) {
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(conditionsOf(obj), condType)
		if c == nil {
			return false, "no condition"
		}
		got = *c
		return c.Status == want && c.ObservedGeneration == obj.GetGeneration(), fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	})
	return got
}

func conditionsOf(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *compactionv1alpha1.CompactionPolicy:
		return o.Status.Conditions
	case *compactionv1alpha1.ClusterCompactionPolicy:
		return o.Status.Conditions
	case *compactionv1alpha1.AgentSession:
		return o.Status.Conditions
	}
	return nil
}

func (e *env) testPolicyReady(t *testing.T) {
	p := e.createPolicy(t, "ready", credsSecret)
	c := e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	if c.Reason != compactionv1alpha1.ReasonReady {
		t.Errorf("Ready reason = %q", c.Reason)
	}
	st := meta.FindStatusCondition(p.Status.Conditions, compactionv1alpha1.ConditionStorageReady)
	if st == nil || st.Status != metav1.ConditionTrue || st.Reason != compactionv1alpha1.ReasonReachable {
		t.Errorf("StorageReady = %+v", st)
	}
	// createBucket: the operator made it.
	ok, err := e.s3.BucketExists(context.Background(), bucket)
	if err != nil || !ok {
		t.Errorf("bucket %s exists = %v, %v", bucket, ok, err)
	}
	if p.Status.ObservedGeneration != p.Generation {
		t.Errorf("observedGeneration = %d, generation %d", p.Status.ObservedGeneration, p.Generation)
	}
}

func (e *env) testPolicyWaitsForSecret(t *testing.T) {
	p := e.createPolicy(t, "late-secret", "created-later")
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionFalse)
	st := e.waitCondition(t, p, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
	if want := notUsable("credentials", "created-later"); st.Reason != compactionv1alpha1.ReasonSecretNotUsable || st.Message != want {
		t.Errorf("StorageReady = %s: %s; want %s: %s", st.Reason, st.Message, compactionv1alpha1.ReasonSecretNotUsable, want)
	}
	e.waitEvent(t, p.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonStorageNotReady)

	// A labelled Secret without the secret key: still not Ready, now for the missing key
	// (the Secret opted in, so the condition may say what it lacks).
	bad := e.credentials(ns, "created-later")
	delete(bad.StringData, "secretAccessKey")
	testenv.Must(t, e.c.Create(context.Background(), bad))
	testenv.Eventually(t, waitFor, "StorageReady reason SecretKeyMissing", func() (bool, string) {
		c := e.waitCondition(t, p, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
		return c.Reason == compactionv1alpha1.ReasonSecretKeyMissing, c.Reason + ": " + c.Message
	})

	// Fixing the Secret makes the policy Ready when its Secrets are looked at again (the
	// operator may not watch Secrets; probe timers are an hour in this test).
	bad.StringData = map[string]string{"secretAccessKey": e.minio.SecretKey}
	testenv.Must(t, e.c.Update(context.Background(), bad))
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
}

// notUsable is the condition message of a policy whose Secret name (of the kind what,
// "credentials" or "API key") in ns is missing or not labelled: one message for both.
func notUsable(what, name string) string {
	return what + ` Secret "` + ns + "/" + name + `" not found or not labelled compaction.harness9.io/credentials=true`
}

// testPolicyUsesOnlyLabelledSecrets: issue 28, item 2. Whoever may write a CompactionPolicy
// names a Secret of the namespace (one they may not read) and endpoints they run, for the
// storage and for the summarizer: until the Secret is labelled
// compaction.harness9.io/credentials=true no request carries anything of it, and the
// conditions say the same, word for word, as for a Secret that does not exist. Labelled, it
// is used: a policy on MinIO naming it becomes Ready.
func (e *env) testPolicyUsesOnlyLabelledSecrets(t *testing.T) {
	ctx := context.Background()
	trap := testenv.StartCredentialTrap(t)
	const name, apiKey = "not-for-policies", "sk-not-for-policies-4f1c"
	summarizer := compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
		BaseURL: "http://" + trap.Endpoint() + "/v1", Model: "m",
		APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: name}, Key: "apiKey"},
	}}
	// Everything at the trap: its storage endpoint and its summarizer.
	create := func(pname, storageSecret string, atTrap bool) *compactionv1alpha1.CompactionPolicy {
		spec := e.policySpec(storageSecret)
		if atTrap {
			spec.Storage.S3.Endpoint, spec.Storage.S3.CreateBucket = trap.Endpoint(), compactionv1alpha1.BucketCreationNever
		}
		spec.Summarizer = summarizer
		p := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pname}, Spec: spec}
		testenv.Must(t, e.c.Create(ctx, p))
		return p
	}
	checkStorage := func(p *compactionv1alpha1.CompactionPolicy, when string) {
		t.Helper()
		st := e.waitCondition(t, p, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
		if want := notUsable("credentials", name); st.Reason != compactionv1alpha1.ReasonSecretNotUsable || st.Message != want {
			t.Errorf("%s, %s: StorageReady = %s: %q; want %s: %q", p.Name, when, st.Reason, st.Message, compactionv1alpha1.ReasonSecretNotUsable, want)
		}
		r := meta.FindStatusCondition(p.Status.Conditions, compactionv1alpha1.ConditionReady)
		if r == nil || r.Status != metav1.ConditionFalse || r.Message != notUsable("credentials", name) {
			t.Errorf("%s, %s: Ready = %+v", p.Name, when, r)
		}
	}

	// The Secret does not exist yet.
	early := create("names-missing-secret", name, true)
	checkStorage(early, "no Secret")

	// It appears without the label, holding MinIO's key pair and an API key.
	secret := e.credentials(ns, name)
	secret.Labels = nil
	secret.StringData["apiKey"] = apiKey
	testenv.Must(t, e.c.Create(ctx, secret))
	late := create("names-unlabelled-secret", name, true)
	checkStorage(late, "an unlabelled Secret")
	// The policy that saw no Secret has looked again (every second here): nothing changed.
	time.Sleep(3 * time.Second)
	checkStorage(early, "an unlabelled Secret, looked at again")
	e.waitEvent(t, late.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonStorageNotReady)
	for _, v := range []string{e.minio.AccessKey, apiKey} {
		if r := trap.Saw(v); r != "" {
			t.Errorf("a policy sent a value of the unlabelled Secret to the endpoint it names: %s", r)
		}
	}
	if reqs := trap.Requests(); len(reqs) != 0 {
		t.Errorf("the policies' endpoint got %d requests for an unusable Secret: %q", len(reqs), reqs)
	}

	// Storage usable (a labelled Secret, on MinIO), summarizer key in the unlabelled Secret.
	mixed := create("names-unlabelled-api-key", credsSecret, false)
	r := e.waitCondition(t, mixed, compactionv1alpha1.ConditionReady, metav1.ConditionFalse)
	if want := notUsable("API key", name); r.Reason != compactionv1alpha1.ReasonSummarizerNotReady || r.Message != want {
		t.Errorf("Ready = %s: %q; want %s: %q", r.Reason, r.Message, compactionv1alpha1.ReasonSummarizerNotReady, want)
	}

	// Labelled, the Secret is used (the trap's policies are deleted first: it would then be
	// their own endpoint's business).
	for _, p := range []client.Object{early, late} {
		testenv.Must(t, e.c.Delete(ctx, p))
	}
	onMinIO := e.createPolicy(t, "names-labelled-secret", name)
	e.waitCondition(t, onMinIO, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
	e.update(t, secret, func() {
		secret.Labels = map[string]string{compactionv1alpha1.CredentialsLabel: compactionv1alpha1.CredentialsLabelValue}
	})
	e.waitCondition(t, onMinIO, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	e.waitCondition(t, mixed, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
}

func (e *env) testClusterPolicyReady(t *testing.T) {
	// The Secret lives in the cluster resource namespace; the reference names none.
	testenv.Must(t, e.c.Create(context.Background(), e.credentials("compaction-system", "cluster-minio")))
	p := &compactionv1alpha1.ClusterCompactionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cluster-default"}, Spec: e.clusterSpec("cluster-minio")}
	testenv.Must(t, e.c.Create(context.Background(), p))
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)

	s := &compactionv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "uses-cluster-policy"},
		Spec: compactionv1alpha1.AgentSessionSpec{PolicyRef: compactionv1alpha1.PolicyReference{
			Kind: compactionv1alpha1.PolicyKindCluster, Name: p.Name}},
	}
	testenv.Must(t, e.c.Create(context.Background(), s))
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	if ref := s.Status.Records.CredentialsSecretRef; !ref.IsSet() || ref.Namespace != "compaction-system" || ref.Name != "cluster-minio" {
		t.Errorf("records.credentialsSecretRef = %+v, want compaction-system/cluster-minio", ref)
	}
	testenv.Eventually(t, waitFor, "cluster policy counts 1 session", func() (bool, string) {
		testenv.Must(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(p), p))
		return ptr.Deref(p.Status.Sessions, 0) == 1, fmt.Sprint(ptr.Deref(p.Status.Sessions, 0))
	})
}

// testClusterPolicySecretNamespace: issue 14. Whoever writes a ClusterCompactionPolicy names
// a Secret in kube-system and an endpoint they run: the policy is not Ready
// (SecretNamespaceNotAllowed), the Secret is never read and nothing is sent to the endpoint.
// A Secret in a namespace of secrets.clusterPolicyNamespaces is used.
func (e *env) testClusterPolicySecretNamespace(t *testing.T) {
	ctx := context.Background()
	trap := testenv.StartCredentialTrap(t)
	stolen := e.kubeSystemSecret(t)
	spec := e.policySpec("unused")
	spec.Storage.S3.Endpoint, spec.Storage.S3.CreateBucket = trap.Endpoint(), compactionv1alpha1.BucketCreationNever
	spec.Storage.S3.CredentialsSecretRef = stolen
	p := &compactionv1alpha1.ClusterCompactionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "steals-kube-system"},
		Spec: compactionv1alpha1.ClusterCompactionPolicySpec{CompactionPolicySpec: spec}}
	testenv.Must(t, e.c.Create(ctx, p))
	c := e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionFalse)
	if c.Reason != compactionv1alpha1.ReasonSecretNamespaceNotAllowed || !strings.Contains(c.Message, "kube-system/cloud-admin") {
		t.Errorf("Ready = %s: %s; want %s naming the Secret", c.Reason, c.Message, compactionv1alpha1.ReasonSecretNamespaceNotAllowed)
	}
	st := meta.FindStatusCondition(p.Status.Conditions, compactionv1alpha1.ConditionStorageReady)
	if st == nil || st.Reason != compactionv1alpha1.ReasonSecretNamespaceNotAllowed {
		t.Errorf("StorageReady = %+v", st)
	}
	e.waitEvent(t, p.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonSecretNamespaceNotAllowed)
	if reqs := trap.Requests(); len(reqs) > 0 {
		t.Errorf("the operator contacted the policy's endpoint: %q", reqs)
	}
	// A session using it is not Ready, and nothing was pinned for it.
	s := &compactionv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "uses-stealing-policy"},
		Spec: compactionv1alpha1.AgentSessionSpec{PolicyRef: compactionv1alpha1.PolicyReference{
			Kind: compactionv1alpha1.PolicyKindCluster, Name: p.Name}},
	}
	testenv.Must(t, e.c.Create(ctx, s))
	sc := e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionFalse)
	if sc.Reason != compactionv1alpha1.ReasonPolicyNotReady || !strings.Contains(sc.Message, "not allowed") {
		t.Errorf("session Ready = %s: %s", sc.Reason, sc.Message)
	}
	if s.Status.Records != nil {
		t.Errorf("records = %+v for a session of a refused policy", s.Status.Records)
	}
	if got := trap.Saw(stolenKey); got != "" {
		t.Errorf("the kube-system Secret's key reached the endpoint: %s", got)
	}

	// An allowed namespace (secrets.clusterPolicyNamespaces) works.
	testenv.Must(t, e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shared-secrets"}}))
	testenv.Must(t, e.c.Create(ctx, e.credentials("shared-secrets", "minio")))
	ok := e.policySpec("minio")
	ok.Storage.S3.CredentialsSecretRef.Namespace = "shared-secrets"
	allowed := &compactionv1alpha1.ClusterCompactionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allowed-namespace"},
		Spec: compactionv1alpha1.ClusterCompactionPolicySpec{CompactionPolicySpec: ok}}
	testenv.Must(t, e.c.Create(ctx, allowed))
	e.waitCondition(t, allowed, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
}

// testClusterPolicyNamespaceSelector: issue 14. A ClusterCompactionPolicy with a
// namespaceSelector serves only the namespaces it selects: a session (or an annotated pod's
// session) elsewhere is not Ready (NamespaceNotAllowed) and gets no storage location;
// labelling the namespace makes it Ready, removing the label takes it back.
func (e *env) testClusterPolicyNamespaceSelector(t *testing.T) {
	ctx := context.Background()
	const label = "compaction.harness9.io/agents"
	testenv.Must(t, e.c.Create(ctx, e.credentials("compaction-system", "selector-minio")))
	spec := e.clusterSpec("selector-minio")
	spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}}
	p := &compactionv1alpha1.ClusterCompactionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "selected-only"}, Spec: spec}
	testenv.Must(t, e.c.Create(ctx, p))
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "not-for-agents"}}
	testenv.Must(t, e.c.Create(ctx, nsObj))
	s := &compactionv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsObj.Name, Name: "wants-cluster-policy"},
		Spec: compactionv1alpha1.AgentSessionSpec{PolicyRef: compactionv1alpha1.PolicyReference{
			Kind: compactionv1alpha1.PolicyKindCluster, Name: p.Name}},
	}
	testenv.Must(t, e.c.Create(ctx, s))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsObj.Name, Name: "agent-pod", Annotations: map[string]string{
			controller.PolicyAnnotation: p.Name, controller.PolicyKindAnnotation: string(compactionv1alpha1.PolicyKindCluster)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}},
	}
	testenv.Must(t, e.c.Create(ctx, pod))
	podSession := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: nsObj.Name, Name: pod.Name}}
	for _, obj := range []*compactionv1alpha1.AgentSession{s, podSession} {
		c := e.waitCondition(t, obj, compactionv1alpha1.ConditionReady, metav1.ConditionFalse)
		if c.Reason != compactionv1alpha1.ReasonNamespaceNotAllowed || !strings.Contains(c.Message, nsObj.Name) {
			t.Errorf("%s: Ready = %s: %s; want %s", obj.Name, c.Reason, c.Message, compactionv1alpha1.ReasonNamespaceNotAllowed)
		}
		pr := meta.FindStatusCondition(obj.Status.Conditions, compactionv1alpha1.ConditionPolicyResolved)
		if pr == nil || pr.Reason != compactionv1alpha1.ReasonNamespaceNotAllowed {
			t.Errorf("%s: PolicyResolved = %+v", obj.Name, pr)
		}
		if obj.Status.Records != nil {
			t.Errorf("%s: a storage location was pinned for a namespace the policy does not select: %+v", obj.Name, obj.Status.Records)
		}
	}

	// Labelling the namespace re-evaluates its sessions.
	nsObj.Labels = map[string]string{label: "true"}
	testenv.Must(t, e.c.Update(ctx, nsObj))
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	e.waitCondition(t, podSession, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)

	// And removing the label takes the policy away again.
	nsObj.Labels = nil
	testenv.Must(t, e.c.Update(ctx, nsObj))
	c := e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionFalse)
	if c.Reason != compactionv1alpha1.ReasonNamespaceNotAllowed {
		t.Errorf("after removing the label: Ready = %s: %s", c.Reason, c.Message)
	}
}

// testStorageErrorsDoNotEcho: issue 14. A policy's endpoint (say, an internal service a tenant
// points it at) answers with a body holding a canary: no condition or event of the policy
// repeats it, while the status code still shows.
func (e *env) testStorageErrorsDoNotEcho(t *testing.T) {
	const canary = "CANARY-internal-body-5be1"
	for i, trap := range []*testenv.CredentialTrap{
		testenv.StartTrap(t, "application/xml", `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>`+canary+`</Message></Error>`),
		testenv.StartTrap(t, "text/plain", "instance credentials: "+canary),
	} {
		p := e.createPolicy(t, fmt.Sprintf("echo-%d", i), credsSecret)
		// HEAD (does the bucket exist?) is answered 404 without a body, so the probe goes
		// on to create the bucket, a PUT answered 403 with the body.
		e.update(t, p, func() { p.Spec.Storage.S3.Endpoint = trap.Endpoint() })
		c := e.waitCondition(t, p, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
		testenv.Eventually(t, waitFor, "a probe of the trap", func() (bool, string) {
			c = e.waitCondition(t, p, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
			return strings.Contains(c.Message, "create bucket"), c.Reason + ": " + c.Message
		})
		if !strings.Contains(c.Message, "403") {
			t.Errorf("StorageReady message %q does not give the status code", c.Message)
		}
		e.waitEvent(t, p.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonStorageNotReady)
		for _, cond := range p.Status.Conditions {
			if strings.Contains(cond.Message, canary) {
				t.Errorf("condition %s echoes the endpoint's body: %s", cond.Type, cond.Message)
			}
		}
		var list eventsv1.EventList
		testenv.Must(t, e.c.List(context.Background(), &list))
		for _, ev := range list.Items {
			if strings.Contains(ev.Note, canary) {
				t.Errorf("event %s on %s echoes the endpoint's body: %s", ev.Reason, ev.Regarding.Name, ev.Note)
			}
		}
	}
}

func (e *env) testSessionReady(t *testing.T) {
	p := e.createPolicy(t, "for-sessions", credsSecret)
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	s := e.createSession(t, "agent-1", p.Name)
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	if s.Status.SessionID != string(s.UID) {
		t.Errorf("sessionID = %q, want the UID %q", s.Status.SessionID, s.UID)
	}
	if !slices.Contains(s.Finalizers, controller.SessionFinalizer) {
		t.Errorf("finalizers = %v, want %s", s.Finalizers, controller.SessionFinalizer)
	}
	want := prefix + "/compaction_records/" + string(s.UID) + "/"
	if r := s.Status.Records; r == nil || r.Bucket != bucket || r.SessionPrefix != want || r.Endpoint != e.minio.Endpoint {
		t.Errorf("records = %+v, want bucket %s, sessionPrefix %s", r, bucket, want)
	}
	for _, ct := range []string{compactionv1alpha1.ConditionPolicyResolved, compactionv1alpha1.ConditionStorageReady} {
		if !meta.IsStatusConditionTrue(s.Status.Conditions, ct) {
			t.Errorf("condition %s not True: %+v", ct, s.Status.Conditions)
		}
	}
	testenv.Eventually(t, waitFor, "policy counts 1 session", func() (bool, string) {
		testenv.Must(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(p), p))
		return ptr.Deref(p.Status.Sessions, 0) == 1, fmt.Sprint(ptr.Deref(p.Status.Sessions, 0))
	})
	e.createSession(t, "agent-2", p.Name)
	testenv.Eventually(t, waitFor, "policy counts 2 sessions", func() (bool, string) {
		testenv.Must(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(p), p))
		return ptr.Deref(p.Status.Sessions, 0) == 2, fmt.Sprint(ptr.Deref(p.Status.Sessions, 0))
	})
}

func (e *env) testSessionPolicyAppearsLater(t *testing.T) {
	s := e.createSession(t, "early", "appears-later")
	c := e.waitCondition(t, s, compactionv1alpha1.ConditionPolicyResolved, metav1.ConditionFalse)
	if c.Reason != compactionv1alpha1.ReasonPolicyNotFound {
		t.Errorf("PolicyResolved reason = %q", c.Reason)
	}
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionFalse)
	e.createPolicy(t, "appears-later", credsSecret)
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
}

// storeFor is the engine's store at the policies' location.
func (e *env) storeFor(t *testing.T) *s3.Store {
	t.Helper()
	st, err := s3.New(context.Background(), s3.Config{Endpoint: e.minio.Endpoint, Bucket: bucket, Prefix: prefix, Insecure: true,
		AccessKey: e.minio.AccessKey, SecretKey: e.minio.SecretKey})
	testenv.Must(t, err)
	return st
}

// putSessionObjects writes tool results, a record and state for sid.
func (e *env) putSessionObjects(t *testing.T, sid string) {
	t.Helper()
	ctx := context.Background()
	st := e.storeFor(t)
	for i := range 3 {
		if _, err := st.PutToolResult(ctx, sid, fmt.Sprintf("call_%d", i), "output "+sid); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Must(t, st.AppendRecord(ctx, &compaction.CompactionRecord{ID: "r1", SessionID: sid, Timestamp: time.Now()}))
	testenv.Must(t, st.SaveState(ctx, sid, &compaction.State{}))
}

// objectsOf lists the keys in the bucket that belong to sid.
func (e *env) objectsOf(t *testing.T, sid string) []string {
	t.Helper()
	var keys []string
	for obj := range e.s3.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatalf("list bucket: %v", obj.Err)
		}
		if strings.Contains(obj.Key, "/"+sid+"/") || strings.HasSuffix(obj.Key, "/"+sid+".json") {
			keys = append(keys, obj.Key)
		}
	}
	return keys
}

func (e *env) waitGone(t *testing.T, obj client.Object) {
	t.Helper()
	testenv.Eventually(t, waitFor, fmt.Sprintf("%s deleted", obj.GetName()), func() (bool, string) {
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v, finalizers %v", err, obj.GetFinalizers())
	})
}

func (e *env) testDeleteRemovesOnlyItsObjects(t *testing.T) {
	p := e.createPolicy(t, "gc", credsSecret)
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	a := e.createSession(t, "gc-a", p.Name)
	b := e.createSession(t, "gc-b", p.Name)
	e.waitCondition(t, a, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	e.waitCondition(t, b, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)

	// extended is an ID that a's ID is a prefix of: a prefix match without the '/' boundary
	// would delete its objects too. Each has two conversations besides its default one (the
	// compaction API's conversation parameter), stored under the session's keys: deleting
	// the session deletes them, and only them.
	sa, sb := string(a.UID), string(b.UID)
	extended := sa + "0"
	for _, sid := range []string{sa, sb, extended} {
		for _, conv := range []string{"", "sub-agent-1", "worker.2"} {
			e.putSessionObjects(t, compaction.ConversationSessionID(sid, conv))
		}
	}
	if n := len(e.objectsOf(t, sa)); n != 15 {
		t.Fatalf("session a has %d objects before deletion, want 15 (5 for each of 3 conversations)", n)
	}

	testenv.Must(t, e.c.Delete(context.Background(), a))
	e.waitGone(t, a)
	if left := e.objectsOf(t, sa); len(left) != 0 {
		t.Errorf("objects of the deleted session left behind: %v", left)
	}
	for _, sid := range []string{sb, extended} {
		if n := len(e.objectsOf(t, sid)); n != 15 {
			t.Errorf("session %s has %d objects after deleting another session, want 15", sid, n)
		}
	}
	e.waitEvent(t, a.Name, corev1.EventTypeNormal, "StorageDeleted")
}

func (e *env) testDeleteAfterPolicyDeleted(t *testing.T) {
	p := e.createPolicy(t, "deleted-first", credsSecret)
	s := e.createSession(t, "orphan", p.Name)
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	sid := string(s.UID)
	e.putSessionObjects(t, sid)

	testenv.Must(t, e.c.Delete(context.Background(), p))
	c := e.waitCondition(t, s, compactionv1alpha1.ConditionPolicyResolved, metav1.ConditionFalse)
	if c.Reason != compactionv1alpha1.ReasonPolicyNotFound {
		t.Errorf("PolicyResolved reason = %q after the policy was deleted", c.Reason)
	}
	testenv.Must(t, e.c.Delete(context.Background(), s))
	e.waitGone(t, s)
	if left := e.objectsOf(t, sid); len(left) != 0 {
		t.Errorf("objects left behind after the policy was deleted first: %v", left)
	}
}

func (e *env) testDeleteWhileStorageDown(t *testing.T) {
	p := e.createPolicy(t, "flaky", credsSecret)
	s := e.createSession(t, "survives-outage", p.Name)
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	sid := string(s.UID)
	e.putSessionObjects(t, sid)

	e.minio.Stop()
	restarted := false
	defer func() {
		if !restarted {
			e.minio.Start()
		}
	}()
	testenv.Must(t, e.c.Delete(context.Background(), s))

	c := e.waitCondition(t, s, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
	if c.Reason != compactionv1alpha1.ReasonStorageDeleteFailed {
		t.Errorf("StorageReady reason = %q while storage is down, want %s", c.Reason, compactionv1alpha1.ReasonStorageDeleteFailed)
	}
	e.waitEvent(t, s.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonStorageDeleteFailed)
	// Several failed attempts later, the session is still held by its finalizer.
	time.Sleep(3 * time.Second)
	testenv.Must(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(s), s))
	if !slices.Contains(s.Finalizers, controller.SessionFinalizer) {
		t.Fatalf("finalizer removed while storage was down: %v", s.Finalizers)
	}

	e.minio.Start()
	restarted = true
	e.waitGone(t, s)
	if left := e.objectsOf(t, sid); len(left) != 0 {
		t.Errorf("objects left behind after storage came back: %v", left)
	}
}

// patchStatus changes obj's status as a user allowed to write agentsessions/status would (no
// admission policy runs in this control plane).
func (e *env) patchStatus(t *testing.T, obj *compactionv1alpha1.AgentSession, change func(*compactionv1alpha1.AgentSessionStatus)) {
	t.Helper()
	base := obj.DeepCopy()
	change(&obj.Status)
	testenv.Must(t, e.c.Status().Patch(context.Background(), obj, client.MergeFrom(base)))
}

// testTamperedSessionID: issue 14. A tenant sets its session's status.sessionID to another
// session's UID, then deletes its session: the garbage collection must delete its own
// objects and leave the other session's alone.
func (e *env) testTamperedSessionID(t *testing.T) {
	p := e.createPolicy(t, "tamper-id", credsSecret)
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	victim := e.createSession(t, "victim", p.Name)
	attacker := e.createSession(t, "attacker", p.Name)
	e.waitCondition(t, victim, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	e.waitCondition(t, attacker, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	vid, aid := string(victim.UID), string(attacker.UID)
	e.putSessionObjects(t, vid)
	e.putSessionObjects(t, aid)

	e.patchStatus(t, attacker, func(st *compactionv1alpha1.AgentSessionStatus) { st.SessionID = vid })
	testenv.Must(t, e.c.Delete(context.Background(), attacker))
	e.waitGone(t, attacker)
	if n := len(e.objectsOf(t, vid)); n != 5 {
		t.Errorf("the victim session has %d objects after the attacker's session (status.sessionID = the victim's UID) was deleted, want its 5", n)
	}
	if left := e.objectsOf(t, aid); len(left) != 0 {
		t.Errorf("the deleted session's own objects were left behind: %v", left)
	}
}

// stolenKey is the access key ID of a Secret in kube-system that no policy names.
const stolenKey = "AKIASTOLENFROMKUBESYSTEM"

// kubeSystemSecret creates the Secret kube-system/cloud-admin holding stolenKey. It is
// labelled for policies' use, so the tests that use it show that the other protections
// (the namespace rule, the pinned location) keep its key from the attacker's endpoint, not
// only the label.
func (e *env) kubeSystemSecret(t *testing.T) compactionv1alpha1.S3CredentialsSecretRef {
	t.Helper()
	ctx := context.Background()
	err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	err = e.c.Create(ctx, builder.CredentialsSecret("kube-system", "cloud-admin",
		map[string]string{"accessKeyID": stolenKey, "secretAccessKey": "the-cluster-admins-secret-key"}))
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return compactionv1alpha1.S3CredentialsSecretRef{
		SecretReference: compactionv1alpha1.SecretReference{Namespace: "kube-system", Name: "cloud-admin"},
		AccessKeyIDKey:  "accessKeyID", SecretAccessKeyKey: "secretAccessKey",
	}
}

// testTamperedRecords: issue 14. A tenant points its session's status.records at a Secret in
// kube-system and at an endpoint it runs, then deletes the session: the operator must never
// send that Secret's key, and must still delete the session's objects where they are.
func (e *env) testTamperedRecords(t *testing.T) {
	trap := testenv.StartCredentialTrap(t)
	stolen := e.kubeSystemSecret(t)
	p := e.createPolicy(t, "tamper-records", credsSecret)
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	s := e.createSession(t, "tampered-records", p.Name)
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	sid := string(s.UID)
	e.putSessionObjects(t, sid)

	e.patchStatus(t, s, func(st *compactionv1alpha1.AgentSessionStatus) {
		st.Records = &compactionv1alpha1.RecordsLocation{Endpoint: trap.Endpoint(), Bucket: "loot", Protocol: compactionv1alpha1.S3HTTP,
			SessionPrefix: "compaction_records/" + sid + "/", CredentialsSecretRef: stolen}
	})
	testenv.Must(t, e.c.Delete(context.Background(), s))
	testenv.Eventually(t, waitFor, s.Name+" deleted", func() (bool, string) {
		if r := trap.Saw(stolenKey); r != "" {
			t.Fatalf("the operator sent kube-system/cloud-admin's access key to the endpoint in status.records: %s", r)
		}
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(s), s)
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v, finalizers %v", err, s.Finalizers)
	})
	if reqs := trap.Requests(); len(reqs) != 0 {
		t.Errorf("the operator sent %d requests to the endpoint in status.records: %v", len(reqs), reqs)
	}
	if left := e.objectsOf(t, sid); len(left) != 0 {
		t.Errorf("the session's objects were left behind: %v", left)
	}
}

// testTamperedStatusCorrected: the operator puts a changed sessionID and records back (a
// status write alone triggers the reconcile) and says so in a Warning event.
func (e *env) testTamperedStatusCorrected(t *testing.T) {
	stolen := e.kubeSystemSecret(t)
	p := e.createPolicy(t, "tamper-report", credsSecret)
	e.waitCondition(t, p, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	s := e.createSession(t, "tampered-report", p.Name)
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	kept := s.Status.Records.DeepCopy()

	e.patchStatus(t, s, func(st *compactionv1alpha1.AgentSessionStatus) {
		st.SessionID = "someone-else"
		st.Records = &compactionv1alpha1.RecordsLocation{Endpoint: "evil.example:443", Bucket: "loot", CredentialsSecretRef: stolen}
	})
	testenv.Eventually(t, waitFor, "status.sessionID and status.records put back", func() (bool, string) {
		testenv.Must(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(s), s))
		return s.Status.SessionID == string(s.UID) && equality.Semantic.DeepEqual(s.Status.Records, kept),
			fmt.Sprintf("sessionID %q, records %+v", s.Status.SessionID, s.Status.Records)
	})
	e.waitEvent(t, s.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonStatusCorrected)
	if !meta.IsStatusConditionTrue(s.Status.Conditions, compactionv1alpha1.ConditionReady) {
		t.Errorf("the session is not Ready after its status was put back: %+v", s.Status.Conditions)
	}
}

func (e *env) testAnnotatedPod(t *testing.T) {
	p := e.createPolicy(t, "for-pods", credsSecret)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coding-agent", Annotations: map[string]string{
			controller.PolicyAnnotation:        p.Name,
			controller.ContextWindowAnnotation: "200000",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}},
	}
	testenv.Must(t, e.c.Create(context.Background(), pod))
	s := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
	e.waitCondition(t, s, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	owner := metav1.GetControllerOf(s)
	if owner == nil || owner.UID != pod.UID || owner.Kind != "Pod" || owner.APIVersion != "v1" || owner.Name != pod.Name {
		t.Errorf("controller ownerReference = %+v, want the pod %s", owner, pod.UID)
	}
	if s.Spec.PolicyRef.Name != p.Name || s.Spec.ContextWindow != 200000 {
		t.Errorf("session spec = %+v", s.Spec)
	}

	// A policy annotation changed afterwards does not move the session (its policyRef is
	// immutable): the pod says why, and the context window annotation still applies.
	other := e.createPolicy(t, "for-pods-later", credsSecret)
	e.update(t, pod, func() {
		pod.Annotations[controller.PolicyAnnotation] = other.Name
		pod.Annotations[controller.ContextWindowAnnotation] = "150000"
	})
	e.waitEvent(t, pod.Name, corev1.EventTypeWarning, compactionv1alpha1.ReasonPolicyChangeRefused)
	testenv.Eventually(t, waitFor, "the new context window", func() (bool, string) {
		testenv.Must(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(s), s))
		return s.Spec.ContextWindow == 150000, fmt.Sprintf("%+v", s.Spec)
	})
	if s.Spec.PolicyRef.Name != p.Name {
		t.Errorf("session policyRef %+v after the pod's annotation changed, want %s kept", s.Spec.PolicyRef, p.Name)
	}

	// An invalid annotation creates nothing and says why on the pod.
	bad := pod.DeepCopy()
	bad.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "bad-agent", Annotations: map[string]string{
		controller.PolicyAnnotation: p.Name, controller.ContextWindowAnnotation: "lots"}}
	testenv.Must(t, e.c.Create(context.Background(), bad))
	e.waitEvent(t, bad.Name, corev1.EventTypeWarning, "InvalidAnnotation")
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: bad.Name}, &compactionv1alpha1.AgentSession{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("session for a pod with an invalid annotation: %v", err)
	}

	// A session deleted while its pod lives is created again.
	testenv.Must(t, e.c.Delete(context.Background(), s))
	testenv.Eventually(t, waitFor, "session re-created for the pod", func() (bool, string) {
		var again compactionv1alpha1.AgentSession
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(s), &again)
		return err == nil && again.UID != s.UID, fmt.Sprint(err)
	})
}

// bindOperatorRBAC grants the user "compaction-operator-test" the rules of
// config/rbac/role.yaml cluster-wide and those of session_location_role.yaml in namespace,
// and returns cfg impersonating that user.
// operatorUser is the user the test manager runs as.
const operatorUser = "compaction-operator-test"

func bindOperatorRBAC(t *testing.T, admin client.Client, cfg *rest.Config, root, namespace string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	const user = operatorUser
	var cr rbacv1.ClusterRole
	readYAML(t, filepath.Join(root, "config", "rbac", "role.yaml"), &cr)
	cr.ObjectMeta = metav1.ObjectMeta{Name: user}
	testenv.Must(t, admin.Create(ctx, &cr))
	testenv.Must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}))
	var role rbacv1.Role
	readYAML(t, filepath.Join(root, "config", "rbac", "session_location_role.yaml"), &role)
	role.ObjectMeta = metav1.ObjectMeta{Namespace: namespace, Name: user}
	testenv.Must(t, admin.Create(ctx, &role))
	testenv.Must(t, admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}))
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	// RBAC reaches the authorizer through a watch: wait until it allows what the manager
	// does first.
	imp, err := client.New(c, client.Options{Scheme: admin.Scheme()})
	testenv.Must(t, err)
	testenv.Eventually(t, waitFor, "RBAC for the test manager", func() (bool, string) {
		err := imp.List(ctx, &compactionv1alpha1.AgentSessionList{})
		return err == nil, fmt.Sprint(err)
	})
	return c
}

func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	data, err := os.ReadFile(path)
	testenv.Must(t, err)
	testenv.Must(t, yaml.Unmarshal(data, out))
}

// waitEvent waits for an events.k8s.io Event about the named object.
func (e *env) waitEvent(t *testing.T, name, eventType, reason string) {
	t.Helper()
	testenv.Eventually(t, waitFor, fmt.Sprintf("%s event %s on %s", eventType, reason, name), func() (bool, string) {
		var list eventsv1.EventList
		if err := e.c.List(context.Background(), &list, client.InNamespace("")); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Regarding.Name == name {
				seen = append(seen, ev.Type+"/"+ev.Reason)
				if ev.Type == eventType && ev.Reason == reason {
					return true, ""
				}
			}
		}
		return false, fmt.Sprint("events: ", seen)
	})
}

// update applies change to a fresh copy of obj and writes it, again after a conflict (the
// operator writing the status since obj was read).
func (e *env) update(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return e.c.Update(context.Background(), obj)
	}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestOperatorCannotListSecrets: issue 14. The operator's ClusterRole lets it get the Secrets
// policies name, never list or watch them (a list or watch returns every Secret's data in
// the cluster).
func TestOperatorCannotListSecrets(t *testing.T) {
	var cr rbacv1.ClusterRole
	readYAML(t, filepath.Join(testenv.RepoRoot(t), "config", "rbac", "role.yaml"), &cr)
	for _, r := range cr.Rules {
		if !slices.Contains(r.APIGroups, "") || (!slices.Contains(r.Resources, "secrets") && !slices.Contains(r.Resources, "*")) {
			continue
		}
		for _, v := range r.Verbs {
			if v != "get" {
				t.Errorf("the operator's ClusterRole allows %q on Secrets; only get", v)
			}
		}
	}
}
