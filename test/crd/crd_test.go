// Package crd tests the generated CustomResourceDefinitions of api/v1alpha1 against a real
// kube-apiserver: the samples apply, defaults are filled in and the validation rules
// (bounds, enums, CEL) reject bad objects with readable messages.
package crd

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
	"github.com/harness9/compaction-operator/internal/policy"
)

const ns = "default"

// TestCRDs starts one control plane with the generated CRDs and runs every check in it.
func TestCRDs(t *testing.T) {
	root := testenv.RepoRoot(t)
	_, cfg := kubeenv.Start(t, kubeenv.Options{
		CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")},
	})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("SamplesApply", func(t *testing.T) { testSamplesApply(t, c, root) })
	t.Run("Defaults", func(t *testing.T) { testDefaults(t, c) })
	t.Run("AgentSessionDefaults", func(t *testing.T) { testAgentSessionDefaults(t, c) })
	t.Run("Rejections", func(t *testing.T) { testRejections(t, c) })
	t.Run("AgentSessionPolicyKind", func(t *testing.T) { testAgentSessionPolicyKind(t, c) })
	t.Run("PrinterColumns", func(t *testing.T) { testPrinterColumns(t, root) })
	t.Run("ShortNamesDoNotCollide", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		testShortNames(t, dc)
	})
}

func testSamplesApply(t *testing.T, c client.Client, root string) {
	dir := filepath.Join(root, "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if u.GetKind() != "ClusterCompactionPolicy" && u.GetNamespace() == "" {
				u.SetNamespace(ns)
			}
			if err := c.Create(context.Background(), u); err != nil {
				t.Errorf("create %s %s from %s: %v", u.GetKind(), u.GetName(), filepath.Base(f), err)
				continue
			}
			kinds[u.GetKind()] = true
		}
	}
	for _, k := range []string{"CompactionPolicy", "ClusterCompactionPolicy", "AgentSession"} {
		if !kinds[k] {
			t.Errorf("config/samples has no %s that applies", k)
		}
	}
}

// minimalSpec is the smallest valid policy spec: only the required fields.
func minimalSpec() v1alpha1.CompactionPolicySpec {
	return v1alpha1.CompactionPolicySpec{
		ContextWindow: 128000,
		Storage: v1alpha1.StorageSpec{S3: v1alpha1.S3StorageSpec{
			Endpoint: "minio:9000",
			Bucket:   "sessions",
		}},
	}
}

// createPolicy creates a CompactionPolicy from the raw spec map, so tests can omit fields
// that Go would otherwise send as zero values.
func createPolicy(c client.Client, name string, spec map[string]any) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "CompactionPolicy",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       spec,
	}}
	return c.Create(context.Background(), u)
}

func rawMinimalSpec() map[string]any {
	return map[string]any{
		"contextWindow": int64(128000),
		"storage": map[string]any{"s3": map[string]any{
			"endpoint": "minio:9000",
			"bucket":   "sessions",
			"credentialsSecretRef": map[string]any{
				"name": "creds",
			},
		}},
	}
}

// testPreparePercent: summarizer.preparePercent is kept as set, below softPercent or 0 (from
// warnPercent), and it reaches the engine; a summarizer given without it gets the other
// defaults as before.
func testPreparePercent(t *testing.T, c client.Client, got *v1alpha1.CompactionPolicy) {
	t.Helper()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		percent int64
		want    float64
	}{{"prepare-65", 65, 0.65}, {"prepare-below-warn", 40, 0.40}, {"prepare-0", 0, 0}} {
		spec := rawMinimalSpec()
		spec["summarizer"] = map[string]any{"mode": "OpenAI", "preparePercent": tc.percent,
			"openAI": map[string]any{"baseURL": "http://llm:8080/v1", "model": "m"}}
		if err := createPolicy(c, tc.name, spec); err != nil {
			t.Fatalf("create policy with preparePercent %d: %v", tc.percent, err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.name}, got); err != nil {
			t.Fatal(err)
		}
		sum := got.Spec.Summarizer
		if int64(ptr.Deref(sum.PreparePercent, 0)) != tc.percent || ptr.Deref(sum.MaxCallsPerHour, -1) != 60 {
			t.Errorf("%s: summarizer read back as %+v, want preparePercent %d and maxCallsPerHour defaulted to 60", tc.name, sum, tc.percent)
		}
		if cfg, err := policy.EngineConfig(&got.Spec, 0); err != nil || math.Abs(cfg.PrepareThreshold-tc.want) > 1e-9 {
			t.Errorf("%s: engine PrepareThreshold %v (%v), want %v", tc.name, cfg.PrepareThreshold, err, tc.want)
		}
	}
}

