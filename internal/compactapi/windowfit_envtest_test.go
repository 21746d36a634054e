package compactapi

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/kubeenv"
)

// TestContextFitsCondition is issue 27 item 7: a turn whose system prompt and pins alone are
// over the Emergency threshold sets ContextFits False with the measured size against the
// window, at once (not only when the usage write is due); a later turn that fits sets it
// True again; a session whose fixed part always fitted has no such condition.
func TestContextFitsCondition(t *testing.T) {
	root := testenv.RepoRoot(t)
	_, cfg := kubeenv.Start(t, kubeenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	scheme := runtime.NewScheme()
	testenv.Must(t, clientgoscheme.AddToScheme(scheme))
	testenv.Must(t, compactionv1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	testenv.Must(t, err)
	ctx := context.Background()
	obj := builder.Session("default", "agent", "p").Build()
	testenv.Must(t, c.Create(ctx, obj))
	s, _ := newTestMetrics(t)
	s.cfg.UsageInterval = time.Hour
	s.cache, s.apiReader, s.writer, s.log = c, c, c, logr.Discard()
	s.status = newStatus(s)
	sess := &session{obj: obj, id: string(obj.UID), cfg: compaction.DefaultConfig(8000)}
	fits := func() *metav1.Condition {
		t.Helper()
		if failed := s.status.Flush(ctx); failed != 0 {
			t.Fatalf("%d status writes failed", failed)
		}
		var got compactionv1alpha1.AgentSession
		testenv.Must(t, c.Get(ctx, client.ObjectKeyFromObject(obj), &got))
		sess.obj = &got // the next turn is served from what the cache would now hold
		return meta.FindStatusCondition(got.Status.Conditions, compactionv1alpha1.ConditionContextFits)
	}
	now := time.Now()
	s.status.RecordTurn(sess.statusSession(), sess.statusTurn(&compaction.CompactionRecord{ID: "1", Timestamp: now, Tier: compaction.TierWarn, TokensBefore: 5000, TokensAfter: 4000, MsgsBefore: 9, MsgsAfter: 9, FixedTokens: 1200}))
	if got := fits(); got != nil {
		t.Fatalf("ContextFits %+v on a session whose fixed part fits, want none", got)
	}
	s.status.UsageWritten(obj.UID) // the next usage write is not due
	s.status.RecordTurn(sess.statusSession(), sess.statusTurn(&compaction.CompactionRecord{ID: "2", Timestamp: now, Tier: compaction.TierNone, TokensBefore: 8100, TokensAfter: 8100, FixedTokens: 7700, WindowTooSmall: true}))
	got := fits()
	if got == nil || got.Status != metav1.ConditionFalse || got.Reason != compactionv1alpha1.ReasonFixedPartOverWindow ||
		!strings.Contains(got.Message, "7700 tokens, 96% of the 8000-token window") {
		t.Fatalf("ContextFits %+v, want False FixedPartOverWindow with the fixed size against the window", got)
	}
	s.status.RecordTurn(sess.statusSession(), sess.statusTurn(&compaction.CompactionRecord{ID: "3", Timestamp: now, Tier: compaction.TierNone, TokensBefore: 3000, TokensAfter: 3000, FixedTokens: 1000}))
	if got := fits(); got == nil || got.Status != metav1.ConditionTrue || got.Reason != compactionv1alpha1.ReasonFits {
		t.Fatalf("ContextFits %+v after a turn that fits, want True Fits", got)
	}
}
