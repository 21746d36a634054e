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

// CompactionPolicySpec is the compaction configuration shared by CompactionPolicy and
// ClusterCompactionPolicy.
// +kubebuilder:validation:XValidation:rule="!has(self.summarizer) || !has(self.summarizer.preparePercent) || self.summarizer.preparePercent == 0 || self.summarizer.preparePercent < self.thresholds.softPercent",message="summarizer.preparePercent must be below thresholds.softPercent: the summary is prepared before the Soft compaction that needs it (0 or unset prepares from warnPercent)",fieldPath=".summarizer.preparePercent"
type CompactionPolicySpec struct {
	// contextWindow is the model's context window in tokens; the thresholds are percentages of it.
	// +required
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=10000000
	ContextWindow int32 `json:"contextWindow,omitempty"`

	// thresholds are the context usage percentages at which each compaction tier starts, the
	// usage a compaction brings the context down to, and the least a compaction must save.
	// +optional
	// +kubebuilder:default={warnPercent:60,softPercent:70,fullPercent:80,emergencyPercent:95,targetPercent:50,minSavingPercent:15}
	Thresholds Thresholds `json:"thresholds,omitzero"`

	// offload controls moving large tool results and images out of the context into storage.
	// +optional
	// +kubebuilder:default={thresholdChars:4000,hookThresholdChars:10000,previewLines:10,imageThresholdBytes:32768}
	Offload OffloadSpec `json:"offload,omitzero"`

	// minTailMessages is the number of most recent messages that compaction never touches.
	// +optional
	// +kubebuilder:default=6
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MinTailMessages int32 `json:"minTailMessages,omitempty"`

	// maxSummaryChars bounds the length of the prose summary, in bytes.
	// +optional
	// +kubebuilder:default=6000
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=100000
	MaxSummaryChars int32 `json:"maxSummaryChars,omitempty"`

	// summarizer selects how summaries are written.
	// +optional
	// +kubebuilder:default={mode:Extractive,maxCallsPerHour:60}
	Summarizer SummarizerSpec `json:"summarizer,omitzero"`

	// pins chooses the messages that compaction keeps verbatim (the task and the user's
	// instructions by default) and bounds their size. Once a compaction has covered a pinned
	// message, it is kept byte-for-byte, right after the system messages, in every compacted
	// view of every tier, so it survives any number of compactions. An agent marks a user or
	// assistant message (one without tool_calls) to pin by sending it with "pinned": true in
	// a compact request; the views the compaction API returns never carry the mark. Every
	// compaction record carries the pinned messages' count, tokens and hash.
	// +optional
	// +kubebuilder:default={rule:TaskAndInstructions,budgetPercent:15}
	Pins PinsSpec `json:"pins,omitzero"`

	// anchorsInStatus says whether a session's merged anchors (the task, decisions, files,
	// errors and next steps of the conversation) are copied into the AgentSession's
	// status.anchors. Omit (the default) keeps conversation content out of status, which
	// anyone allowed to get agentsessions in the namespace can read; the anchors stay in the
	// session's records and state in storage. Include copies them, for people who read
	// sessions with kubectl. Switching to Omit clears status.anchors of the policy's sessions.
	// +optional
	// +kubebuilder:default=Omit
	AnchorsInStatus AnchorsInStatus `json:"anchorsInStatus,omitempty"`

	// storage is where offloaded tool results, compaction records and session state are kept.
	// +required
	Storage StorageSpec `json:"storage,omitzero"`
}

// AnchorsInStatus says whether a session's anchors are copied into its status.
// +kubebuilder:validation:Enum=Omit;Include
type AnchorsInStatus string

const (
	// AnchorsOmit keeps the anchors out of status (the default).
	AnchorsOmit AnchorsInStatus = "Omit"
	// AnchorsInclude copies the merged anchors into status.anchors.
	AnchorsInclude AnchorsInStatus = "Include"
)