func testDefaults(t *testing.T, c client.Client) {
	ctx := context.Background()
	if err := createPolicy(c, "minimal", rawMinimalSpec()); err != nil {
		t.Fatalf("create minimal policy: %v", err)
	}
	got := &v1alpha1.CompactionPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minimal"}, got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	// The CRD's defaults are the engine's: compared with compaction.DefaultConfig, so the two
	// cannot drift apart.
	d := compaction.DefaultConfig(int(s.ContextWindow))
	percent := func(f float64) int64 { return int64(math.Round(f * 100)) }
	checks := []struct {
		field     string
		got, want int64
	}{
		{"thresholds.warnPercent", int64(s.Thresholds.WarnPercent), percent(d.WarnThreshold)},
		{"thresholds.softPercent", int64(s.Thresholds.SoftPercent), percent(d.SoftThreshold)},
		{"thresholds.fullPercent", int64(s.Thresholds.FullPercent), percent(d.FullThreshold)},
		{"thresholds.emergencyPercent", int64(s.Thresholds.EmergencyPercent), percent(d.EmergencyThreshold)},
		{"thresholds.targetPercent", int64(s.Thresholds.TargetPercent), percent(d.TargetThreshold)},
		{"thresholds.minSavingPercent", int64(s.Thresholds.MinSavingPercent), percent(d.MinSaving)},
		{"offload.thresholdChars", int64(s.Offload.ThresholdChars), int64(d.OffloadThreshold)},
		{"offload.hookThresholdChars", int64(s.Offload.HookThresholdChars), int64(d.HookThreshold)},
		{"offload.previewLines", int64(ptr.Deref(s.Offload.PreviewLines, -1)), int64(d.PreviewLines)},
		{"minTailMessages", int64(s.MinTailMessages), int64(d.MinTailMessages)},
		{"maxSummaryChars", int64(s.MaxSummaryChars), int64(d.MaxSummaryChars)},
		{"pins.budgetPercent", int64(s.Pins.BudgetPercent), percent(d.PinBudget)},
		// Only the OpenAI summarizer is limited (the engine's default is no limit).
		{"summarizer.maxCallsPerHour", int64(ptr.Deref(s.Summarizer.MaxCallsPerHour, -1)), 60},
	}
	if cfg, err := policy.EngineConfig(&s, 0); err != nil || !reflect.DeepEqual(cfg, d) {
		t.Errorf("the defaulted policy makes the engine configuration\n%+v (%v)\nthe engine's defaults are\n%+v", cfg, err, d)
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s defaulted to %d, want %d", ch.field, ch.got, ch.want)
		}
	}
	if s.Summarizer.Mode != v1alpha1.SummarizerExtractive {
		t.Errorf("summarizer.mode defaulted to %q, want Extractive", s.Summarizer.Mode)
	}
	// The tests' defaulted fixture is what the API server makes of a minimal policy.
	fixture := builder.DefaultedSpec(s.ContextWindow)
	fixture.Storage = s.Storage
	if !reflect.DeepEqual(&s, fixture) {
		t.Errorf("builder.DefaultedSpec is not the API server's defaulting:\n%+v\nthe API server:\n%+v", *fixture, s)
	}
	if s.AnchorsInStatus != v1alpha1.AnchorsOmit {
		t.Errorf("anchorsInStatus defaulted to %q, want Omit: anchors are conversation content", s.AnchorsInStatus)
	}
	if s.Pins.Rule != v1alpha1.PinTaskAndInstructions || s.Pins.BudgetPercent != 15 {
		t.Errorf("pins defaulted to {rule: %q, budgetPercent: %d}, want {rule: TaskAndInstructions, budgetPercent: 15}", s.Pins.Rule, s.Pins.BudgetPercent)
	}

	// pins given in part: the rest is defaulted, what was given is kept.
	spec := rawMinimalSpec()
	spec["pins"] = map[string]any{"rule": "Marked"}
	if err := createPolicy(c, "pins-marked", spec); err != nil {
		t.Fatalf("create policy with pins.rule Marked: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pins-marked"}, got); err != nil {
		t.Fatal(err)
	}
	if p := got.Spec.Pins; p.Rule != v1alpha1.PinMarked || p.BudgetPercent != 15 {
		t.Errorf("pins {rule: Marked} read back as %+v, want budgetPercent defaulted to 15", p)
	}
	// thresholds given in part: targetPercent and minSavingPercent are defaulted too.
	spec = rawMinimalSpec()
	spec["thresholds"] = map[string]any{"warnPercent": int64(65), "minSavingPercent": int64(30)}
	if err := createPolicy(c, "thresholds-partial", spec); err != nil {
		t.Fatalf("create policy with thresholds {warnPercent: 65, minSavingPercent: 30}: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "thresholds-partial"}, got); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.Thresholds{WarnPercent: 65, SoftPercent: 70, FullPercent: 80, EmergencyPercent: 95, TargetPercent: 50, MinSavingPercent: 30}
	if th := got.Spec.Thresholds; th != want {
		t.Errorf("thresholds {warnPercent: 65, minSavingPercent: 30} read back as %+v, want %+v", th, want)
	}
	ref := s.Storage.S3.CredentialsSecretRef
	if !ref.IsSet() || ref.AccessKeyIDKey != "accessKeyID" || ref.SecretAccessKeyKey != "secretAccessKey" {
		t.Errorf("credentialsSecretRef defaults: %+v", ref)
	}

	// previewLines 0 is a legal value and stays 0.
	spec = rawMinimalSpec()
	spec["offload"] = map[string]any{"previewLines": int64(0)}
	if err := createPolicy(c, "no-preview", spec); err != nil {
		t.Fatalf("create policy with previewLines 0: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "no-preview"}, got); err != nil {
		t.Fatal(err)
	}
	if p := got.Spec.Offload.PreviewLines; p == nil || *p != 0 {
		t.Errorf("previewLines 0 read back as %v", p)
	}
	// ... and keeps no preview line in the engine (it used to become the default of 10).
	if cfg, err := policy.EngineConfig(&got.Spec, 0); err != nil || cfg.PreviewLines != compaction.NoPreviewLines {
		t.Errorf("previewLines 0 makes engine PreviewLines %d (%v), want NoPreviewLines", cfg.PreviewLines, err)
	}

	// The OpenAI summarizer's defaults, through the typed client.
	openAI := &v1alpha1.CompactionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "openai", Namespace: ns},
		Spec:       minimalSpec(),
	}
	openAI.Spec.Summarizer = v1alpha1.SummarizerSpec{
		Mode:   v1alpha1.SummarizerOpenAI,
		OpenAI: v1alpha1.OpenAISummarizerSpec{BaseURL: "http://llm:8080/v1", Model: "m"},
	}
	if err := c.Create(ctx, openAI); err != nil {
		t.Fatalf("create OpenAI policy: %v", err)
	}
	o := openAI.Spec.Summarizer.OpenAI
	if o.TimeoutSeconds != 60 || o.MaxOutputTokens != 1024 {
		t.Errorf("openAI defaults: timeoutSeconds %d, maxOutputTokens %d", o.TimeoutSeconds, o.MaxOutputTokens)
	}
	if o.MaxTokensField != v1alpha1.OpenAIMaxTokens {
		t.Errorf("openAI defaults: maxTokensField %q, want %q", o.MaxTokensField, v1alpha1.OpenAIMaxTokens)
	}
	// The other field, for OpenAI's reasoning models, is kept as set.
	reasoning := &v1alpha1.CompactionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "openai-reasoning", Namespace: ns},
		Spec:       minimalSpec(),
	}
	reasoning.Spec.Summarizer = v1alpha1.SummarizerSpec{
		Mode: v1alpha1.SummarizerOpenAI,
		OpenAI: v1alpha1.OpenAISummarizerSpec{BaseURL: "https://api.openai.com/v1", Model: "o3-mini",
			MaxTokensField: v1alpha1.OpenAIMaxCompletionTokens},
	}
	if err := c.Create(ctx, reasoning); err != nil {
		t.Fatalf("create OpenAI policy with maxTokensField MaxCompletionTokens: %v", err)
	}
	if f := reasoning.Spec.Summarizer.OpenAI.MaxTokensField; f != v1alpha1.OpenAIMaxCompletionTokens {
		t.Errorf("maxTokensField MaxCompletionTokens read back as %q", f)
	}

	testPreparePercent(t, c, got)

	// A minimal policy reaches its storage over HTTPS and creates no bucket.
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minimal"}, got); err != nil {
		t.Fatal(err)
	}
	if s3 := got.Spec.Storage.S3; s3.Protocol != v1alpha1.S3HTTPS || s3.CreateBucket != v1alpha1.BucketCreationNever {
		t.Errorf("storage.s3 defaults: protocol %q createBucket %q, want HTTPS Never", s3.Protocol, s3.CreateBucket)
	}
}

