package compactapi

import (
	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// defaultedSpec is a policy spec as the API server returns it: every default filled in.
func defaultedSpec() *compactionv1alpha1.CompactionPolicySpec {
	return &compactionv1alpha1.CompactionPolicySpec{
		ContextWindow: 128000,
		Thresholds: compactionv1alpha1.Thresholds{WarnPercent: 60, SoftPercent: 70, FullPercent: 80, EmergencyPercent: 95,
			TargetPercent: 50, MinSavingPercent: 15},
		Offload: compactionv1alpha1.OffloadSpec{ThresholdChars: 4000, HookThresholdChars: 10000,
			PreviewLines: ptr.To[int32](10)},
		MinTailMessages: 6,
		MaxSummaryChars: 6000,
		Summarizer:      compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerExtractive, MaxCallsPerHour: ptr.To[int32](60)},
		Pins:            compactionv1alpha1.PinsSpec{Rule: compactionv1alpha1.PinTaskAndInstructions, BudgetPercent: 15},
	}
}
