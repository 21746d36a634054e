package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// engineConfig is EngineConfig without its error: the tests check what the engine says.
func engineConfig(spec *compactionv1alpha1.CompactionPolicySpec, window int32) compaction.Config {
	cfg, _ := EngineConfig(spec, window)
	return cfg
}

func TestEngineConfigDefaultsMatchTheEngine(t *testing.T) {
	got := engineConfig(builder.DefaultedSpec(128000), 0)
	// (maxCallsPerHour, 60 by default, limits only the OpenAI summarizer.)
	want := compaction.DefaultConfig(128000)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the CRD defaults make\n%+v\nthe engine's defaults are\n%+v", got, want)
	}
	// A spec stored without pins (written before the field existed and not yet defaulted)
	// keeps the engine's defaults.
	old := builder.DefaultedSpec(128000)
	old.Pins = compactionv1alpha1.PinsSpec{}
	if got := engineConfig(old, 0); got.PinRule != compaction.PinTaskAndInstructions || got.PinBudget != 0.15 {
		t.Errorf("no pins: rule %q budget %v, want TaskAndInstructions 0.15", got.PinRule, got.PinBudget)
	}
}

func TestEngineConfigTargetAndMinSaving(t *testing.T) {
	cases := []struct {
		name                   string
		thresholds             compactionv1alpha1.Thresholds
		wantTarget, wantSaving float64
	}{
		{"defaults", compactionv1alpha1.Thresholds{WarnPercent: 60, SoftPercent: 70, FullPercent: 80, EmergencyPercent: 95, TargetPercent: 50, MinSavingPercent: 15}, 0.50, 0.15},
		{"set", compactionv1alpha1.Thresholds{WarnPercent: 70, SoftPercent: 80, FullPercent: 90, EmergencyPercent: 97, TargetPercent: 35, MinSavingPercent: 25}, 0.35, 0.25},
		{"bounds", compactionv1alpha1.Thresholds{WarnPercent: 2, SoftPercent: 3, FullPercent: 4, EmergencyPercent: 5, TargetPercent: 1, MinSavingPercent: 50}, 0.01, 0.50},
		// Stored before the fields existed and read without defaults: the engine's defaults.
		{"unset", compactionv1alpha1.Thresholds{WarnPercent: 60, SoftPercent: 70, FullPercent: 80, EmergencyPercent: 95}, 0.50, 0.15},
		// Stored before targetPercent existed with warnPercent 50 (the cluster sample's): the
		// API server defaults targetPercent to 50, which the engine would refuse. The target
		// keeps the default's proportion to Warn instead.
		{"old policy with low warn", compactionv1alpha1.Thresholds{WarnPercent: 50, SoftPercent: 65, FullPercent: 80, EmergencyPercent: 95, TargetPercent: 50, MinSavingPercent: 15}, 0.50 * 5 / 6, 0.15},
		{"unset target with low warn", compactionv1alpha1.Thresholds{WarnPercent: 40, SoftPercent: 65, FullPercent: 80, EmergencyPercent: 95}, 0.40 * 5 / 6, 0.15},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := builder.DefaultedSpec(128000)
			spec.Thresholds = tc.thresholds
			cfg := engineConfig(spec, 0)
			if math.Abs(cfg.TargetThreshold-tc.wantTarget) > 1e-9 || math.Abs(cfg.MinSaving-tc.wantSaving) > 1e-9 {
				t.Errorf("target %v min saving %v, want %v %v", cfg.TargetThreshold, cfg.MinSaving, tc.wantTarget, tc.wantSaving)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("the engine rejects the mapped config: %v", err)
			}
		})
	}
}

func TestEngineConfigPins(t *testing.T) {
	cases := []struct {
		rule    compactionv1alpha1.PinRule
		percent int32
		want    compaction.PinRule
		budget  float64
	}{
		{compactionv1alpha1.PinTaskAndInstructions, 15, compaction.PinTaskAndInstructions, 0.15},
		{compactionv1alpha1.PinTask, 1, compaction.PinTask, 0.01},
		{compactionv1alpha1.PinMarked, 50, compaction.PinMarked, 0.50},
		{compactionv1alpha1.PinNone, 30, compaction.PinNone, 0.30},
	}
	for _, tc := range cases {
		t.Run(string(tc.rule), func(t *testing.T) {
			spec := builder.DefaultedSpec(128000)
			spec.Pins = compactionv1alpha1.PinsSpec{Rule: tc.rule, BudgetPercent: tc.percent}
			cfg := engineConfig(spec, 32000)
			if cfg.PinRule != tc.want || cfg.PinBudget != tc.budget {
				t.Errorf("pins {%s, %d%%} made rule %q budget %v, want %q %v", tc.rule, tc.percent, cfg.PinRule, cfg.PinBudget, tc.want, tc.budget)
			}
			if cfg.ContextWindow != 32000 {
				t.Errorf("window override ignored: %d", cfg.ContextWindow)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("the engine rejects the mapped config: %v", err)
			}
		})
	}
}