// Thresholds are the context usage percentages (of contextWindow) that select the tier, the
// usage a compaction aims for and the least share of the context a compaction must save.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:XValidation:rule="self.warnPercent < self.softPercent && self.softPercent < self.fullPercent && self.fullPercent < self.emergencyPercent",message="thresholds must be strictly increasing: warnPercent < softPercent < fullPercent < emergencyPercent"
// +kubebuilder:validation:XValidation:rule="self.targetPercent < self.warnPercent",message="targetPercent must be below warnPercent: a compaction has to bring the context below the Warn tier (targetPercent defaults to 50: lower it when you set warnPercent to 50 or less)"
type Thresholds struct {
	// warnPercent is the usage at which the Warn tier starts: large tool results in the older
	// messages are offloaded to storage, nothing is summarized.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	WarnPercent int32 `json:"warnPercent,omitempty"`

	// softPercent is the usage at which the Soft tier starts: the oldest half of the older
	// messages is summarized into anchors and prose.
	// +optional
	// +kubebuilder:default=70
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SoftPercent int32 `json:"softPercent,omitempty"`

	// fullPercent is the usage at which the Full tier starts: all older messages, everything
	// but the most recent minTailMessages, are summarized into anchors and prose.
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FullPercent int32 `json:"fullPercent,omitempty"`

	// emergencyPercent is the usage at which the Emergency tier starts: forced truncation to
	// the most recent messages, with no summarizer call; the last summary is kept.
	// +optional
	// +kubebuilder:default=95
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	EmergencyPercent int32 `json:"emergencyPercent,omitempty"`

	// targetPercent is the usage a Soft or Full compaction brings the context down to. A
	// compaction that would leave the context above it summarizes more in the same turn (a
	// Soft compaction is done as Full), so one compaction buys many turns of headroom instead
	// of one: fewer summarizer calls, and the prompt prefix the LLM provider caches is
	// rewritten less often. Must be below warnPercent.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	TargetPercent int32 `json:"targetPercent,omitempty"`

	// minSavingPercent is the least share of the context, in percent, that a compaction must
	// save to be done at all: a summarizer call or a rewrite of the cached prompt prefix that
	// saves less costs more than it buys. Warn-tier offloads wait until together they save
	// this much, a Soft compaction that would save less is done as Full, and a Full one that
	// would save less waits. Higher values mean fewer, larger compactions: fewer summarizer
	// calls and fewer prompt-cache rewrites.
	// +optional
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	MinSavingPercent int32 `json:"minSavingPercent,omitempty"`
}

// OffloadSpec controls moving large tool results out of the context into storage.
// +kubebuilder:validation:MinProperties=1
type OffloadSpec struct {
	// thresholdChars is the tool result size, in bytes, above which compaction offloads
	// the result and leaves a preview in its place.
	// +optional
	// +kubebuilder:default=4000
	// +kubebuilder:validation:Minimum=256
	// +kubebuilder:validation:Maximum=100000000
	ThresholdChars int32 `json:"thresholdChars,omitempty"`

	// hookThresholdChars is the tool result size, in bytes, above which the toolresults
	// endpoint offloads the result at its source, before it ever enters the context.
	// +optional
	// +kubebuilder:default=10000
	// +kubebuilder:validation:Minimum=256
	// +kubebuilder:validation:Maximum=100000000
	HookThresholdChars int32 `json:"hookThresholdChars,omitempty"`

	// previewLines is the number of leading lines of an offloaded result kept in the context;
	// 0 keeps none (the placeholder then gives only the result's size and how to read it back).
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	PreviewLines *int32 `json:"previewLines,omitempty"`

	// imageThresholdBytes is the size, in bytes of base64 data, above which an image in
	// the head of the conversation (OpenAI image_url or input_image with a data URL,
	// Anthropic image with a base64 source, in user messages and tool results) is
	// offloaded from Warn on, like a large tool result: a text part names it (media type,
	// size, the message it came from) and the read-back route returns its bytes with
	// their content type. An image counts about 1,600 tokens however large it is, so this
	// matters to agents that send a screenshot every turn. 0 never offloads an image.
	// +optional
	// +kubebuilder:default=32768
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000000
	ImageThresholdBytes *int32 `json:"imageThresholdBytes,omitempty"`
}