// testAgentSessionDefaults: a minimal AgentSession defaults its policyRef kind, and its
// policyRef cannot change.
func testAgentSessionDefaults(t *testing.T, c client.Client) {
	ctx := context.Background()
	// A minimal AgentSession defaults its policyRef kind.
	as := &v1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: "minimal", Namespace: ns},
		Spec:       v1alpha1.AgentSessionSpec{PolicyRef: v1alpha1.PolicyReference{Name: "minimal"}},
	}
	if err := c.Create(ctx, as); err != nil {
		t.Fatalf("create minimal AgentSession: %v", err)
	}
	if as.Spec.PolicyRef.Kind != v1alpha1.PolicyKindNamespaced {
		t.Errorf("policyRef.kind defaulted to %q, want CompactionPolicy", as.Spec.PolicyRef.Kind)
	}
	// policyRef cannot change: the session's objects stay where its first policy put them.
	for _, change := range []func(*v1alpha1.PolicyReference){
		func(r *v1alpha1.PolicyReference) { r.Name = "another" },
		func(r *v1alpha1.PolicyReference) { r.Kind = v1alpha1.PolicyKindCluster },
	} {
		moved := as.DeepCopy()
		change(&moved.Spec.PolicyRef)
		if err := c.Update(ctx, moved); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "policyRef is immutable") {
			t.Errorf("update policyRef to %+v: %v, want Invalid: policyRef is immutable", moved.Spec.PolicyRef, err)
		}
	}
	// Other spec fields may still change.
	as.Spec.ContextWindow = 64000
	if err := c.Update(ctx, as); err != nil {
		t.Errorf("update contextWindow: %v", err)
	}
}

