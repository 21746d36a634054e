package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
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

// TestPolicySecretOptIn is issue 28, item 2: writing a CompactionPolicy must not give its
// author the use of every Secret of the namespace. Against the manager binary:
//
//   - a policy naming a Secret without the label compaction.harness9.io/credentials=true, with
//     its storage endpoint and its summarizer at an endpoint the policy's author runs (a
//     credential trap), sends nothing of the Secret there, and its conditions say
//     SecretNotUsable with the message a policy naming a missing Secret gets, word for word;
//   - labelled, the Secret is used: a policy on MinIO naming it becomes Ready;
//   - a Secret whose label is removed after sessions were Ready is no longer used by the
//     compaction API either: no summarizer call carries its API key, and a session whose
//     storage credentials lost the label gets a 503 instead of a request signed with them.
func TestPolicySecretOptIn(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	bin := testenv.BuildManager(t)
	trap := testenv.StartCredentialTrap(t)
	mgr := cl.StartManager(bin, func(c *configv1alpha1.Configuration) {
		c.Secrets.RecheckInterval, c.Secrets.CacheTTL = operator.Duration(time.Second), operator.Duration(time.Second)
		c.Controllers.StorageRetryInterval = operator.Duration(2 * time.Second)
		c.API.SummariesOffTurn = ptr.To(false) // the summarizer request is checked right after the turn
	})
	c, ctx := cl.Client, context.Background()
	agent := mgr.APIClient(t, cl.BindAgent(ns, "agent"))

	const name, apiKey = "team-secret", "sk-team-secret-not-for-policies"
	notUsable := func(what, secret string) string {
		return fmt.Sprintf("%s Secret %q not found or not labelled compaction.harness9.io/credentials=true", what, ns+"/"+secret)
	}
	summarizerAt := func(baseURL, secret string) compactionv1alpha1.SummarizerSpec {
		return compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerOpenAI, OpenAI: compactionv1alpha1.OpenAISummarizerSpec{
			BaseURL: baseURL, Model: "m", TimeoutSeconds: 5,
			APIKeySecretRef: compactionv1alpha1.SecretKeySelector{SecretReference: compactionv1alpha1.SecretReference{Name: secret}, Key: "apiKey"},
		}}
	}
	trapPolicy := func(pname string) *compactionv1alpha1.CompactionPolicy {
		storage := builder.MinIOStorage(trap.Endpoint(), bucket, "optin", name)
		storage.S3.CreateBucket = compactionv1alpha1.BucketCreationNever
		p := builder.Policy(ns, pname).Window(window).Storage(storage).Spec(func(s *compactionv1alpha1.CompactionPolicySpec) {
			s.Summarizer = summarizerAt("http://"+trap.Endpoint()+"/v1", name)
		}).Build()
		testenv.Must(t, c.Create(ctx, p))
		return p
	}
	noValueAtTrap := func(when string) {
		t.Helper()
		for _, v := range []string{m.AccessKey, apiKey} {
			if r := trap.Saw(v); r != "" {
				t.Errorf("%s: a value of the unlabelled Secret reached the endpoint the policy names: %s", when, r)
			}
		}
	}

	// A policy naming the Secret before it exists, then the Secret without the label
	// (MinIO's key pair and an API key), then a policy naming it.
	missing := trapPolicy("names-missing-secret")
	before := waitCondition(t, c, missing, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
	secret := builder.MinIOSecret(ns, name, m.AccessKey, m.SecretKey)
	secret.Labels = nil
	secret.StringData["apiKey"] = apiKey
	testenv.Must(t, c.Create(ctx, secret))
	unlabelled := trapPolicy("names-unlabelled-secret")
	after := waitCondition(t, c, unlabelled, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
	want := notUsable("credentials", name)
	for what, got := range map[string]metav1.Condition{"no Secret": before, "an unlabelled Secret": after} {
		if got.Reason != compactionv1alpha1.ReasonSecretNotUsable || got.Message != want {
			t.Errorf("%s: StorageReady = %s: %q; want %s: %q", what, got.Reason, got.Message, compactionv1alpha1.ReasonSecretNotUsable, want)
		}
	}
	// The first policy has looked at the Secret again meanwhile (every second): no change.
	time.Sleep(3 * time.Second)
	if again := waitCondition(t, c, missing, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse); again.Message != want {
		t.Errorf("the Secret created unlabelled changed the condition: %s: %q", again.Reason, again.Message)
	}
	noValueAtTrap("unlabelled")
	if reqs := trap.Requests(); len(reqs) != 0 {
		t.Errorf("the endpoint the policies name got %d requests: %q", len(reqs), reqs)
	}
	// Storage on MinIO (a labelled Secret), the summarizer's key in the unlabelled Secret.
	cl.CreateMinIOPolicy(ns, "unlabelled-api-key", "optin", m, window, func(s *compactionv1alpha1.CompactionPolicySpec) {
		s.Summarizer = summarizerAt("http://"+trap.Endpoint()+"/v1", name)
	})
	mixed := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unlabelled-api-key"}}
	if r := waitCondition(t, c, mixed, compactionv1alpha1.ConditionReady, metav1.ConditionFalse); r.Reason != compactionv1alpha1.ReasonSummarizerNotReady ||
		r.Message != notUsable("API key", name) {
		t.Errorf("Ready = %s: %q; want %s: %q", r.Reason, r.Message, compactionv1alpha1.ReasonSummarizerNotReady, notUsable("API key", name))
	}

	// Labelled, the Secret is used: a policy on MinIO naming it becomes Ready. (The trap's
	// policies go first: the key would then be theirs to send to their own endpoint.)
	testenv.Must(t, c.Delete(ctx, missing))
	testenv.Must(t, c.Delete(ctx, unlabelled))
	testenv.Must(t, c.Delete(ctx, mixed))
	onMinIO := builder.Policy(ns, "names-labelled-secret").Window(window).Storage(builder.MinIOStorage(m.Endpoint, bucket, "optin", name)).Build()
	testenv.Must(t, c.Create(ctx, onMinIO))
	waitCondition(t, c, onMinIO, compactionv1alpha1.ConditionStorageReady, metav1.ConditionFalse)
	setLabel(t, c, secret, true)
	waitCondition(t, c, onMinIO, compactionv1alpha1.ConditionReady, metav1.ConditionTrue)
	noValueAtTrap("labelled, the trap's policies deleted")

	// The compaction API: sessions Ready while their Secrets were labelled, then the labels go.
	history := testenv.MustLoad(t, filepath.Join(testenv.RepoRoot(t), "testdata", "long-session.jsonl"))
	full := fullPrefix(t, history)
	const llmSecret = "llm-key"
	testenv.Must(t, c.Create(ctx, builder.CredentialsSecret(ns, llmSecret, map[string]string{"apiKey": apiKey})))
	cl.CreateMinIOPolicy(ns, "summarizes", "optin-api", m, window, func(s *compactionv1alpha1.CompactionPolicySpec) {
		s.Summarizer = summarizerAt("http://"+trap.Endpoint()+"/v1", llmSecret)
	})
	summarizing := cl.CreateReadySession(ns, "summarizes", "summarizes")
	// Labelled: the summarizer is called with the key (the trap refuses; the compaction goes
	// on extractively). This shows the request below would carry it if the label were ignored.
	if _, err := agent.Compact(ctx, ns, summarizing.Name, compactclient.CompactRequest{Messages: full}); err != nil {
		t.Logf("compact with the summarizer refusing: %v", err)
	}
	if trap.Saw(apiKey) == "" {
		t.Fatalf("no summarizer call carried the labelled Secret's key: the test proves nothing (requests %q)", trap.Requests())
	}
	llm := &compactionv1alpha1.CompactionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "summarizes"}}
	setLabel(t, c, builder.CredentialsSecret(ns, llmSecret, nil), false)
	if r := waitCondition(t, c, llm, compactionv1alpha1.ConditionReady, metav1.ConditionFalse); r.Message != notUsable("API key", llmSecret) {
		t.Errorf("label removed: Ready = %s: %q", r.Reason, r.Message)
	}
	time.Sleep(2 * time.Second) // past --secret-cache-ttl
	n := len(trap.Requests())
	_, err := agent.Compact(ctx, ns, summarizing.Name, compactclient.CompactRequest{Messages: full})
	expectAPIError(t, err, 503)
	if err != nil && !strings.Contains(err.Error(), "not found or not labelled") {
		t.Errorf("compact with the API key's label removed: %v, want the Secret named as not usable", err)
	}
	if r := trap.SawAfter(n, apiKey); r != "" {
		t.Errorf("the compaction API sent the key of a Secret whose label was removed: %s", r)
	}

	// Storage credentials whose label is removed: the API answers 503 and signs nothing.
	cl.CreateMinIOPolicy(ns, "stores", "optin-store", m, window, nil)
	storing := cl.CreateReadySession(ns, "stores", "stores")
	_, err = agent.Compact(ctx, ns, storing.Name, compactclient.CompactRequest{Messages: history[:20]})
	testenv.Must(t, err)
	setLabel(t, c, builder.CredentialsSecret(ns, "stores-minio", nil), false)
	time.Sleep(2 * time.Second)
	_, err = agent.Compact(ctx, ns, storing.Name, compactclient.CompactRequest{Messages: history[:22]})
	expectAPIError(t, err, 503)
	if err != nil && !strings.Contains(err.Error(), notUsable("credentials", "stores-minio")) {
		t.Errorf("compact with the storage Secret's label removed: %v, want %q", err, notUsable("credentials", "stores-minio"))
	}
}