// PinRule says which messages of a session are pinned.
// +kubebuilder:validation:Enum=TaskAndInstructions;Task;Marked;None
type PinRule string

const (
	// PinTaskAndInstructions pins the task (the user message the agent first answered), the
	// other user messages (each distinct text once) and the messages the agent marks.
	PinTaskAndInstructions PinRule = "TaskAndInstructions"
	// PinTask pins the task and the messages the agent marks.
	PinTask PinRule = "Task"
	// PinMarked pins only the messages the agent marks.
	PinMarked PinRule = "Marked"
	// PinNone pins nothing, marked messages included.
	PinNone PinRule = "None"
)

// PinsSpec chooses the messages that compaction keeps verbatim, byte-for-byte, right after
// the system messages in every compacted view, and bounds their size.
// +kubebuilder:validation:MinProperties=1
type PinsSpec struct {
	// rule says which messages are pinned.
	// TaskAndInstructions (the default) pins the task (the user message the agent first
	// answered), every later user message (each distinct text once, so a repeated reminder
	// is pinned once), the user messages before the task (a demonstration, pasted context)
	// if they fit whole, and the messages the agent marks with "pinned": true.
	// Task pins the task and the marked messages.
	// Marked pins only the messages marked with "pinned": true.
	// None pins nothing, marked messages included.
	// When the budget runs short, the task comes first, then the marked messages, the later
	// user messages (newest first) and the messages before the task.
	// +optional
	// +kubebuilder:default=TaskAndInstructions
	Rule PinRule `json:"rule,omitempty"`

	// budgetPercent bounds the pinned messages together to this percentage of the context
	// window. A pin that does not fit is kept as its head and tail, and its full text is
	// offloaded to storage and readable back with
	// GET /v1/namespaces/{namespace}/sessions/{name}/toolresults/{id}, where id (for example
	// pinned-message-3) is named in the kept text.
	// +optional
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	BudgetPercent int32 `json:"budgetPercent,omitempty"`
}

// SummarizerMode selects how summaries are written.
// +kubebuilder:validation:Enum=Extractive;OpenAI
type SummarizerMode string

const (
	// SummarizerExtractive builds summaries from the messages themselves, without a model.
	SummarizerExtractive SummarizerMode = "Extractive"
	// SummarizerOpenAI asks an OpenAI-compatible chat completions endpoint for summaries.
	SummarizerOpenAI SummarizerMode = "OpenAI"
)

// SummarizerSpec selects how summaries are written.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:XValidation:rule="self.mode != 'OpenAI' || has(self.openAI)",message="summarizer.openAI is required when mode is OpenAI"
type SummarizerSpec struct {
	// mode is Extractive (no model, the default) or OpenAI (an OpenAI-compatible endpoint,
	// configured in openAI; falls back to Extractive when the endpoint fails).
	// +optional
	// +kubebuilder:default=Extractive
	Mode SummarizerMode `json:"mode,omitempty"`

	// openAI configures the OpenAI-compatible endpoint; required when mode is OpenAI.
	// +optional
	OpenAI OpenAISummarizerSpec `json:"openAI,omitzero"`

	// maxCallsPerHour bounds the summarizer calls one session makes in any hour (OpenAI
	// mode; the Extractive summarizer costs nothing and is never limited). Past it the
	// session is summarized extractively until an hour after its oldest counted call, and
	// its records and status.summarizer.throttled say so: one agent, or one that rewrites
	// its history on every request so each starts over, cannot spend the platform's LLM
	// budget. 0 means no limit.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	MaxCallsPerHour *int32 `json:"maxCallsPerHour,omitempty"`

	// preparePercent is the context usage, in percent of contextWindow, from which the summary
	// the next Soft or Full compaction will need is prepared in the background (OpenAI mode),
	// so that compaction uses it at once instead of waiting for the model; a compaction with
	// none ready summarizes extractively and merges the model's summary at the next one.
	// 0 or unset prepares from thresholds.warnPercent. Must be below thresholds.softPercent.
	// Lower values give the model more turns to answer, but the prepared summary then covers
	// less of what the compaction summarizes (the rest is merged in extractively). An
	// AgentSession's status.summarizer counts the summaries prepared, used and wasted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=99
	PreparePercent *int32 `json:"preparePercent,omitempty"`
}

