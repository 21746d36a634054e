package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/policy/backends"
)

// Defaults for PolicyChecker's intervals.
const (
	DefaultProbeInterval = 5 * time.Minute
	DefaultRetryInterval = 30 * time.Second
	// DefaultSecretRecheckInterval bounds how long a created, rotated or fixed Secret goes
	// unnoticed by the policy controllers, which may not watch Secrets.
	DefaultSecretRecheckInterval = time.Minute
	storageProbeTimeout          = 10 * time.Second
)

// PolicyChecker computes the status both policy kinds share: whether storage is reachable
// with the credentials, whether the summarizer's Secret is usable, and how many sessions use
// the policy. Storage is probed when the policy or one of its Secrets changed, or when the
// last probe is older than ProbeInterval (RetryInterval after a failure), so the many
// reconciles that only recount sessions cost no storage request.
//
// The operator may get Secrets but not list or watch them (a watch would need a cluster-wide
// list of every Secret). So a policy's Secrets are looked at again (their metadata only, one
// GET each) by a reconcile when the last look is older than half SecretRecheckInterval, and
// the reconcile is requeued at least every SecretRecheckInterval: a Secret created, rotated or
// fixed after the policy is noticed within that interval.
type PolicyChecker struct {
	// Client reads from the cache (sessions).
	Client client.Client
	// APIReader reads Secret metadata from the API server.
	APIReader client.Reader
	// Secrets reads Secret values; the checker makes it forget a Secret whose
	// resourceVersion changed.
	Secrets  *policy.SecretCache
	Stores   *backends.Stores
	Recorder recorder.EventRecorder
	// ClusterResourceNamespace holds a ClusterCompactionPolicy's Secrets when a reference
	// names no namespace.
	ClusterResourceNamespace string
	ProbeInterval            time.Duration
	RetryInterval            time.Duration
	// SecretRecheckInterval is the longest time between two looks at a policy's Secrets
	// (DefaultSecretRecheckInterval when 0).
	SecretRecheckInterval time.Duration
	// Access is what the operator's flags let policies use; a policy outside it is not
	// Ready, and none of its Secrets is read, none of its endpoints dialled.
	Access policy.Access

	mu     sync.Mutex
	probes map[types.UID]probeResult
	// looks are the last fingerprints read from the API server, per policy: the many
	// reconciles that only recount sessions reuse one younger than half the recheck
	// interval instead of asking for every Secret again.
	looks map[types.UID]secretLook
}

type secretLook struct {
	fingerprint string
	at          time.Time
}

type probeResult struct {
	fingerprint string
	at          time.Time
	storage     metav1.Condition
	// writes is the ConditionalWrites condition, probed once per fingerprint (see
	// conditionalWrites).
	writes     metav1.Condition
	summarizer error
	// refused is why the operator's flags do not let the policy be used (see Access).
	refused error
}

