package compactapi

import (
	corev1 "k8s.io/api/core/v1"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/compactapi/statusbatch"
)

// newStatus is the batcher of s's status writes (statusbatch), on s's clients, intervals,
// metrics and log.
func newStatus(s *Server) *statusbatch.Batcher {
	return statusbatch.New(statusbatch.Config{Cache: s.cache, APIReader: s.apiReader, Writer: s.writer,
		FlushInterval: s.cfg.StatusFlushInterval, Interval: s.cfg.StatusInterval, UsageInterval: s.cfg.UsageInterval,
		PassThroughQuiet: s.cfg.PassThroughQuiet, Writes: s.metrics.StatusWrites, Log: s.log})
}

// statusSession is the session as its status changes are recorded.
func (sess *session) statusSession() statusbatch.Session {
	return statusbatch.Session{Obj: sess.obj, AnchorsInStatus: sess.anchorsInStatus}
}

// statusTurn is what the turn of rec changed, for the session's status: the record, the
// calibrated usage that chose its tier, the policy's window.
func (sess *session) statusTurn(rec *compaction.CompactionRecord) statusbatch.Turn {
	return statusbatch.Turn{Record: rec, Usage: usageOf(sess.cfg, rec).before, Window: sess.cfg.ContextWindow}
}

// emitEvent puts the spec's notification of a compaction on the session as an Event; a
// turn that changed nothing gets none unless something failed.
func (s *Server) emitEvent(sess *session, rec *compaction.CompactionRecord) {
	if !rec.ChangedView() && rec.Error == "" {
		return
	}
	typ := corev1.EventTypeNormal
	if rec.Tier == compaction.TierEmergency || rec.Error != "" {
		typ = corev1.EventTypeWarning
	}
	s.recorder.Eventf(sess.obj, nil, typ, compactionv1alpha1.ReasonContextCompacted, "Compact", "%s", rec.Notification())
}
