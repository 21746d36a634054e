package compactapi

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

// maxAnchorChars bounds an anchor's content in status (the CRD allows 2000).
const maxAnchorChars = 2000

// recordStatus writes what a compaction changed into the session's status: every compaction
// above TierNone, and TierNone turns at most once per UsageInterval per session. It reads
// the session fresh from the API server and updates with its resourceVersion, retrying on
// conflict, so per-tier counters are never lost to another writer.
func (s *Server) recordStatus(ctx context.Context, sess *session, rec *compaction.CompactionRecord) error {
	key := types.NamespacedName{Namespace: sess.obj.Namespace, Name: sess.obj.Name}
	now := time.Now()
	if rec.Tier == compaction.TierNone {
		s.mu.Lock()
		last := s.usageWritten[sess.obj.UID]
		due := now.Sub(last) >= s.cfg.UsageInterval
		if due {
			if s.usageWritten == nil || len(s.usageWritten) >= 100000 {
				s.usageWritten = make(map[types.UID]time.Time)
			}
			s.usageWritten[sess.obj.UID] = now
		}
		s.mu.Unlock()
		if !due {
			return nil
		}
	}
	usage := fmt.Sprintf("%.2f", sess.cfg.Usage(rec.TokensBefore))
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var obj compactionv1alpha1.AgentSession
		if err := s.apiReader.Get(ctx, key, &obj); err != nil {
			return err
		}
		if obj.UID != sess.obj.UID {
			return nil // deleted and re-created meanwhile: not this session's numbers
		}
		st := &obj.Status
		before := st.DeepCopy()
		st.Tier = compactionv1alpha1.Tier(rec.Tier.String())
		st.ContextUsage = usage
		if rec.Tier != compaction.TierNone {
			st.CompressionRatio = fmt.Sprintf("%.2f", rec.CompressionRatio)
			st.TokensBefore, st.TokensAfter = int64(rec.TokensBefore), int64(rec.TokensAfter)
			st.MessagesBefore, st.MessagesAfter = int64(rec.MsgsBefore), int64(rec.MsgsAfter)
			st.LastCompactionTime = &metav1.Time{Time: rec.Timestamp}
			st.Watermark = int64(rec.WatermarkAfter)
			st.OffloadedCount += int64(len(rec.Offloaded))
			st.OffloadedBytes += int64(rec.OffloadedBytes())
			switch rec.Tier {
			case compaction.TierWarn:
				st.Compactions.Warn++
			case compaction.TierSoft:
				st.Compactions.Soft++
			case compaction.TierFull:
				st.Compactions.Full++
			case compaction.TierEmergency:
				st.Compactions.Emergency++
			}
			if len(rec.Anchors) > 0 {
				st.Anchors = statusAnchors(rec.Anchors)
			}
		}
		if equality.Semantic.DeepEqual(before, st) {
			return nil
		}
		return s.writer.Status().Update(ctx, &obj)
	})
}

// recordOffload adds an offload at source to the session's counters.
func (s *Server) recordOffload(ctx context.Context, sess *session, bytes int) error {
	key := types.NamespacedName{Namespace: sess.obj.Namespace, Name: sess.obj.Name}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var obj compactionv1alpha1.AgentSession
		if err := s.apiReader.Get(ctx, key, &obj); err != nil {
			return err
		}
		if obj.UID != sess.obj.UID {
			return nil
		}
		obj.Status.OffloadedCount++
		obj.Status.OffloadedBytes += int64(bytes)
		return s.writer.Status().Update(ctx, &obj)
	})
}

// statusAnchors keeps the available anchors, one per type, bounded in size.
func statusAnchors(anchors []compaction.Anchor) []compactionv1alpha1.Anchor {
	out := make([]compactionv1alpha1.Anchor, 0, len(anchors))
	for _, a := range anchors {
		if !a.Available() {
			continue
		}
		content := a.Content
		if len(content) > maxAnchorChars {
			cut := maxAnchorChars - len("…")
			for cut > 0 && !utf8RuneStart(content[cut]) {
				cut--
			}
			content = content[:cut] + "…"
		}
		out = append(out, compactionv1alpha1.Anchor{Type: compactionv1alpha1.AnchorType(a.Type), Content: content})
	}
	if len(out) > 5 {
		out = out[:5]
	}
	return out
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// emitEvent puts the spec's notification on the session as an Event.
func (s *Server) emitEvent(sess *session, rec *compaction.CompactionRecord) {
	if rec.Tier == compaction.TierNone {
		return
	}
	typ := corev1.EventTypeNormal
	if rec.Tier == compaction.TierEmergency || rec.Error != "" {
		typ = corev1.EventTypeWarning
	}
	s.recorder.Eventf(sess.obj, nil, typ, "ContextCompacted", "Compact", "%s", rec.Notification())
}
