package policy

import (
	"errors"
	"fmt"

	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

// ErrInvalidEngineConfig is wrapped by EngineConfig when the engine refuses the configuration
// a policy makes.
var ErrInvalidEngineConfig = errors.New("the compaction engine refuses the policy's configuration")

// EngineConfig maps a policy, and a session's contextWindow override (0: none), to the
// engine's configuration, and validates it the way the engine does. The controllers report an
// error as the policy's Ready condition; the compaction API answers it with a 409.
func EngineConfig(spec *compactionv1alpha1.CompactionPolicySpec, window int32) (compaction.Config, error) {
	cfg := compaction.DefaultConfig(int(spec.ContextWindow))
	if window > 0 {
		cfg.ContextWindow = int(window)
	}
	t := spec.Thresholds
	set := func(dst *float64, percent int32) {
		if percent > 0 {
			*dst = float64(percent) / 100
		}
	}
	set(&cfg.WarnThreshold, t.WarnPercent)
	set(&cfg.SoftThreshold, t.SoftPercent)
	set(&cfg.FullThreshold, t.FullPercent)
	set(&cfg.EmergencyThreshold, t.EmergencyPercent)
	set(&cfg.TargetThreshold, t.TargetPercent)
	set(&cfg.MinSaving, t.MinSavingPercent)
	if cfg.TargetThreshold >= cfg.WarnThreshold {
		// Only a policy stored before targetPercent existed gets here (the API server rejects
		// targetPercent >= warnPercent): its warnPercent is at most the defaulted 50. Keep
		// the default's proportion to Warn (50 of 60) instead of refusing every compaction.
		cfg.TargetThreshold = cfg.WarnThreshold * 5 / 6
	}
	if v := spec.Offload.ThresholdChars; v > 0 {
		cfg.OffloadThreshold = int(v)
	}
	if v := spec.Offload.HookThresholdChars; v > 0 {
		cfg.HookThreshold = int(v)
	}
	if v := spec.Offload.PreviewLines; v != nil {
		// 0 is a legal value that means no preview line (the engine's 0 means its default).
		cfg.PreviewLines = int(*v)
		if *v == 0 {
			cfg.PreviewLines = compaction.NoPreviewLines
		}
	}
	if v := spec.Offload.ImageThresholdBytes; v != nil {
		// 0 is a legal value that means no image is offloaded (the engine's 0: its default).
		cfg.ImageOffloadThreshold = int(*v)
		if *v == 0 {
			cfg.ImageOffloadThreshold = compaction.NoImageOffload
		}
	}
	if v := spec.MinTailMessages; v > 0 {
		cfg.MinTailMessages = int(v)
	}
	if v := spec.MaxSummaryChars; v > 0 {
		cfg.MaxSummaryChars = int(v)
	}
	if v := spec.Pins.Rule; v != "" {
		cfg.PinRule = compaction.PinRule(v)
	}
	set(&cfg.PinBudget, spec.Pins.BudgetPercent)
	// Only a paid summarizer is limited; the extractive one costs nothing.
	if v := spec.Summarizer.MaxCallsPerHour; v != nil && *v > 0 && spec.Summarizer.Mode == compactionv1alpha1.SummarizerOpenAI {
		cfg.SummarizerCallsPerHour = int(*v)
	}
	// 0 (unset) is the engine's own "from Warn"; the CRD keeps a set value below softPercent.
	set(&cfg.PrepareThreshold, ptr.Deref(spec.Summarizer.PreparePercent, 0))
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrInvalidEngineConfig, err)
	}
	return cfg, nil
}