// UpdateStatus fills status for the policy obj (p is the same object seen as a Policy) and
// returns when to look again, and the events to emit once the status is written.
func (c *PolicyChecker) UpdateStatus(ctx context.Context, obj client.Object, p *policy.Policy, status *compactionv1alpha1.CompactionPolicyStatus) (time.Duration, pendingEvents, error) {
	var sessions compactionv1alpha1.AgentSessionList
	if err := c.Client.List(ctx, &sessions, client.MatchingFields{sessionPolicyIndex: p.Key()}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, nil, fmt.Errorf("list sessions of %s: %w", p.Key(), err)
	}
	status.Sessions = ptr.To(int32(min(len(sessions.Items), 1<<31-1))) //nolint:gosec // bounded above

	var probe probeResult
	if err := c.Access.Check(p); err != nil {
		// Refused by the operator's flags: nothing is read or dialled.
		c.Forget(obj.GetUID())
		probe = probeResult{refused: err, storage: metav1.Condition{
			Type: compactionv1alpha1.ConditionStorageReady, Status: metav1.ConditionFalse,
			Reason: storageReason(err), Message: err.Error(),
		}, writes: writesNotProbed()}
	} else if probe, err = c.probe(ctx, obj.GetUID(), p); err != nil {
		return 0, nil, err
	}
	storage := probe.storage
	storage.ObservedGeneration = p.Generation
	meta.SetStatusCondition(&status.Conditions, storage)
	prevWrites := conditionOf(status.Conditions, compactionv1alpha1.ConditionConditionalWrites)
	writes := probe.writes
	writes.ObservedGeneration = p.Generation
	meta.SetStatusCondition(&status.Conditions, writes)

	prevReady := conditionOf(status.Conditions, compactionv1alpha1.ConditionReady)
	ready := metav1.Condition{
		Type: compactionv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: compactionv1alpha1.ReasonReady, Message: "storage is reachable; sessions can use this policy",
		ObservedGeneration: p.Generation,
	}
	_, selErr := p.Selector()
	// Checked with the policy's own window; a session's contextWindow override has the same
	// bounds in its CRD.
	_, engineErr := policy.EngineConfig(p.Spec, 0)
	switch {
	case probe.refused != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, storage.Reason, storage.Message
	case selErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, compactionv1alpha1.ReasonInvalidNamespaceSelector, selErr.Error()
	case engineErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, compactionv1alpha1.ReasonInvalidEngineConfig, engineErr.Error()
	case storage.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, compactionv1alpha1.ReasonStorageNotReady, storage.Message
	case probe.summarizer != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, compactionv1alpha1.ReasonSummarizerNotReady, probe.summarizer.Error()
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	status.ObservedGeneration = p.Generation

	isReady := ready.Status == metav1.ConditionTrue
	var events pendingEvents
	switch {
	case isReady && prevReady.Status != metav1.ConditionTrue:
		events.add(corev1.EventTypeNormal, compactionv1alpha1.ReasonPolicyReady, "Probe", "Storage s3://%s is reachable", p.Spec.Storage.S3.Bucket)
	case !isReady && (prevReady.Reason != ready.Reason || prevReady.Message != ready.Message):
		events.add(corev1.EventTypeWarning, ready.Reason, "Probe", "%s", ready.Message)
	}
	if writes.Status == metav1.ConditionFalse && (prevWrites.Status != metav1.ConditionFalse || prevWrites.Reason != writes.Reason || prevWrites.Message != writes.Message) {
		// A warning only: the policy stays Ready.
		events.add(corev1.EventTypeWarning, writes.Reason, "Probe", "%s", writes.Message)
	}
	next := c.retryInterval()
	if isReady {
		next = c.probeInterval()
	}
	if len(p.SecretKeys(c.ClusterResourceNamespace)) > 0 {
		next = min(next, c.secretRecheckInterval())
	}
	return next, events, nil
}

// conditionOf is the condition of type t in conditions, or the zero condition when there is
// none: what a new condition is compared with to decide on an event.
func conditionOf(conditions []metav1.Condition, t string) metav1.Condition {
	if c := meta.FindStatusCondition(conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func (c *PolicyChecker) secretRecheckInterval() time.Duration {
	if c.SecretRecheckInterval > 0 {
		return c.SecretRecheckInterval
	}
	return DefaultSecretRecheckInterval
}

func (c *PolicyChecker) probeInterval() time.Duration {
	if c.ProbeInterval > 0 {
		return c.ProbeInterval
	}
	return DefaultProbeInterval
}

func (c *PolicyChecker) retryInterval() time.Duration {
	if c.RetryInterval > 0 {
		return c.RetryInterval
	}
	return DefaultRetryInterval
}

// probe returns the storage condition and summarizer check, reusing a recent result when
// neither the policy nor its Secrets changed since.
func (c *PolicyChecker) probe(ctx context.Context, uid types.UID, p *policy.Policy) (probeResult, error) {
	fp, err := c.fingerprint(ctx, uid, p)
	if err != nil {
		return probeResult{}, err
	}
	now := time.Now()
	c.mu.Lock()
	prev, ok := c.probes[uid]
	c.mu.Unlock()
	if ok && prev.fingerprint == fp {
		ttl := c.probeInterval()
		if prev.storage.Status != metav1.ConditionTrue || prev.summarizer != nil {
			ttl = c.retryInterval()
		}
		if now.Sub(prev.at) < ttl {
			return prev, nil
		}
	}
	if !ok || prev.fingerprint != fp {
		// A Secret changed (or this is the first look): read its values afresh.
		for _, key := range p.SecretKeys(c.ClusterResourceNamespace) {
			ns, name, _ := strings.Cut(key, "/")
			c.Secrets.Forget(types.NamespacedName{Namespace: ns, Name: name})
		}
	}

	res := probeResult{fingerprint: fp, at: now}
	var store *s3.Store
	res.storage, store = c.probeStorage(ctx, p)
	var decided *metav1.Condition
	if ok && prev.fingerprint == fp {
		decided = &prev.writes
	}
	res.writes = c.conditionalWrites(ctx, p, store, decided)
	if _, err := p.APIKey(ctx, c.Secrets, c.ClusterResourceNamespace); err != nil {
		res.summarizer = err
	}
	c.mu.Lock()
	if c.probes == nil {
		c.probes = make(map[types.UID]probeResult)
	}
	c.pruneLocked(now)
	c.probes[uid] = res
	c.mu.Unlock()
	return res, nil
}

// pruneLocked drops probes much older than the probe interval: a live policy is probed again
// every interval, so such an entry is a policy deleted without the reconciler seeing it
// terminate. Call with c.mu held.
func (c *PolicyChecker) pruneLocked(now time.Time) {
	stale := 3 * max(c.probeInterval(), c.retryInterval())
	for k, r := range c.probes {
		if now.Sub(r.at) > stale {
			delete(c.probes, k)
		}
	}
	for k, l := range c.looks {
		if now.Sub(l.at) > stale {
			delete(c.looks, k)
		}
	}
}

// Forget drops the cached probe of a deleted policy.
func (c *PolicyChecker) Forget(uid types.UID) {
	c.mu.Lock()
	delete(c.probes, uid)
	delete(c.looks, uid)
	c.mu.Unlock()
}

// probeStorage returns the StorageReady condition and, when it is True, the store.
func (c *PolicyChecker) probeStorage(ctx context.Context, p *policy.Policy) (metav1.Condition, *s3.Store) {
	cond := metav1.Condition{Type: compactionv1alpha1.ConditionStorageReady, Status: metav1.ConditionFalse}
	loc := p.Storage(c.ClusterResourceNamespace)
	cfg, err := backends.S3Config(ctx, c.Secrets, loc)
	if err != nil {
		cond.Reason, cond.Message = storageReason(err), err.Error()
		return cond, nil
	}
	store, err := c.Stores.Get(ctx, cfg, c.Access.EndpointsFor(p.Kind))
	if err != nil {
		cond.Reason, cond.Message = compactionv1alpha1.ReasonInvalidStorageConfig, err.Error()
		return cond, nil
	}
	pctx, cancel := context.WithTimeout(ctx, storageProbeTimeout)
	defer cancel()
	if err := store.EnsureBucket(pctx, p.Spec.Storage.S3.CreateBucket == compactionv1alpha1.BucketCreationIfNotPresent); err != nil {
		cond.Reason, cond.Message = storageReason(err), err.Error()
		return cond, nil
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, compactionv1alpha1.ReasonReachable
	cond.Message = fmt.Sprintf("bucket %s at %s is reachable", loc.Bucket, loc.Endpoint)
	return cond, store
}

// fingerprint changes when the policy's generation or one of its Secrets changes. Secret
// versions are read from the API server as metadata (a GET, which the operator may do; no
// Secret data is transferred).
func (c *PolicyChecker) fingerprint(ctx context.Context, uid types.UID, p *policy.Policy) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", p.Generation)
	now := time.Now()
	c.mu.Lock()
	last, ok := c.looks[uid]
	c.mu.Unlock()
	if ok && strings.HasPrefix(last.fingerprint, b.String()+";") && now.Sub(last.at) < c.secretRecheckInterval()/2 {
		return last.fingerprint, nil
	}
	for _, key := range p.SecretKeys(c.ClusterResourceNamespace) {
		ns, name, _ := strings.Cut(key, "/")
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		err := c.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, m)
		switch {
		case apierrors.IsNotFound(err):
			fmt.Fprintf(&b, ";%s=absent", key)
		case err != nil:
			return "", fmt.Errorf("read Secret %s metadata: %w", key, err)
		default:
			fmt.Fprintf(&b, ";%s=%s", key, m.ResourceVersion)
		}
	}
	c.mu.Lock()
	if c.looks == nil {
		c.looks = make(map[types.UID]secretLook)
	}
	c.looks[uid] = secretLook{fingerprint: b.String(), at: now}
	c.mu.Unlock()
	return b.String(), nil
}
