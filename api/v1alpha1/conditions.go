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

// The status vocabulary: the condition types and reasons the operator sets, and the reasons
// of the events it emits. Each Go name is its value with a Condition or Reason prefix; the
// values are what users see in `kubectl get`/`describe` and match in alerts, so they change
// only with the API version.

// Condition types set on CompactionPolicy, ClusterCompactionPolicy and AgentSession.
const (
	// ConditionReady is the summary condition: the object is usable.
	ConditionReady = "Ready"
	// ConditionStorageReady reports whether the S3 storage is reachable with the credentials.
	ConditionStorageReady = "StorageReady"
	// ConditionPolicyResolved reports whether an AgentSession's policyRef points at a policy.
	ConditionPolicyResolved = "PolicyResolved"
	// ConditionPassThrough reports, on an AgentSession, whether its compaction-proxies forward
	// requests to the LLM uncompacted: True with the reason of the last report (a
	// PassThroughReason: NotDecodable, StatefulRequest, TooLarge, UnsupportedRequest,
	// CompactionFailed, WebSocket), False with ReasonCompacting. Absent until a proxy reports.
	ConditionPassThrough = "PassThrough"
	// ConditionContextFits reports, on an AgentSession, whether the part of the view no
	// compaction shrinks (the system prompt, tools and pins, as estimated and calibrated)
	// fits under the Emergency threshold of the policy's window: False with
	// ReasonFixedPartOverWindow, True with ReasonFits once it fits again. Absent while it
	// always fitted.
	ConditionContextFits = "ContextFits"
	// ConditionConditionalWrites reports, on both policy kinds, whether the storage honours
	// create-only writes (If-None-Match: *), probed once per policy generation and Secret
	// versions with an object under {prefix}.probe/ that is deleted at once: True with
	// ReasonSupported, False with ReasonIfNoneMatchIgnored (a warning: the policy stays
	// Ready), Unknown with ReasonProbeFailed or, while storage is not ready,
	// ReasonStorageNotReady.
	ConditionConditionalWrites = "ConditionalWrites"
)

// Reasons of a policy's ConditionalWrites.
const (
	// ReasonSupported: a create-only write over an existing object was refused (412).
	ReasonSupported = "Supported"
	// ReasonIfNoneMatchIgnored: the storage accepted a create-only write over an existing
	// object. A reused tool-call ID may then replace an earlier offloaded result, and two
	// replicas may overwrite each other's first state of a session.
	ReasonIfNoneMatchIgnored = "IfNoneMatchIgnored"
	// ReasonProbeFailed: the probe could not tell (a write or the probe object's deletion
	// failed); it is tried again at the next storage probe.
	ReasonProbeFailed = "ProbeFailed"
)

// Reasons of an AgentSession's ContextFits.
const (
	ReasonFits                = "Fits"
	ReasonFixedPartOverWindow = "FixedPartOverWindow"
)

// Reasons of Ready on both policy kinds and on AgentSession.
const (
	// ReasonReady: Ready is True.
	ReasonReady = "Ready"
	// ReasonStorageNotReady: the policy's storage probe failed (StorageReady says why).
	ReasonStorageNotReady = "StorageNotReady"
	// ReasonSummarizerNotReady: the policy's summarizer cannot be used (its API-key Secret).
	ReasonSummarizerNotReady = "SummarizerNotReady"
	// ReasonInvalidNamespaceSelector: a ClusterCompactionPolicy's namespaceSelector does not
	// parse (it then selects no namespace).
	ReasonInvalidNamespaceSelector = "InvalidNamespaceSelector"
	// ReasonInvalidEngineConfig: the compaction engine refuses the configuration the policy
	// makes (a policy stored before a CRD rule existed), so its sessions could not compact.
	ReasonInvalidEngineConfig = "InvalidEngineConfig"
)

