// Package demo is `make demo`: the operator on a local control plane, an agent transcript
// replayed through the compaction API turn by turn, and the session deleted with its storage.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/devenv"
	"github.com/harness9/compaction-operator/internal/dev/replay"
)

// Options of a demo run.
type Options struct {
	// Root is the repository root; Dir holds the environment's files.
	Root, Dir string
	// Transcript is the agent history to replay (JSONL).
	Transcript string
	// Window is the policy's context window, small enough that every tier shows up.
	Window int32
	// ManagerBin overrides bin/manager, ProxyBin bin/compaction-proxy.
	ManagerBin, ProxyBin string
	// Keep leaves everything running after the replay, until ctx ends.
	Keep bool
	// Out receives the narration.
	Out io.Writer
}

const (
	ns      = "default"
	session = "coding-agent"
	bucket  = "agent-context"
	prefix  = "demo"
)

// Run runs the demo; it stops everything it started before returning, also when ctx ends.
func Run(ctx context.Context, o Options) error {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(o.Out, format+"\n", args...) }
	history, err := replay.Load(o.Transcript)
	if err != nil {
		return err
	}
	if err := checkProxyBin(o); err != nil {
		return err
	}

	say("== Starting kube-apiserver, etcd, MinIO and the manager on loopback")
	env, err := devenv.Start(ctx, devenv.Options{Root: o.Root, Dir: o.Dir, ManagerBin: o.ManagerBin})
	if err != nil {
		return err
	}
	defer func() {
		say("== Shutting down")
		env.Stop()
	}()
	c, err := devenv.Client(env.Config)
	if err != nil {
		return err
	}
	kubectl := func(args ...string) string {
		out, err := exec.CommandContext(ctx, filepath.Join(o.Root, "bin", "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	say("== Applying a CompactionPolicy (window %d tokens) and an AgentSession", o.Window)
	if err := createSession(ctx, c, env, o.Window); err != nil {
		return err
	}
	if err := waitReady(ctx, c, session); err != nil {
		return err
	}
	say("%s", kubectl("get", "compactionpolicies,agentsessions"))

	token, err := os.ReadFile(env.AgentTokenFile)
	if err != nil {
		return fmt.Errorf("read the agent token: %w", err)
	}
	api, err := compactclient.New(env.APIURL, compactclient.WithToken(string(token)), compactclient.WithCAFile(env.CAFile))
	if err != nil {
		return err
	}

	say("== Replaying %s (%d messages) through the compaction API, as the agent would", filepath.Base(o.Transcript), len(history))
	// The status is written coalesced, a moment after the compactions it reports: print it
	// once it shows the replay so far, so what the demo shows is true when it shows it.
	showStatus := func(st *replayStats) {
		if err := waitStatus(ctx, c, session, st); err != nil {
			say("(the status has not caught up with the replay yet: %v)", err)
		}
		say("%s", kubectl("get", "agentsessions"))
	}
	stats, err := replayTranscript(ctx, api, history, say, showStatus)
	if err != nil {
		return err
	}
	say("\n%d turns; compactions that changed the view: Warn %d, Soft %d, Full %d, Emergency %d (smallest saving %.0f%% of the view); %d summarizer calls (%d input + %d output tokens); %d tool results offloaded at source",
		stats.turns, stats.tiers[compaction.TierWarn], stats.tiers[compaction.TierSoft], stats.tiers[compaction.TierFull],
		stats.tiers[compaction.TierEmergency], 100*stats.minSaving, stats.summarizerCalls, stats.summarizerIn, stats.summarizerOut, stats.hookOffloads)
	showStatus(stats)

	if stats.firstOffloaded != "" {
		say("== An offloaded tool result, read back: GET .../toolresults/%s", stats.firstOffloaded)
		data, err := api.GetToolResult(ctx, ns, session, stats.firstOffloaded)
		if err != nil {
			return err
		}
		same := "identical to"
		if string(data) != stats.originals[stats.firstOffloaded] {
			same = "DIFFERENT from"
		}
		say("%d bytes, %s the original; first lines:\n%s", len(data), same, firstLines(string(data), 4))
	}

	var records strings.Builder
	if err := api.Records(ctx, ns, session, &records); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(records.String()), "\n")
	last := lines[len(lines)-1]
	if len(last) > 700 {
		// Its anchors and summary make it several KB: the head shows the shape.
		last = fmt.Sprintf("%s… (%d bytes in all)", strings.ToValidUTF8(last[:700], ""), len(last))
	}
	say("== The JSONL audit trail (GET .../records): %d records; the last one:\n%s", len(lines), last)

	say("\n== The same agent, unmodified: an OpenAI SDK loop whose base URL is compaction-proxy (AgentSession %s)", sdkSession)
	sdk, err := runSDKAgent(ctx, o, env, c, history, say)
	if err != nil {
		return err
	}
	say("%d turns through compaction-proxy: %d reached the model compacted; the model received %.1f MB where the agent sent %.1f MB (%.0f%%); the agent's own API key reached the model: %v",
		sdk.turns, sdk.compacted, float64(sdk.recvBytes)/(1<<20), float64(sdk.sentBytes)/(1<<20), 100*float64(sdk.recvBytes)/float64(max(sdk.sentBytes, 1)), sdk.keyPassed)
	say("%s", kubectl("get", "agentsessions"))

	if o.Keep {
		say(`
== Left running (DEMO_KEEP=1); Ctrl-C stops everything.
  export KUBECONFIG=%s
  bin/kubectl get agentsessions
  bin/kubectl describe agentsession %s
  bin/compactctl records --server %s --ca-file %s --token-file %s %s/%s
MinIO: http://%s (access key %s, secret key %s)`,
			env.Kubeconfig, session, env.APIURL, env.CAFile, env.AgentTokenFile, ns, session,
			env.MinIO.Endpoint, devenv.MinIOAccessKey, devenv.MinIOSecretKey)
		<-ctx.Done()
		return nil
	}

	say("== Deleting the AgentSession: the operator deletes its objects, then releases it")
	sid, err := deleteSession(ctx, c)
	if err != nil {
		return err
	}
	left, err := countObjects(ctx, env, sid)
	if err != nil {
		return err
	}
	say("objects of session %s left in s3://%s/%s: %d", sid, bucket, prefix, left)
	events := strings.Split(strings.TrimSpace(kubectl("get", "events", "--field-selector", "involvedObject.name="+session,
		"-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message", "--sort-by=.metadata.creationTimestamp")), "\n")
	say("The session's last events (kubectl get events):\n%s", strings.Join(events[max(0, len(events)-3):], "\n"))
	return nil
}

type replayStats struct {
	turns, hookOffloads int
	tiers               map[compaction.Tier]int // compactions that changed the view
	lastTier            compaction.Tier         // the tier of the last of them
	summarizerCalls     int
	summarizerIn        int
	summarizerOut       int
	minSaving           float64 // the smallest share of the view a compaction saved
	firstOffloaded      string
	originals           map[string]string
}

// replayTranscript runs the transcript as the agent does: tool results through the offload hook,
// compaction (delta requests) before every assistant turn.
func replayTranscript(ctx context.Context, api *compactclient.Client, history []compaction.Message, say func(string, ...any), showStatus func(*replayStats)) (*replayStats, error) {
	agent := &compactclient.Session{Client: api, Namespace: ns, Name: session}
	st := &replayStats{tiers: map[compaction.Tier]int{}, originals: map[string]string{}, minSaving: 1}
	shown := map[compaction.Tier]bool{}
	var live []compaction.Message
	seenUser := false
	for _, msg := range history {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		switch msg.Role {
		case compaction.RoleUser:
			seenUser = true
		case compaction.RoleTool:
			st.originals[msg.ToolCallID] = msg.Content
			off, err := agent.OffloadToolResult(ctx, msg)
			if err != nil {
				return nil, err
			}
			if off.Offloaded != nil {
				st.hookOffloads++
				if st.firstOffloaded == "" {
					st.firstOffloaded = msg.ToolCallID
				}
			}
			live = append(live, off.Message)
			continue
		case compaction.RoleAssistant:
			if seenUser {
				resp, err := agent.Compact(ctx, live, 0)
				if err != nil {
					return nil, fmt.Errorf("turn %d: %w", st.turns, err)
				}
				st.turns++
				rec := resp.Record
				st.summarizerCalls += rec.SummarizerCalls
				st.summarizerIn += rec.SummarizerInputTokens
				st.summarizerOut += rec.SummarizerOutputTokens
				// A tier above None records every turn; print the compactions that changed the
				// view (the others waited for a saving worth its cost).
				if rec.ChangedView() {
					st.tiers[rec.Tier]++
					st.lastTier = rec.Tier
					st.minSaving = min(st.minSaving, rec.CompressionRatio)
					say("turn %3d  %s", st.turns, strings.ReplaceAll(rec.Notification(), "\n", "\n          "))
				}
				if rec.ChangedView() && !shown[rec.Tier] {
					shown[rec.Tier] = true
					showStatus(st)
				}
			}
		}
		live = append(live, msg)
	}
	return st, nil
}

func createSession(ctx context.Context, c client.Client, env *devenv.Env, window int32) error {
	objs := []client.Object{
		builder.MinIOSecret(ns, "minio-credentials", devenv.MinIOAccessKey, devenv.MinIOSecretKey),
		builder.Policy(ns, "demo").Window(window).Storage(builder.MinIOStorage(env.MinIO.Endpoint, bucket, prefix, "minio-credentials")).Build(),
		builder.Session(ns, session, "demo").Build(),
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func waitReady(ctx context.Context, c client.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		var s compactionv1alpha1.AgentSession
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
		if err == nil && meta.IsStatusConditionTrue(s.Status.Conditions, compactionv1alpha1.ConditionReady) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("AgentSession %s not Ready: %+v (%w)", name, s.Status.Conditions, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitStatus waits, up to 30 s, until the session's status counts the compactions of st per
// tier and names the tier of the last one.
func waitStatus(ctx context.Context, c client.Client, name string, st *replayStats) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var s compactionv1alpha1.AgentSession
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
		if err == nil && statusShows(s.Status, st) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("it says tier %s after %s compactions, the replay made %v (%w)",
				s.Status.Tier, countsOf(s.Status.Compactions), st.tiers, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// statusShows reports whether status reports the compactions of st.
func statusShows(status compactionv1alpha1.AgentSessionStatus, st *replayStats) bool {
	c := status.Compactions
	for tier, n := range map[compaction.Tier]*int64{compaction.TierWarn: c.Warn, compaction.TierSoft: c.Soft,
		compaction.TierFull: c.Full, compaction.TierEmergency: c.Emergency} {
		if int64(st.tiers[tier]) != ptr.Deref(n, 0) {
			return false
		}
	}
	return st.lastTier == compaction.TierNone || string(status.Tier) == st.lastTier.String()
}

func countsOf(c compactionv1alpha1.TierCounts) string {
	return fmt.Sprintf("warn %d, soft %d, full %d, emergency %d", ptr.Deref(c.Warn, 0), ptr.Deref(c.Soft, 0),
		ptr.Deref(c.Full, 0), ptr.Deref(c.Emergency, 0))
}

func deleteSession(ctx context.Context, c client.Client) (string, error) {
	var s compactionv1alpha1.AgentSession
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: session}, &s); err != nil {
		return "", err
	}
	if err := c.Delete(ctx, &s); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		err := c.Get(ctx, client.ObjectKeyFromObject(&s), &compactionv1alpha1.AgentSession{})
		if apierrors.IsNotFound(err) {
			return s.Status.SessionID, nil
		}
		select {
		case <-ctx.Done():
			return "", errors.New("the AgentSession was not released within 60s")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func countObjects(ctx context.Context, env *devenv.Env, sid string) (int, error) {
	mc, err := minio.New(env.MinIO.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(devenv.MinIOAccessKey, devenv.MinIOSecretKey, "")})
	if err != nil {
		return 0, err
	}
	n := 0
	for obj := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true}) {
		if obj.Err != nil {
			return 0, obj.Err
		}
		if strings.Contains(obj.Key, "/"+sid+"/") || strings.HasSuffix(obj.Key, "/"+sid+".json") {
			n++
		}
	}
	return n, nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	for i, l := range lines {
		if len(l) > 120 {
			lines[i] = l[:120] + "…"
		}
	}
	return "  " + strings.Join(lines, "\n  ")
}
