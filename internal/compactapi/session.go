package compactapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/compaction/summarize/openai"
	"github.com/harness9/compaction-operator/internal/policy"
)

// session is what a request needs of its AgentSession: the engine configuration from the
// policy, the store at the session's pinned location, and the summarizer. id is the
// session's metadata.uid.
type session struct {
	obj        *compactionv1alpha1.AgentSession
	id         string
	cfg        compaction.Config
	store      *s3.Store
	summarizer compaction.Summarizer
	// anchorsInStatus: the policy asks for the anchors in status (conversation content,
	// readable by anyone who may get the session).
	anchorsInStatus bool
}

// lookup resolves a Ready session. Expected failures are *apiError with their HTTP status.
//
// The session's status is never read for what the request does: the session's ID in storage
// is its metadata.uid (not status.sessionID), and its objects are at the location the
// operator pinned for it (policy.Locations, a ConfigMap only the operator writes), not at
// status.records. Anyone allowed to write agentsessions/status could otherwise make the API
// read, overwrite and offload into another session's objects, or send a Secret of any
// namespace to an endpoint of their choosing.
func (s *Server) lookup(ctx context.Context, namespace, name string) (*session, error) {
	var obj compactionv1alpha1.AgentSession
	if err := s.cache.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &obj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, &apiError{http.StatusNotFound, ReasonNotFound, fmt.Sprintf("AgentSession %s/%s not found", namespace, name)}
		}
		return nil, fmt.Errorf("get AgentSession: %w", err)
	}
	if !obj.DeletionTimestamp.IsZero() {
		return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, fmt.Sprintf("AgentSession %s/%s is being deleted", namespace, name)}
	}
	// A session that was Ready once has its location pinned; it is served even when the
	// storage probe fails now, so an outage fails open in the engine (records say what
	// failed) instead of refusing the agent's turn.
	ready := meta.FindStatusCondition(obj.Status.Conditions, compactionv1alpha1.ConditionReady)
	locations := policy.Locations{Namespace: s.cfg.ClusterResourceNamespace, Reader: s.cache}
	if ready != nil && ready.Status == metav1.ConditionTrue {
		// The session says it is Ready: its location may have been pinned a moment ago and
		// not be in the cache yet. (The condition only decides whether to ask the API
		// server; what is used is the ConfigMap.)
		locations.APIReader = s.apiReader
	}
	pin, err := locations.Get(ctx, &obj)
	switch {
	case errors.Is(err, policy.ErrInvalidLocation):
		return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, fmt.Sprintf("AgentSession %s/%s is not Ready: %v", namespace, name, err)}
	case err != nil:
		return nil, err
	case pin == nil:
		msg := fmt.Sprintf("AgentSession %s/%s is not Ready", namespace, name)
		if ready != nil {
			msg += ": " + ready.Reason + ": " + ready.Message
		}
		return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, msg}
	}
	p, err := policy.Get(ctx, s.cache, namespace, obj.Spec.PolicyRef)
	if err != nil {
		if errors.Is(err, policy.ErrNotFound) {
			return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, err.Error()}
		}
		return nil, err
	}
	// A cluster policy is only for the namespaces its namespaceSelector selects: checked on
	// every request, as a namespace can be relabelled after its sessions became Ready.
	if err := p.CheckNamespace(ctx, s.cache, namespace); err != nil {
		if errors.Is(err, policy.ErrNamespaceNotAllowed) || errors.Is(err, policy.ErrInvalidNamespaceSelector) {
			return nil, &apiError{http.StatusForbidden, ReasonNamespaceNotAllowed, err.Error()}
		}
		return nil, err
	}
	// What the operator's flags forbid is refused before any Secret is read.
	access := s.access()
	if err := access.CheckLocation(pin); err != nil {
		return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, fmt.Sprintf("AgentSession %s/%s is not Ready: %v", namespace, name, err)}
	}
	if err := access.Check(p); err != nil {
		return nil, &apiError{http.StatusConflict, ReasonSessionNotReady, fmt.Sprintf("AgentSession %s/%s is not Ready: %v", namespace, name, err)}
	}
	s3cfg, err := policy.S3Config(ctx, s.secrets, pin.Location)
	if err != nil {
		return nil, &apiError{http.StatusServiceUnavailable, ReasonStorage, err.Error()}
	}
	store, err := s.stores.Get(ctx, s3cfg)
	if err != nil {
		return nil, &apiError{http.StatusServiceUnavailable, ReasonStorage, err.Error()}
	}
	sum, err := s.summarizerFor(ctx, p)
	if err != nil {
		return nil, &apiError{http.StatusServiceUnavailable, ReasonSessionNotReady, err.Error()}
	}
	return &session{obj: &obj, id: string(obj.UID), cfg: engineConfig(p.Spec, obj.Spec.ContextWindow), store: store, summarizer: sum,
		anchorsInStatus: p.Spec.AnchorsInStatus == compactionv1alpha1.AnchorsInclude}, nil
}

// access is what the operator's flags let policies use.
func (s *Server) access() policy.Access {
	return policy.Access{
		ClusterResourceNamespace: s.cfg.ClusterResourceNamespace, ClusterSecretNamespaces: s.cfg.ClusterSecretNamespaces,
		Endpoints: s.cfg.AllowedEndpoints,
	}
}

// engineConfig maps a policy (and the session's window override) to the engine's knobs.
func engineConfig(spec *compactionv1alpha1.CompactionPolicySpec, window *int32) compaction.Config {
	cfg := compaction.DefaultConfig(int(spec.ContextWindow))
	if window != nil {
		cfg.ContextWindow = int(*window)
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
	if v := spec.Offload.PreviewLines; v != nil && *v > 0 {
		cfg.PreviewLines = int(*v)
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
	return cfg
}

// summarizerFor builds the policy's summarizer; the OpenAI one reads its key on each call
// (through the short-lived Secret cache), so a rotated key is used within its TTL.
func (s *Server) summarizerFor(ctx context.Context, p *policy.Policy) (compaction.Summarizer, error) {
	if p.Spec.Summarizer.Mode != compactionv1alpha1.SummarizerOpenAI || p.Spec.Summarizer.OpenAI == nil {
		return s.timed(compaction.ExtractiveSummarizer{}), nil
	}
	oa := p.Spec.Summarizer.OpenAI
	key, err := p.APIKey(ctx, s.secrets, s.cfg.ClusterResourceNamespace)
	if err != nil {
		return nil, err
	}
	// QuietErrors: summarizer errors reach records, events and API answers, and the endpoint
	// is the policy author's choice; none of its answer's text is quoted.
	cfg := openai.Config{BaseURL: oa.BaseURL, Model: oa.Model, APIKey: key, MaxOutputTokens: int(oa.MaxOutputTokens),
		MaxTokensField: policy.MaxTokensField(oa.MaxTokensField), QuietErrors: true, HTTPClient: s.llm}
	if oa.Timeout != nil {
		cfg.Timeout = oa.Timeout.Duration
	}
	sum, err := openai.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("OpenAI summarizer: %w", err)
	}
	return s.timed(sum), nil
}

// apiError is an answer with a status other than 500.
type apiError struct {
	code   int
	reason string
	msg    string
}

func (e *apiError) Error() string { return e.msg }