// TestEveryCRDPinRuleIsAnEngineRule reads the enum the API server enforces from the
// generated CRD: a rule the API accepts but the engine does not know would make every
// compaction of the policy's sessions fail.
func TestEveryCRDPinRuleIsAnEngineRule(t *testing.T) {
	for _, file := range []string{"compaction.harness9.io_compactionpolicies.yaml", "compaction.harness9.io_clustercompactionpolicies.yaml"} {
		data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "config", "crd", "bases", file))
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		pins, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["pins"]
		if !ok {
			t.Fatalf("%s: no spec.pins", file)
		}
		rule := pins.Properties["rule"]
		if len(rule.Enum) != 4 {
			t.Errorf("%s: spec.pins.rule enum %d values, want 4", file, len(rule.Enum))
		}
		for _, raw := range rule.Enum {
			var v compactionv1alpha1.PinRule
			if err := yaml.Unmarshal(raw.Raw, &v); err != nil {
				t.Fatalf("%s: enum value %s: %v", file, raw.Raw, err)
			}
			spec := builder.DefaultedSpec(128000)
			spec.Pins.Rule = v
			if err := engineConfig(spec, 0).Validate(); err != nil {
				t.Errorf("%s: rule %q: %v", file, v, err)
			}
		}
		if d := string(rule.Default.Raw); d != `"TaskAndInstructions"` {
			t.Errorf("%s: spec.pins.rule default %s", file, d)
		}
		budget := pins.Properties["budgetPercent"]
		if budget.Minimum == nil || *budget.Minimum != 1 || budget.Maximum == nil || *budget.Maximum != 50 {
			t.Errorf("%s: spec.pins.budgetPercent bounds %v..%v, want 1..50", file, budget.Minimum, budget.Maximum)
		}
	}
}

// TestCRDThresholdDefaultsAreTheEngines reads the thresholds default the API server applies
// from the generated CRDs: a policy that leaves thresholds out must configure the engine's
// defaults, the target and minimum saving included.
func TestCRDThresholdDefaultsAreTheEngines(t *testing.T) {
	for _, file := range []string{"compaction.harness9.io_compactionpolicies.yaml", "compaction.harness9.io_clustercompactionpolicies.yaml"} {
		data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "config", "crd", "bases", file))
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		th := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["thresholds"]
		if th.Default == nil {
			t.Fatalf("%s: spec.thresholds has no default", file)
		}
		spec := builder.DefaultedSpec(128000)
		spec.Thresholds = compactionv1alpha1.Thresholds{}
		if err := json.Unmarshal(th.Default.Raw, &spec.Thresholds); err != nil {
			t.Fatalf("%s: thresholds default %s: %v", file, th.Default.Raw, err)
		}
		if spec.Thresholds.TargetPercent == 0 || spec.Thresholds.MinSavingPercent == 0 {
			t.Errorf("%s: thresholds default %s lacks targetPercent or minSavingPercent", file, th.Default.Raw)
		}
		// Each field's own default (applied when thresholds is given in part) is the same.
		for name, want := range map[string]int32{"warnPercent": spec.Thresholds.WarnPercent, "softPercent": spec.Thresholds.SoftPercent,
			"fullPercent": spec.Thresholds.FullPercent, "emergencyPercent": spec.Thresholds.EmergencyPercent,
			"targetPercent": spec.Thresholds.TargetPercent, "minSavingPercent": spec.Thresholds.MinSavingPercent} {
			d := th.Properties[name].Default
			if d == nil || string(d.Raw) != fmt.Sprint(want) {
				t.Errorf("%s: spec.thresholds.%s default %v, the object default says %d", file, name, d, want)
			}
		}
		want := compaction.DefaultConfig(128000)
		if got := engineConfig(spec, 0); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the CRD's thresholds default makes\n%+v\nthe engine's defaults are\n%+v", file, got, want)
		}
	}
}

func TestEngineConfigSummarizerBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    *int32
		want int
	}{{"default", ptr.To[int32](60), 60}, {"no limit", ptr.To[int32](0), 0}, {"unset (stored before the field)", nil, 0}, {"set", ptr.To[int32](5), 5}} {
		spec := builder.DefaultedSpec(128000)
		spec.Summarizer.Mode = compactionv1alpha1.SummarizerOpenAI
		spec.Summarizer.MaxCallsPerHour = tc.v
		if got := engineConfig(spec, 0).SummarizerCallsPerHour; got != tc.want {
			t.Errorf("%s: %d calls per hour, want %d", tc.name, got, tc.want)
		}
	}
	// The extractive summarizer is free: never limited, whatever the field says.
	spec := builder.DefaultedSpec(128000)
	if got := engineConfig(spec, 0).SummarizerCallsPerHour; got != 0 {
		t.Errorf("extractive mode: %d calls per hour, want no limit", got)
	}
}