func testRejections(t *testing.T, c client.Client) {
	cases := []struct {
		name   string
		mutate func(spec map[string]any)
		want   string
	}{
		{
			name: "insecure-bool-is-gone",
			mutate: func(s map[string]any) {
				s["storage"].(map[string]any)["s3"].(map[string]any)["protocol"] = true
			},
			want: `spec.storage.s3.protocol: Unsupported value: true: supported values: "HTTPS", "HTTP"`,
		},
		{
			name: "create-bucket-bool-is-gone",
			mutate: func(s map[string]any) {
				s["storage"].(map[string]any)["s3"].(map[string]any)["createBucket"] = true
			},
			want: `spec.storage.s3.createBucket: Unsupported value: true: supported values: "Never", "IfNotPresent"`,
		},
		{
			name: "empty-prefix",
			mutate: func(s map[string]any) {
				s["storage"].(map[string]any)["s3"].(map[string]any)["prefix"] = ""
			},
			want: "spec.storage.s3.prefix",
		},
		{
			name: "warn-equals-soft",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"warnPercent": int64(70), "softPercent": int64(70)}
			},
			want: "thresholds must be strictly increasing: warnPercent < softPercent < fullPercent < emergencyPercent",
		},
		{
			name: "warn-above-soft",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"warnPercent": int64(75)}
			},
			want: "thresholds must be strictly increasing",
		},
		{
			name: "percent-over-100",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"emergencyPercent": int64(101)}
			},
			want: "spec.thresholds.emergencyPercent: Invalid value: 101: spec.thresholds.emergencyPercent in body should be less than or equal to 100",
		},
		{
			name: "target-equals-warn",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"warnPercent": int64(60), "targetPercent": int64(60)}
			},
			want: "targetPercent must be below warnPercent: a compaction has to bring the context below the Warn tier",
		},
		{
			name: "target-above-warn",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"targetPercent": int64(75)}
			},
			want: "targetPercent must be below warnPercent",
		},
		{
			// The defaulted targetPercent (50) applies: the message says to lower it.
			name: "warn-at-default-target",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"warnPercent": int64(50)}
			},
			want: "targetPercent defaults to 50: lower it when you set warnPercent to 50 or less",
		},
		{
			name: "target-0",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"targetPercent": int64(0)}
			},
			want: "spec.thresholds.targetPercent: Invalid value: 0: spec.thresholds.targetPercent in body should be greater than or equal to 1",
		},
		{
			name: "min-saving-0",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"minSavingPercent": int64(0)}
			},
			want: "spec.thresholds.minSavingPercent: Invalid value: 0: spec.thresholds.minSavingPercent in body should be greater than or equal to 1",
		},
		{
			name: "min-saving-51",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"minSavingPercent": int64(51)}
			},
			want: "spec.thresholds.minSavingPercent: Invalid value: 51: spec.thresholds.minSavingPercent in body should be less than or equal to 50",
		},
		{
			name: "unknown-pin-rule",
			mutate: func(s map[string]any) {
				s["pins"] = map[string]any{"rule": "Everything"}
			},
			want: `spec.pins.rule: Unsupported value: "Everything": supported values: "TaskAndInstructions", "Task", "Marked", "None"`,
		},
		{
			name: "unknown-anchors-in-status",
			mutate: func(s map[string]any) {
				s["anchorsInStatus"] = "Always"
			},
			want: `spec.anchorsInStatus: Unsupported value: "Always": supported values: "Omit", "Include"`,
		},
		{
			name: "pin-budget-0",
			mutate: func(s map[string]any) {
				s["pins"] = map[string]any{"budgetPercent": int64(0)}
			},
			want: "spec.pins.budgetPercent: Invalid value: 0: spec.pins.budgetPercent in body should be greater than or equal to 1",
		},
		{
			name: "pin-budget-51",
			mutate: func(s map[string]any) {
				s["pins"] = map[string]any{"rule": "Task", "budgetPercent": int64(51)}
			},
			want: "spec.pins.budgetPercent: Invalid value: 51: spec.pins.budgetPercent in body should be less than or equal to 50",
		},
		{
			name: "openai-mode-without-openai",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "OpenAI"}
			},
			want: "summarizer.openAI is required when mode is OpenAI",
		},
		{
			name: "unknown-mode",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "Magic"}
			},
			want: `Unsupported value: "Magic"`,
		},
		{
			name: "openai-bad-base-url",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "OpenAI", "openAI": map[string]any{"baseURL": "ftp://x/v1", "model": "m"}}
			},
			want: "spec.summarizer.openAI.baseURL",
		},
		{
			// The wire name is not an enum value: the API speaks CamelCase.
			name: "openai-max-tokens-field-wire-name",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "OpenAI", "openAI": map[string]any{
					"baseURL": "https://x/v1", "model": "m", "maxTokensField": "max_completion_tokens"}}
			},
			want: `spec.summarizer.openAI.maxTokensField: Unsupported value: "max_completion_tokens"`,
		},
		{
			name:   "context-window-too-small",
			mutate: func(s map[string]any) { s["contextWindow"] = int64(100) },
			want:   "spec.contextWindow",
		},
		{
			name:   "no-storage",
			mutate: func(s map[string]any) { delete(s, "storage") },
			want:   "spec.storage: Required value",
		},
		{
			name: "bad-bucket",
			mutate: func(s map[string]any) {
				s["storage"].(map[string]any)["s3"].(map[string]any)["bucket"] = "Not_A_Bucket"
			},
			want: "spec.storage.s3.bucket",
		},
		{
			name: "prefix-absolute",
			mutate: func(s map[string]any) {
				s["storage"].(map[string]any)["s3"].(map[string]any)["prefix"] = "/abs"
			},
			want: "prefix must not start with '/'",
		},
		{
			name: "prefix-dotdot",
			mutate: func(s map[string]any) {
				s["storage"].(map[string]any)["s3"].(map[string]any)["prefix"] = "a/../b"
			},
			want: "prefix must not contain '..'",
		},
		{
			name: "secret-namespace-in-namespaced-policy",
			mutate: func(s map[string]any) {
				s["storage"].(map[string]any)["s3"].(map[string]any)["credentialsSecretRef"] = map[string]any{"name": "creds", "namespace": "other"}
			},
			want: "namespace is only allowed in a ClusterCompactionPolicy",
		},
		{
			name: "summarizer-calls-per-hour-over-3600",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "Extractive", "maxCallsPerHour": int64(3601)}
			},
			want: "spec.summarizer.maxCallsPerHour",
		},
		{
			name: "summarizer-calls-per-hour-negative",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "Extractive", "maxCallsPerHour": int64(-1)}
			},
			want: "spec.summarizer.maxCallsPerHour",
		},
		{
			name: "prepare-at-soft",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "Extractive", "preparePercent": int64(70)}
			},
			want: "spec.summarizer.preparePercent: Invalid value: summarizer.preparePercent must be below thresholds.softPercent: " +
				"the summary is prepared before the Soft compaction that needs it (0 or unset prepares from warnPercent)",
		},
		{
			// Checked against the policy's own softPercent, not the default's.
			name: "prepare-above-set-soft",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"softPercent": int64(75)}
				s["summarizer"] = map[string]any{"mode": "Extractive", "preparePercent": int64(76)}
			},
			want: "summarizer.preparePercent must be below thresholds.softPercent",
		},
		{
			name: "prepare-negative",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "Extractive", "preparePercent": int64(-1)}
			},
			want: "spec.summarizer.preparePercent: Invalid value: -1: spec.summarizer.preparePercent in body should be greater than or equal to 0",
		},
		{
			name: "prepare-100",
			mutate: func(s map[string]any) {
				s["thresholds"] = map[string]any{"warnPercent": int64(97), "softPercent": int64(98), "fullPercent": int64(99), "emergencyPercent": int64(100)}
				s["summarizer"] = map[string]any{"mode": "Extractive", "preparePercent": int64(100)}
			},
			want: "spec.summarizer.preparePercent: Invalid value: 100: spec.summarizer.preparePercent in body should be less than or equal to 99",
		},
		{
			name: "api-key-namespace-in-namespaced-policy",
			mutate: func(s map[string]any) {
				s["summarizer"] = map[string]any{"mode": "OpenAI", "openAI": map[string]any{
					"baseURL": "https://x/v1", "model": "m",
					"apiKeySecretRef": map[string]any{"name": "k", "key": "apiKey", "namespace": "other"},
				}}
			},
			want: "namespace is only allowed in a ClusterCompactionPolicy",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := rawMinimalSpec()
			tc.mutate(spec)
			err := createPolicy(c, "reject-"+tc.name, spec)
			if err == nil {
				t.Fatalf("created, want rejection containing %q", tc.want)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant Invalid containing %q", err, tc.want)
			}
		})
	}

	// A ClusterCompactionPolicy may name the Secrets' namespace.
	cp := &v1alpha1.ClusterCompactionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "with-secret-namespace"},
		Spec:       v1alpha1.ClusterCompactionPolicySpec{CompactionPolicySpec: minimalSpec()},
	}
	cp.Spec.Storage.S3.CredentialsSecretRef = v1alpha1.S3CredentialsSecretRef{
		SecretReference: v1alpha1.SecretReference{Name: "creds", Namespace: "compaction-system"},
	}
	if err := c.Create(context.Background(), cp); err != nil {
		t.Fatalf("ClusterCompactionPolicy with a secret namespace: %v", err)
	}
	// The cluster-scoped kind shares the spec, pins defaults included.
	if p := cp.Spec.Pins; p.Rule != v1alpha1.PinTaskAndInstructions || p.BudgetPercent != 15 {
		t.Errorf("ClusterCompactionPolicy pins defaulted to %+v, want TaskAndInstructions and 15", p)
	}
	if th := cp.Spec.Thresholds; th.TargetPercent != 50 || th.MinSavingPercent != 15 {
		t.Errorf("ClusterCompactionPolicy thresholds defaulted to %+v, want targetPercent 50 and minSavingPercent 15", th)
	}
	// ... and its validation rules.
	bad := &v1alpha1.ClusterCompactionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "target-above-warn"},
		Spec: v1alpha1.ClusterCompactionPolicySpec{CompactionPolicySpec: minimalSpec()}}
	bad.Spec.Thresholds = v1alpha1.Thresholds{WarnPercent: 60, SoftPercent: 70, FullPercent: 80, EmergencyPercent: 95, TargetPercent: 60, MinSavingPercent: 15}
	if err := c.Create(context.Background(), bad); err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "targetPercent must be below warnPercent") {
		t.Errorf("ClusterCompactionPolicy with targetPercent 60 and warnPercent 60: %v, want Invalid with the targetPercent message", err)
	}
	bad.Spec.Thresholds.TargetPercent, bad.Spec.Thresholds.MinSavingPercent = 50, 60
	if err := c.Create(context.Background(), bad); err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.thresholds.minSavingPercent") {
		t.Errorf("ClusterCompactionPolicy with minSavingPercent 60: %v, want Invalid on spec.thresholds.minSavingPercent", err)
	}
	bad.Spec.Thresholds.MinSavingPercent = 15
	bad.Spec.Summarizer.PreparePercent = ptr.To[int32](80)
	if err := c.Create(context.Background(), bad); err == nil || !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "spec.summarizer.preparePercent") || !strings.Contains(err.Error(), "must be below thresholds.softPercent") {
		t.Errorf("ClusterCompactionPolicy with preparePercent 80 and softPercent 70: %v, want Invalid on spec.summarizer.preparePercent", err)
	}
}

