package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// pendingEvents holds the events of one reconcile until the status that says the same is
// written (jobset's order): a failed write fails the reconcile, and its retry, which decides
// again from the status as stored, would emit them a second time.
type pendingEvents []pendingEvent

type pendingEvent struct{ eventType, reason, action, note string }

func (p *pendingEvents) add(eventType, reason, action, format string, args ...any) {
	*p = append(*p, pendingEvent{eventType: eventType, reason: reason, action: action, note: fmt.Sprintf(format, args...)})
}

// emit records the events about obj; call it once the status is written.
func (p pendingEvents) emit(rec recorder.EventRecorder, obj runtime.Object) {
	for _, ev := range p {
		rec.Eventf(obj, nil, ev.eventType, ev.reason, ev.action, "%s", ev.note)
	}
}