// Reasons of StorageReady (and of Ready when storage is why it is False), shared by policies
// and sessions.
const (
	// ReasonReachable: StorageReady is True.
	ReasonReachable = "Reachable"
	// ReasonSecretNotUsable: a Secret the policy names does not exist or does not carry
	// the label CredentialsLabel=true. The two are one reason with one message, so a
	// policy's conditions do not tell whoever writes policies which Secrets exist.
	ReasonSecretNotUsable = "SecretNotUsable"
	// ReasonSecretKeyMissing: a labelled Secret the policy names lacks a key it needs (or
	// the key is empty).
	ReasonSecretKeyMissing     = "SecretKeyMissing"
	ReasonBucketNotFound       = "BucketNotFound"
	ReasonAccessDenied         = "AccessDenied"
	ReasonInvalidStorageConfig = "InvalidStorageConfig"
	ReasonStorageUnreachable   = "StorageUnreachable"
	// ReasonSecretNamespaceNotAllowed: a ClusterCompactionPolicy names a Secret outside the
	// operator's namespace and secrets.clusterPolicyNamespaces; it is never read.
	ReasonSecretNamespaceNotAllowed = "SecretNamespaceNotAllowed"
	// ReasonEndpointNotAllowed: the storage endpoint (or summarizer base URL) is outside the
	// operator's egress.allowedEndpoints; it is never dialled.
	ReasonEndpointNotAllowed = "EndpointNotAllowed"
)

// Reasons of an AgentSession's PolicyResolved, StorageReady and Ready.
const (
	// ReasonPolicyFound: PolicyResolved is True.
	ReasonPolicyFound    = "PolicyFound"
	ReasonPolicyNotFound = "PolicyNotFound"
	// ReasonPolicyLookupFailed: reading the policy failed for another reason than its absence.
	ReasonPolicyLookupFailed = "PolicyLookupFailed"
	ReasonPolicyNotReady     = "PolicyNotReady"
	// ReasonNamespaceNotAllowed: the ClusterCompactionPolicy's namespaceSelector does not
	// select the session's namespace (or does not parse).
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonDeleting: the session is being deleted and waits for its objects to be deleted.
	ReasonDeleting = "Deleting"
	// ReasonStorageDeleteFailed: deleting the session's objects failed (retried).
	ReasonStorageDeleteFailed = "StorageDeleteFailed"
	// ReasonStorageLocationInvalid: the pinned location ConfigMap does not hold together; the
	// session is neither served nor garbage-collected with it.
	ReasonStorageLocationInvalid = "StorageLocationInvalid"
	// ReasonStorageLocationUnverified: a session being deleted has no pinned location, and its
	// status.records is not where its policy stores; the finalizer stays.
	ReasonStorageLocationUnverified = "StorageLocationUnverified"
	// ReasonStorageLocationNotPinned: pinning the storage location failed (retried).
	ReasonStorageLocationNotPinned = "StorageLocationNotPinned"
)

// Reasons of an AgentSession's PassThrough condition besides the PassThroughReason values
// (which are its reasons while it is True).
const (
	// ReasonCompacting: PassThrough is False. A request of the session was compacted after
	// the last pass-through report, and none came for 5 minutes before it.
	ReasonCompacting = "Compacting"
)

// Reasons of events that are no condition's reason. Warning events about a condition take
// the condition's reason.
const (
	// ReasonPolicyReady (Normal, on a policy): the policy became Ready.
	ReasonPolicyReady = "PolicyReady"
	// ReasonStatusCorrected (Warning, on a session): status.sessionID or status.records had
	// been changed by someone else than the operator and were put back.
	ReasonStatusCorrected = "StatusCorrected"
	// ReasonStorageDeleted (Normal, on a session): its objects were deleted.
	ReasonStorageDeleted = "StorageDeleted"
	// ReasonSessionCreated (Normal, on a pod): its AgentSession was created.
	ReasonSessionCreated = "SessionCreated"
	// ReasonSessionNameTaken (Warning, on a pod): an AgentSession of the pod's name exists and
	// is not the pod's.
	ReasonSessionNameTaken = "SessionNameTaken"
	// ReasonInvalidAnnotation (Warning, on a pod): its compaction annotations do not parse.
	ReasonInvalidAnnotation = "InvalidAnnotation"
	// ReasonPolicyChangeRefused (Warning, on a pod): its policy annotations name another
	// policy than its AgentSession uses, and a session's policyRef cannot change.
	ReasonPolicyChangeRefused = "PolicyChangeRefused"
	// ReasonContextCompacted (Normal; Warning for Emergency or a compaction with an error, on
	// a session): a compaction changed the view or failed; the note is the record's
	// notification.
	ReasonContextCompacted = "ContextCompacted"
)