// OpenAISummarizerSpec configures an OpenAI-compatible chat completions endpoint.
type OpenAISummarizerSpec struct {
	// baseURL is the API base URL, for example https://api.openai.com/v1.
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	BaseURL string `json:"baseURL,omitempty"`

	// model is the model name sent with each request.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Model string `json:"model,omitempty"`

	// apiKeySecretRef selects the Secret key holding the API key; omit it for endpoints that
	// need no key. The Secret must carry the label compaction.harness9.io/credentials=true:
	// the operator uses no other Secret, and the policy is then not Ready (SecretNotUsable,
	// the same reason and message as for a Secret that does not exist).
	// +optional
	APIKeySecretRef SecretKeySelector `json:"apiKeySecretRef,omitzero"`

	// timeoutSeconds bounds one summarization request, in seconds.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// maxOutputTokens bounds the length of the model's summary, in tokens; it is sent in the
	// request field maxTokensField names.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxOutputTokens int32 `json:"maxOutputTokens,omitempty"`

	// maxTokensField is the request field maxOutputTokens is sent in. MaxTokens (the default)
	// sends max_tokens, which vLLM, Ollama, llama.cpp, LiteLLM and OpenAI's chat models
	// accept. MaxCompletionTokens sends max_completion_tokens, the only one OpenAI's reasoning
	// models (o1, o3, o4-mini, gpt-5) accept: they refuse a request with max_tokens, and every
	// summary then falls back to Extractive.
	// +optional
	// +kubebuilder:default=MaxTokens
	MaxTokensField OpenAIMaxTokensField `json:"maxTokensField,omitempty"`
}

// OpenAIMaxTokensField is the chat completions request field that bounds a summary's length.
// +kubebuilder:validation:Enum=MaxTokens;MaxCompletionTokens
type OpenAIMaxTokensField string

const (
	// OpenAIMaxTokens sends the bound as max_tokens (the default).
	OpenAIMaxTokens OpenAIMaxTokensField = "MaxTokens"
	// OpenAIMaxCompletionTokens sends the bound as max_completion_tokens.
	OpenAIMaxCompletionTokens OpenAIMaxTokensField = "MaxCompletionTokens"
)

// StorageSpec is where a session's offloaded tool results, compaction records and state live.
type StorageSpec struct {
	// s3 is an S3-compatible object store (AWS S3, MinIO, ...).
	// +required
	S3 S3StorageSpec `json:"s3,omitzero"`
}

// S3StorageSpec is an S3-compatible bucket.
type S3StorageSpec struct {
	// endpoint is the S3 endpoint as host[:port] or a URL, for example
	// minio.minio.svc:9000 or https://s3.eu-west-1.amazonaws.com.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Endpoint string `json:"endpoint,omitempty"`

	// bucket is the bucket name (DNS-compatible: lowercase letters, digits, '.' and '-').
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket,omitempty"`

	// prefix is prepended to every object key, so several policies can share a bucket.
	// It must not start with '/' or contain '..'. Omit it for none.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="prefix must not start with '/'"
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="prefix must not contain '..'"
	Prefix string `json:"prefix,omitempty"`

	// region is the bucket's region; omit it to use the endpoint's default.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// protocol the endpoint is reached with: HTTPS (the default, TLS verified against the
	// system roots) or HTTP (plain and unencrypted: credentials and the session's content
	// cross the network in the clear; for a store inside the cluster without TLS).
	// +optional
	// +kubebuilder:default=HTTPS
	Protocol S3Protocol `json:"protocol,omitempty"`

	// createBucket is Never (the default: a missing bucket makes the policy not Ready,
	// reason BucketNotFound) or IfNotPresent (the operator creates the bucket when it does
	// not exist, which needs the s3:CreateBucket permission).
	// +optional
	// +kubebuilder:default=Never
	CreateBucket BucketCreation `json:"createBucket,omitempty"`

	// credentialsSecretRef selects the Secret holding the access key pair; omit it to use
	// anonymous access. The Secret must carry the label
	// compaction.harness9.io/credentials=true: the operator uses no other Secret, and the
	// policy is then not Ready (SecretNotUsable, the same reason and message as for a Secret
	// that does not exist).
	// +optional
	CredentialsSecretRef S3CredentialsSecretRef `json:"credentialsSecretRef,omitzero"`
}