// TestEngineConfigPreviewLines: previewLines 0 (legal in the CRD) keeps no preview line; it
// used to become the engine's default of 10.
func TestEngineConfigPreviewLines(t *testing.T) {
	for _, tc := range []struct {
		v    *int32
		want int
	}{{ptr.To[int32](0), compaction.NoPreviewLines}, {ptr.To[int32](3), 3}, {nil, compaction.DefaultConfig(1).PreviewLines}} {
		spec := builder.DefaultedSpec(128000)
		spec.Offload.PreviewLines = tc.v
		cfg, err := EngineConfig(spec, 0)
		if err != nil || cfg.PreviewLines != tc.want {
			t.Errorf("previewLines %v: %d, %v; want %d", ptr.Deref(tc.v, -1), cfg.PreviewLines, err, tc.want)
		}
	}
}

// TestEngineConfigImageThreshold: imageThresholdBytes 0 (legal in the CRD) offloads no image;
// unset takes the engine's default.
func TestEngineConfigImageThreshold(t *testing.T) {
	for _, tc := range []struct {
		v    *int32
		want int
	}{{ptr.To[int32](0), compaction.NoImageOffload}, {ptr.To[int32](100000), 100000}, {nil, compaction.DefaultImageOffloadThreshold}} {
		spec := builder.DefaultedSpec(128000)
		spec.Offload.ImageThresholdBytes = tc.v
		cfg, err := EngineConfig(spec, 0)
		if err != nil || cfg.ImageOffloadThreshold != tc.want {
			t.Errorf("imageThresholdBytes %v: %d, %v; want %d", ptr.Deref(tc.v, -1), cfg.ImageOffloadThreshold, err, tc.want)
		}
	}
}

// TestEngineConfigRefused: no policy the CRD accepts today is refused by the engine (its CEL
// rules and bounds are the engine's), but one stored before a rule existed can be; EngineConfig
// says so, and the controllers keep such a policy from being Ready.
func TestEngineConfigRefused(t *testing.T) {
	spec := builder.DefaultedSpec(128000)
	spec.Thresholds.SoftPercent = 55 // below warnPercent 60: the CEL rule refuses it now
	if _, err := EngineConfig(spec, 0); !errors.Is(err, ErrInvalidEngineConfig) || !strings.Contains(err.Error(), "soft threshold") {
		t.Errorf("EngineConfig of soft < warn: %v, want ErrInvalidEngineConfig naming the soft threshold", err)
	}
	if _, err := EngineConfig(builder.DefaultedSpec(128000), 0); err != nil {
		t.Errorf("EngineConfig of the defaults: %v", err)
	}
}

// TestEngineConfigPreparePercent: summarizer.preparePercent becomes the engine's
// PrepareThreshold; unset keeps the engine's own default (Warn). A value at or over
// softPercent, which the CRD rejects now but a policy stored before the rule may hold, is
// refused by the engine and said so.
func TestEngineConfigPreparePercent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		percent int32
		want    float64
	}{{"unset: from warn", 0, 0}, {"between warn and soft", 65, 0.65}, {"below warn", 40, 0.40}, {"just below soft", 69, 0.69}} {
		spec := builder.DefaultedSpec(128000)
		spec.Summarizer.Mode = compactionv1alpha1.SummarizerOpenAI
		spec.Summarizer.PreparePercent = ptr.To(tc.percent)
		cfg, err := EngineConfig(spec, 0)
		if err != nil || math.Abs(cfg.PrepareThreshold-tc.want) > 1e-9 {
			t.Errorf("%s: preparePercent %d made PrepareThreshold %v (%v), want %v", tc.name, tc.percent, cfg.PrepareThreshold, err, tc.want)
		}
	}
	spec := builder.DefaultedSpec(128000)
	spec.Summarizer.PreparePercent = ptr.To[int32](70) // softPercent 70
	if _, err := EngineConfig(spec, 0); !errors.Is(err, ErrInvalidEngineConfig) || !strings.Contains(err.Error(), "prepare threshold") {
		t.Errorf("preparePercent at softPercent: %v, want ErrInvalidEngineConfig naming the prepare threshold", err)
	}

	// The generated CRDs bound the field as the engine does and give it no default: an
	// omitted field must keep following warnPercent.
	for _, file := range []string{"compaction.harness9.io_compactionpolicies.yaml", "compaction.harness9.io_clustercompactionpolicies.yaml"} {
		data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "config", "crd", "bases", file))
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		specSchema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		p, ok := specSchema.Properties["summarizer"].Properties["preparePercent"]
		if !ok {
			t.Fatalf("%s: no spec.summarizer.preparePercent", file)
		}
		if p.Minimum == nil || *p.Minimum != 0 || p.Maximum == nil || *p.Maximum != 99 || p.Default != nil {
			t.Errorf("%s: spec.summarizer.preparePercent bounds %v..%v default %v, want 0..99 and none", file, p.Minimum, p.Maximum, p.Default)
		}
		if d := specSchema.Properties["summarizer"].Default; d == nil || strings.Contains(string(d.Raw), "preparePercent") {
			t.Errorf("%s: spec.summarizer default %v must not set preparePercent", file, d)
		}
		found := false
		for _, r := range specSchema.XValidations {
			found = found || strings.Contains(r.Rule, "self.summarizer.preparePercent < self.thresholds.softPercent")
		}
		if !found {
			t.Errorf("%s: spec has no rule keeping preparePercent below softPercent", file)
		}
	}
}
