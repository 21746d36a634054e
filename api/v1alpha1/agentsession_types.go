/*
Copyright 2026 The compaction-operator Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyKind is the kind of policy an AgentSession uses.
// +kubebuilder:validation:Enum=CompactionPolicy;ClusterCompactionPolicy
type PolicyKind string

const (
	// PolicyKindNamespaced is a CompactionPolicy in the session's namespace.
	PolicyKindNamespaced PolicyKind = "CompactionPolicy"
	// PolicyKindCluster is a ClusterCompactionPolicy.
	PolicyKindCluster PolicyKind = "ClusterCompactionPolicy"
)

// Tier is a compaction tier, chosen by the context usage against the policy's thresholds.
// +kubebuilder:validation:Enum=None;Warn;Soft;Full;Emergency
type Tier string

// The compaction tiers, in increasing order of severity.
const (
	TierNone      Tier = "None"
	TierWarn      Tier = "Warn"
	TierSoft      Tier = "Soft"
	TierFull      Tier = "Full"
	TierEmergency Tier = "Emergency"
)

// AnchorType is the kind of fact an anchor preserves across compactions. The summaries and
// records in storage name them in snake_case (user_intent, ...), as the engine writes them;
// ParseAnchorType reads either spelling.
// +kubebuilder:validation:Enum=UserIntent;ExecutionProgress;KeyDecision;TriedSolution;NextStep
type AnchorType string

// The five anchor types.
const (
	AnchorUserIntent        AnchorType = "UserIntent"
	AnchorExecutionProgress AnchorType = "ExecutionProgress"
	AnchorKeyDecision       AnchorType = "KeyDecision"
	AnchorTriedSolution     AnchorType = "TriedSolution"
	AnchorNextStep          AnchorType = "NextStep"
)

// anchorTypeNames maps the snake_case names of the engine, the summaries and the records
// (and of status.anchors before v1alpha1 used CamelCase) to the API's values.
var anchorTypeNames = map[string]AnchorType{
	"user_intent":        AnchorUserIntent,
	"execution_progress": AnchorExecutionProgress,
	"key_decision":       AnchorKeyDecision,
	"tried_solution":     AnchorTriedSolution,
	"next_step":          AnchorNextStep,
}

// ParseAnchorType reads an anchor type in the API's CamelCase or in the snake_case of the
// engine and of older objects; ok is false for anything else.
func ParseAnchorType(name string) (t AnchorType, ok bool) {
	if t, ok := anchorTypeNames[name]; ok {
		return t, true
	}
	for _, t := range anchorTypeNames {
		if string(t) == name {
			return t, true
		}
	}
	return "", false
}

// PolicyReference names the policy an AgentSession uses.
type PolicyReference struct {
	// kind is CompactionPolicy (in the session's namespace, the default) or
	// ClusterCompactionPolicy.
	// +optional
	// +kubebuilder:default=CompactionPolicy
	Kind PolicyKind `json:"kind,omitempty"`

	// name of the policy.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
}

// AgentSessionSpec is the desired state of an AgentSession.
type AgentSessionSpec struct {
	// policyRef names the CompactionPolicy or ClusterCompactionPolicy this session uses. It
	// cannot be changed: the session's objects stay in the storage location its first policy
	// chose, so a session that should use another policy is a new AgentSession.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="policyRef is immutable: create a new AgentSession to use another policy"
	PolicyRef PolicyReference `json:"policyRef,omitzero"`

	// contextWindow overrides the policy's contextWindow, in tokens, for this session.
	// +optional
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=10000000
	ContextWindow int32 `json:"contextWindow,omitempty"`

	// allowedServiceAccounts names the ServiceAccounts, in the session's namespace, whose
	// tokens may use the session through the compaction API (compact, tool results, records,
	// pass-through reports). Opt-in: the compaction-agent role is namespace-wide, so a
	// session without a Pod owner and without this list is usable by every agent of its
	// namespace that holds that role (any of them can compact it and read its offloaded tool
	// results and records). When the list is set, a caller whose token's ServiceAccount is
	// not in it is refused (403), unless it is allowed to update this AgentSession (the
	// namespace's editors and admins, or a Role naming the session). A session owned by a Pod
	// (as the pod controller creates them) is already limited to that pod's own bound token;
	// the list adds accounts to it, and does not take the pod's token away. A listed account's
	// tokens pass whichever pod they are bound to. Each entry is a ServiceAccount name (a
	// DNS-1123 subdomain), not a namespace-qualified username.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	AllowedServiceAccounts []string `json:"allowedServiceAccounts,omitempty"`
}

// TierCounts counts compactions per tier; a tier with none is absent.
// +kubebuilder:validation:MinProperties=1
type TierCounts struct {
	// warn is the number of Warn-tier compactions.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Warn *int64 `json:"warn,omitempty"`

	// soft is the number of Soft-tier compactions.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Soft *int64 `json:"soft,omitempty"`

	// full is the number of Full-tier compactions.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Full *int64 `json:"full,omitempty"`

	// emergency is the number of Emergency-tier compactions.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Emergency *int64 `json:"emergency,omitempty"`
}

// SummarizerUsage counts the summarizer's work for a session's compactions.
// +kubebuilder:validation:MinProperties=1
type SummarizerUsage struct {
	// calls is the number of summarizer calls the session's compactions made.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Calls *int64 `json:"calls,omitempty"`

	// inputTokens is the total of the prompt tokens of those calls, as the summarizer's
	// server reported them (OpenAI-compatible usage), estimated when it reported none. For
	// the Extractive summarizer it is what an LLM would have been sent.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InputTokens *int64 `json:"inputTokens,omitempty"`

	// outputTokens is the total of the completion tokens of those calls, counted the same way.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OutputTokens *int64 `json:"outputTokens,omitempty"`

	// throttled is the number of compactions summarized extractively because the session had
	// used up its summarizer budget (the policy's summarizer.maxCallsPerHour).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Throttled *int64 `json:"throttled,omitempty"`

	// preparedCalls is the number of summarizations started in the background (OpenAI mode):
	// ahead of a Soft or Full compaction (from the policy's summarizer.preparePercent), or
	// after one that did not wait for the model and summarized extractively. Their calls and
	// tokens are added to calls, inputTokens and outputTokens when a compaction uses or
	// discards them.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PreparedCalls *int64 `json:"preparedCalls,omitempty"`

	// preparedUsed is the number of summaries made in the background that a compaction used:
	// prepared ahead and used at the crossing, or made late and merged at the next one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PreparedUsed *int64 `json:"preparedUsed,omitempty"`

	// preparedWasted is the number of summaries made in the background that were discarded:
	// the history was rewritten, the session's state moved on, or the call failed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PreparedWasted *int64 `json:"preparedWasted,omitempty"`

	// preparedWastedTokens is the total of the input and output tokens of the discarded ones.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PreparedWastedTokens *int64 `json:"preparedWastedTokens,omitempty"`

	// deferred is the number of compactions that did not wait for the model: none of the
	// summaries prepared for them was ready, so they summarized extractively at once.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Deferred *int64 `json:"deferred,omitempty"`
}

// Anchor is a fact kept across compactions.
type Anchor struct {
	// type of the anchor.
	// +required
	Type AnchorType `json:"type,omitempty"`

	// content of the anchor.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2000
	Content string `json:"content,omitempty"`
}

// RecordsLocation is where a session's objects live in storage. The operator decides it once,
// when the session first becomes Ready, and keeps it for the session's life in a ConfigMap of
// its own namespace (the session's objects stay where they were written even if the policy's
// storage changes later, and the operator can delete them when the policy is gone). In the
// session's status it is a report: the operator never reads it back, and puts it back when
// someone else changes it.
type RecordsLocation struct {
	// endpoint of the S3 store.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Endpoint string `json:"endpoint,omitempty"`

	// bucket holding the session's objects.
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket,omitempty"`

	// prefix is the policy's key prefix in the bucket; absent when it has none.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Prefix string `json:"prefix,omitempty"`

	// sessionPrefix is the key prefix of the session's compaction records.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	SessionPrefix string `json:"sessionPrefix,omitempty"`

	// region of the bucket; absent lets the client discover it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// protocol the store is reached with: HTTPS, or HTTP (plain, unencrypted).
	// +optional
	Protocol S3Protocol `json:"protocol,omitempty"`

	// credentialsSecretRef is the Secret (namespace always set) holding the access key pair
	// the session's objects are written with; absent means anonymous access.
	// +optional
	CredentialsSecretRef S3CredentialsSecretRef `json:"credentialsSecretRef,omitzero"`
}

// PassThroughReason is why compaction-proxy forwarded a request to the LLM uncompacted.
// +kubebuilder:validation:Enum=NotDecodable;StatefulRequest;TooLarge;UnsupportedRequest;CompactionFailed;WebSocket
type PassThroughReason string

// The reasons a proxy passes a request through; each is also a reason of the PassThrough
// condition.
const (
	// PassThroughNotDecodable: the request body is not a request of its protocol the proxy
	// can read (malformed JSON, an unknown shape).
	PassThroughNotDecodable PassThroughReason = "NotDecodable"
	// PassThroughStatefulRequest: the request continues a conversation the LLM provider
	// keeps (the Responses API's previous_response_id, a stored conversation): its history is
	// not in the request, so there is nothing to compact.
	PassThroughStatefulRequest PassThroughReason = "StatefulRequest"
	// PassThroughTooLarge: the request is larger than the proxy or the compaction API takes.
	PassThroughTooLarge PassThroughReason = "TooLarge"
	// PassThroughUnsupportedRequest: a request the proxy does not compact (an endpoint,
	// method or feature it does not know).
	PassThroughUnsupportedRequest PassThroughReason = "UnsupportedRequest"
	// PassThroughCompactionFailed: the compaction API failed or refused the request, and the
	// proxy failed open.
	PassThroughCompactionFailed PassThroughReason = "CompactionFailed"
	// PassThroughWebSocket: a WebSocket (realtime) connection, whose messages are not compacted.
	PassThroughWebSocket PassThroughReason = "WebSocket"
)

// PassThroughReasons are the reasons a proxy may report, in the order of PassThroughCounts.
var PassThroughReasons = []PassThroughReason{
	PassThroughNotDecodable, PassThroughStatefulRequest, PassThroughTooLarge,
	PassThroughUnsupportedRequest, PassThroughCompactionFailed, PassThroughWebSocket,
}

// PassThroughCounts counts passed-through requests per reason; a reason with none is absent.
// +kubebuilder:validation:MinProperties=1
type PassThroughCounts struct {
	// notDecodable counts requests the proxy could not read.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NotDecodable *int64 `json:"notDecodable,omitempty"`

	// statefulRequest counts requests that continue a conversation the LLM provider keeps.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StatefulRequest *int64 `json:"statefulRequest,omitempty"`

	// tooLarge counts requests too large to compact.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TooLarge *int64 `json:"tooLarge,omitempty"`

	// unsupportedRequest counts requests of an endpoint or feature the proxy does not compact.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UnsupportedRequest *int64 `json:"unsupportedRequest,omitempty"`

	// compactionFailed counts requests forwarded as they were because compaction failed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CompactionFailed *int64 `json:"compactionFailed,omitempty"`

	// webSocket counts WebSocket connections the proxy did not compact, each one request.
	// +optional
	// +kubebuilder:validation:Minimum=0
	WebSocket *int64 `json:"webSocket,omitempty"`
}

// Counter is the counter of reason r in c, nil for a reason it does not know.
func (c *PassThroughCounts) Counter(r PassThroughReason) **int64 {
	switch r {
	case PassThroughNotDecodable:
		return &c.NotDecodable
	case PassThroughStatefulRequest:
		return &c.StatefulRequest
	case PassThroughTooLarge:
		return &c.TooLarge
	case PassThroughUnsupportedRequest:
		return &c.UnsupportedRequest
	case PassThroughCompactionFailed:
		return &c.CompactionFailed
	case PassThroughWebSocket:
		return &c.WebSocket
	}
	return nil
}

// PassThroughStatus is what the session's compaction-proxies reported about the requests
// they forwarded to the LLM uncompacted (POST .../passthrough of the compaction API). The
// counts are the proxies' reports: a tenant's own statement about its session.
// +kubebuilder:validation:MinProperties=1
type PassThroughStatus struct {
	// requests is the number of requests passed through uncompacted, in all.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Requests *int64 `json:"requests,omitempty"`

	// reasons counts the passed-through requests per reason.
	// +optional
	Reasons PassThroughCounts `json:"reasons,omitzero"`

	// lastReason is the reason of the last report.
	// +optional
	LastReason PassThroughReason `json:"lastReason,omitempty"`

	// lastProtocol is the LLM API of the last report's requests, as the proxy names it
	// (openai, anthropic, responses, gemini, ...).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9._-]*$`
	LastProtocol string `json:"lastProtocol,omitempty"`

	// lastTime is when the compaction API received the last report.
	// +optional
	LastTime *metav1.Time `json:"lastTime,omitempty"`
}

// AgentSessionStatus is the observed state of an AgentSession.
// +kubebuilder:validation:MinProperties=1
type AgentSessionStatus struct {
	// conditions are PolicyResolved (the policy exists), StorageReady (its storage is
	// reachable), Ready (the session can be compacted) and, once a compaction-proxy reported
	// requests it forwarded uncompacted, PassThrough: True with the last report's reason
	// (NotDecodable, StatefulRequest, TooLarge, UnsupportedRequest, CompactionFailed,
	// WebSocket) while requests pass through, False with reason Compacting once a request of
	// the session is compacted and no pass-through was reported for 5 minutes.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// sessionID identifies the session in storage: always the object's metadata.uid. A
	// report: the operator uses metadata.uid itself, and puts a changed value back.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	SessionID string `json:"sessionID,omitempty"`

	// tier chosen by the last compaction.
	// +optional
	Tier Tier `json:"tier,omitempty"`

	// contextUsage is the context usage ratio (tokens / contextWindow) that chose the tier,
	// for example "0.82". The tokens are the estimate calibrated by the real prompt sizes the
	// agent reports (usage.promptTokens in compact requests).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	ContextUsage string `json:"contextUsage,omitempty"`

	// compressionRatio is the share of tokens the last compaction removed, for example "0.82".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	CompressionRatio string `json:"compressionRatio,omitempty"`

	// tokensBefore is the estimated token count before the last compaction.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TokensBefore *int64 `json:"tokensBefore,omitempty"`

	// tokensAfter is the estimated token count after the last compaction.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TokensAfter *int64 `json:"tokensAfter,omitempty"`

	// messagesBefore is the message count before the last compaction.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MessagesBefore *int64 `json:"messagesBefore,omitempty"`

	// messagesAfter is the message count after the last compaction.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MessagesAfter *int64 `json:"messagesAfter,omitempty"`

	// lastCompactionTime is when the last compaction happened.
	// +optional
	LastCompactionTime *metav1.Time `json:"lastCompactionTime,omitempty"`

	// compactions counts the compactions per tier.
	// +optional
	Compactions TierCounts `json:"compactions,omitzero"`

	// summarizer counts the summarizer calls of the session's compactions and their tokens:
	// what compaction costs in LLM calls, and the summaries made in the background (prepared
	// ahead, used, wasted). The extractive summary of an Emergency compaction makes no call
	// and is not counted.
	// +optional
	Summarizer SummarizerUsage `json:"summarizer,omitzero"`

	// offloadedCount is the number of tool results offloaded to storage.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OffloadedCount *int64 `json:"offloadedCount,omitempty"`

	// offloadedBytes is the total size of the offloaded tool results, in bytes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OffloadedBytes *int64 `json:"offloadedBytes,omitempty"`

	// anchors are the merged anchors of the session, at most one per type: conversation
	// content, so only written when the policy's anchorsInStatus is Include.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	Anchors []Anchor `json:"anchors,omitempty"`

	// records is where the session's objects live in storage (endpoint, bucket, prefixes,
	// credentials Secret). A report of the location the operator pinned for the session: it is
	// never read back, and a changed value is put back.
	// +optional
	Records *RecordsLocation `json:"records,omitempty"`

	// watermark is the number of messages already covered by compaction records.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Watermark *int64 `json:"watermark,omitempty"`

	// passThrough counts the requests the session's compaction-proxies forwarded to the LLM
	// uncompacted, and why (the PassThrough condition says the same in words); absent when
	// none was reported.
	// +optional
	PassThrough PassThroughStatus `json:"passThrough,omitzero"`

	// observedGeneration is the metadata.generation the status was computed from.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// AgentSession is one coding agent's conversation under a compaction policy. Its status
// reports the latest compaction; deleting it deletes the session's objects from storage.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ags,categories=compaction
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyRef.name`
// +kubebuilder:printcolumn:name="Tier",type=string,JSONPath=`.status.tier`
// +kubebuilder:printcolumn:name="Usage",type=string,JSONPath=`.status.contextUsage`
// +kubebuilder:printcolumn:name="Ratio",type=string,JSONPath=`.status.compressionRatio`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Proxy",type=string,JSONPath=`.status.conditions[?(@.type=="PassThrough")].reason`,description="Why compaction-proxy passes requests through uncompacted (the PassThrough condition's reason); Compacting when they are compacted again, empty when none was reported"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentSession struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the policy and the session's overrides.
	// +required
	Spec AgentSessionSpec `json:"spec,omitzero"`

	// status is the observed state, written by the operator only (config/ and the Helm chart
	// install an admission policy that refuses status writes by anyone else).
	// +optional
	Status AgentSessionStatus `json:"status,omitzero"`
}

// AgentSessionList is a list of AgentSession.
// +kubebuilder:object:root=true
type AgentSessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentSession `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &AgentSession{}, &AgentSessionList{})
}