// S3Protocol is how an S3 endpoint is reached.
// +kubebuilder:validation:Enum=HTTPS;HTTP
type S3Protocol string

const (
	// S3HTTPS reaches the endpoint over TLS (the default).
	S3HTTPS S3Protocol = "HTTPS"
	// S3HTTP reaches the endpoint over plain, unencrypted HTTP.
	S3HTTP S3Protocol = "HTTP"
)

// BucketCreation says whether the operator creates a missing bucket.
// +kubebuilder:validation:Enum=Never;IfNotPresent
type BucketCreation string

const (
	// BucketCreationNever leaves a missing bucket missing (the default).
	BucketCreationNever BucketCreation = "Never"
	// BucketCreationIfNotPresent creates the bucket when it does not exist.
	BucketCreationIfNotPresent BucketCreation = "IfNotPresent"
)

// SecretReference names a Secret. namespace is only allowed in a ClusterCompactionPolicy
// (where it defaults to the operator's namespace); a CompactionPolicy always reads Secrets
// from its own namespace and the API server rejects a namespace there. Only a Secret labelled
// compaction.harness9.io/credentials=true (CredentialsLabel) is used.
type SecretReference struct {
	// name of the Secret. It must be labelled compaction.harness9.io/credentials=true.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// namespace of the Secret. Only allowed in a ClusterCompactionPolicy, where it defaults to
	// the operator's namespace; a CompactionPolicy uses its own namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// SecretKeySelector selects one key of a Secret.
type SecretKeySelector struct {
	SecretReference `json:",inline"`

	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// S3CredentialsSecretRef selects a Secret holding an S3 access key pair.
type S3CredentialsSecretRef struct {
	SecretReference `json:",inline"`

	// accessKeyIDKey is the Secret key holding the access key ID.
	// +optional
	// +kubebuilder:default=accessKeyID
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	AccessKeyIDKey string `json:"accessKeyIDKey,omitempty"`

	// secretAccessKeyKey is the Secret key holding the secret access key.
	// +optional
	// +kubebuilder:default=secretAccessKey
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretAccessKeyKey string `json:"secretAccessKeyKey,omitempty"`
}

// CompactionPolicyStatus is the observed state of a CompactionPolicy or ClusterCompactionPolicy.
// +kubebuilder:validation:MinProperties=1
type CompactionPolicyStatus struct {
	// conditions are StorageReady (the bucket is reachable with the credentials), Ready
	// (the policy is valid and usable) and ConditionalWrites (whether the storage honours
	// create-only writes, If-None-Match: *; reasons Supported, IfNoneMatchIgnored (a warning:
	// the policy stays Ready, but a reused tool-call ID may replace an offloaded result and two
	// replicas may overwrite a session's first state), ProbeFailed (tried again at the next
	// storage probe) or StorageNotReady).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the metadata.generation the status was computed from.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// sessions is the number of AgentSessions using this policy.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Sessions *int32 `json:"sessions,omitempty"`
}

// IsSet reports whether the reference is present: an absent one is the zero value.
func (r SecretReference) IsSet() bool { return r != SecretReference{} }

// IsSet reports whether openAI is present: an absent one is the zero value.
func (o OpenAISummarizerSpec) IsSet() bool { return o != OpenAISummarizerSpec{} }
