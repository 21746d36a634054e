package compactapi

import (
	"errors"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// reset is POST .../reset: the undo of compaction. It forgets the compaction state of the
// session's conversation (compaction.ResetState), so the next turn starts again from the
// agent's full history; the trail gets a Reset record, archives and offloaded results stay.
// It changes the session's compaction, so it needs what compacting needs (create
// agentsessions/compact), but not the policy: a session whose policy is gone can still be
// reset.
func (s *Server) reset(w http.ResponseWriter, r *http.Request, sess *session, _ struct{}) error {
	id := sess.storeID()
	rec, recordErr, err := compaction.ResetState(r.Context(), sess.store, sess.store, id, time.Now())
	switch {
	case errors.Is(err, compaction.ErrConflict):
		return &apiError{http.StatusConflict, ReasonStaleWatermark, "the session's state kept changing during the reset (compactions running): retry"}
	case err != nil && r.Context().Err() != nil:
		return r.Context().Err()
	case err != nil:
		return &apiError{http.StatusServiceUnavailable, ReasonStorage, "reset failed, nothing changed: " + err.Error()}
	}
	// This replica's engine of the conversation keeps a copy of the state, which it may
	// trust for a while (Config.StateTrust): dropped, so the next turn here reads the reset
	// one. (Another replica's trusted copy lasts at most StateTrust; its writes are
	// conditional, so it never overwrites the reset.)
	s.enginesMu.Lock()
	if s.engines != nil {
		s.engines.Remove(id)
	}
	s.enginesMu.Unlock()
	resp := compactclient.ResetResponse{Record: rec}
	if recordErr != nil {
		s.log.Error(recordErr, "reset record not written", "session", sess.obj.Namespace+"/"+sess.obj.Name)
		resp.RecordError = recordErr.Error()
	}
	if s.recorder != nil {
		s.recorder.Eventf(sess.obj, nil, corev1.EventTypeNormal, "CompactionReset", "Reset",
			"Compaction state of the %s forgotten (watermark %d -> 0): the next turn starts from the full history", sess.scope(), rec.WatermarkBefore)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
