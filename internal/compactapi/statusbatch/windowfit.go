package statusbatch

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

// windowFit is what a turn said of the part of the view no compaction shrinks (the system
// prompt and pins) against the window.
type windowFit struct {
	tooSmall bool
	fixed    int
	window   int
}

func windowFitOf(window int, rec *compaction.CompactionRecord) *windowFit {
	return &windowFit{tooSmall: rec.WindowTooSmall, fixed: rec.FixedTokens, window: window}
}

// windowFitChanged reports whether rec says otherwise than the session's ContextFits
// condition: the first turn with a window too small, or the first that fits again.
func windowFitChanged(obj *compactionv1alpha1.AgentSession, rec *compaction.CompactionRecord) bool {
	c := meta.FindStatusCondition(obj.Status.Conditions, compactionv1alpha1.ConditionContextFits)
	if rec.WindowTooSmall {
		return c == nil || c.Status != metav1.ConditionFalse
	}
	return c != nil && c.Status != metav1.ConditionTrue
}

// applyWindowFit sets ContextFits: False when the system prompt and pins alone are over the
// Emergency threshold of the window (the engine then compacts once and leaves later turns
// alone rather than running Emergency on each), True again once they fit. A session whose
// window was never too small has no ContextFits condition.
func applyWindowFit(obj *compactionv1alpha1.AgentSession, f *windowFit) {
	if f == nil {
		return
	}
	if f.tooSmall {
		pct := 0.0
		if f.window > 0 {
			pct = 100 * float64(f.fixed) / float64(f.window)
		}
		meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
			Type: compactionv1alpha1.ConditionContextFits, Status: metav1.ConditionFalse,
			Reason: compactionv1alpha1.ReasonFixedPartOverWindow, ObservedGeneration: obj.Generation,
			Message: fmt.Sprintf("the system prompt, tools and pins alone are about %d tokens, %.0f%% of the %d-token window, over the Emergency threshold: compacted once, later turns are left as they are; raise the policy's contextWindow to the model's",
				f.fixed, pct, f.window),
		})
		return
	}
	if meta.FindStatusCondition(obj.Status.Conditions, compactionv1alpha1.ConditionContextFits) == nil {
		return
	}
	meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
		Type: compactionv1alpha1.ConditionContextFits, Status: metav1.ConditionTrue,
		Reason: compactionv1alpha1.ReasonFits, ObservedGeneration: obj.Generation,
		Message: "the system prompt and pins fit the window",
	})
}