func testAgentSessionPolicyKind(t *testing.T, c client.Client) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "AgentSession",
		"metadata":   map[string]any{"name": "bad-kind", "namespace": ns},
		"spec":       map[string]any{"policyRef": map[string]any{"kind": "Secret", "name": "x"}},
	}}
	err := c.Create(context.Background(), u)
	if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.policyRef.kind") {
		t.Fatalf("AgentSession with policyRef.kind Secret: %v, want Invalid on spec.policyRef.kind", err)
	}
	u.Object["spec"] = map[string]any{"policyRef": map[string]any{"kind": "ClusterCompactionPolicy", "name": "x"}, "contextWindow": int64(10)}
	if err := c.Create(context.Background(), u); err == nil || !strings.Contains(err.Error(), "spec.contextWindow") {
		t.Fatalf("AgentSession with contextWindow 10: %v, want Invalid on spec.contextWindow", err)
	}
}

func testPrinterColumns(t *testing.T, root string) {
	want := map[string]struct {
		shortName string
		columns   []string
	}{
		"compaction.harness9.io_compactionpolicies.yaml":        {"acp", []string{"Window", "Warn", "Full", "Ready", "Sessions", "Age"}},
		"compaction.harness9.io_clustercompactionpolicies.yaml": {"cacp", []string{"Window", "Warn", "Full", "Ready", "Sessions", "Age"}},
		"compaction.harness9.io_agentsessions.yaml":             {"ags", []string{"Policy", "Tier", "Usage", "Ratio", "Ready", "Proxy", "Age"}},
	}
	for file, w := range want {
		data, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", file))
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(crd.Spec.Versions) != 1 {
			t.Fatalf("%s: %d versions", file, len(crd.Spec.Versions))
		}
		v := crd.Spec.Versions[0]
		got := make([]string, 0, len(v.AdditionalPrinterColumns))
		for _, col := range v.AdditionalPrinterColumns {
			got = append(got, col.Name)
			if col.Name == "Ready" && col.JSONPath != `.status.conditions[?(@.type=="Ready")].status` {
				t.Errorf("%s: Ready column path %q", file, col.JSONPath)
			}
		}
		if !slices.Equal(got, w.columns) {
			t.Errorf("%s: printer columns %v, want %v", file, got, w.columns)
		}
		if v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("%s: no status subresource", file)
		}
		if !slices.Equal(crd.Spec.Names.ShortNames, []string{w.shortName}) || !slices.Equal(crd.Spec.Names.Categories, []string{"compaction"}) {
			t.Errorf("%s: shortNames %v categories %v", file, crd.Spec.Names.ShortNames, crd.Spec.Names.Categories)
		}
	}
}

// testShortNames checks that no resource served by the real API server (built-in or
// aggregated) other than ours uses our short names.
func testShortNames(t *testing.T, dc discovery.DiscoveryInterface) {
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{"acp": true, "cacp": true, "ags": true}
	found := map[string]bool{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			for _, sn := range r.ShortNames {
				if !ours[sn] {
					continue
				}
				if l.GroupVersion != v1alpha1.GroupVersion.String() {
					t.Errorf("short name %q is also used by %s %s", sn, l.GroupVersion, r.Name)
				}
				found[sn] = true
			}
			if l.GroupVersion != v1alpha1.GroupVersion.String() && slices.Contains(r.ShortNames, "as") {
				t.Logf("note: %s %s uses short name \"as\"", l.GroupVersion, r.Name)
			}
		}
	}
	for sn := range ours {
		if !found[sn] {
			t.Errorf("short name %q not served", sn)
		}
	}
}
