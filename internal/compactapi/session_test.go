package compactapi

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/testenv"
)

// defaultedSpec is a policy spec as the API server returns it: every default filled in.
func defaultedSpec() *compactionv1alpha1.CompactionPolicySpec {
	return &compactionv1alpha1.CompactionPolicySpec{
		ContextWindow: 128000,
		Thresholds:    compactionv1alpha1.Thresholds{WarnPercent: 60, SoftPercent: 70, FullPercent: 80, EmergencyPercent: 95},
		Offload: compactionv1alpha1.OffloadSpec{ThresholdChars: 4000, HookThresholdChars: 10000,
			PreviewLines: ptr.To[int32](10)},
		MinTailMessages: 6,
		MaxSummaryChars: 6000,
		Summarizer:      compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerExtractive},
		Pins:            compactionv1alpha1.PinsSpec{Rule: compactionv1alpha1.PinTaskAndInstructions, BudgetPercent: 15},
	}
}

func TestEngineConfigDefaultsMatchTheEngine(t *testing.T) {
	got := engineConfig(defaultedSpec(), nil)
	if want := compaction.DefaultConfig(128000); !reflect.DeepEqual(got, want) {
		t.Errorf("the CRD defaults make\n%+v\nthe engine's defaults are\n%+v", got, want)
	}
	// A spec stored without pins (written before the field existed and not yet defaulted)
	// keeps the engine's defaults.
	old := defaultedSpec()
	old.Pins = compactionv1alpha1.PinsSpec{}
	if got := engineConfig(old, nil); got.PinRule != compaction.PinTaskAndInstructions || got.PinBudget != 0.15 {
		t.Errorf("no pins: rule %q budget %v, want TaskAndInstructions 0.15", got.PinRule, got.PinBudget)
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
			spec := defaultedSpec()
			spec.Pins = compactionv1alpha1.PinsSpec{Rule: tc.rule, BudgetPercent: tc.percent}
			cfg := engineConfig(spec, ptr.To[int32](32000))
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
			spec := defaultedSpec()
			spec.Pins.Rule = v
			if err := engineConfig(spec, nil).Validate(); err != nil {
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