// fullPrefix is the shortest prefix of history, ending after an assistant turn, whose usage
// of window is in Full (so a compaction of it calls the summarizer) and below Emergency.
func fullPrefix(t *testing.T, history []compaction.Message) []compaction.Message {
	t.Helper()
	cfg := compaction.DefaultConfig(window)
	for _, n := range compaction.AssistantTurns(history) {
		u := cfg.Usage(compaction.EstimateTokens(history[:n]))
		if u >= cfg.FullThreshold+0.01 && u < cfg.EmergencyThreshold {
			return history[:n]
		}
	}
	t.Fatalf("no prefix of the history in Full at a window of %d", window)
	return nil
}

// setLabel adds or removes compaction.harness9.io/credentials=true on the Secret.
func setLabel(t *testing.T, c client.Client, secret client.Object, on bool) {
	t.Helper()
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(secret), secret); err != nil {
			return err
		}
		labels := secret.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		if on {
			labels[compactionv1alpha1.CredentialsLabel] = compactionv1alpha1.CredentialsLabelValue
		} else {
			delete(labels, compactionv1alpha1.CredentialsLabel)
		}
		secret.SetLabels(labels)
		return c.Update(context.Background(), secret)
	}))
}

// waitCondition waits until the policy's condition condType has status want for its current
// generation, and returns it.
func waitCondition(t *testing.T, c client.Client, p *compactionv1alpha1.CompactionPolicy, condType string, want metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	testenv.Eventually(t, waitFor, fmt.Sprintf("policy %s: %s=%s", p.Name, condType, want), func() (bool, string) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(p.Status.Conditions, condType)
		if cond == nil {
			return false, "no condition"
		}
		got = *cond
		return cond.Status == want && cond.ObservedGeneration == p.Generation, fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
	})
	return got
}
