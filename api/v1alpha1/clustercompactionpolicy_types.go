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

// ClusterCompactionPolicy is a cluster-scoped CompactionPolicy that AgentSessions of every
// namespace (or of the namespaces spec.namespaceSelector selects) can use (policyRef.kind:
// ClusterCompactionPolicy). Its Secret references may name a namespace; without one they are
// read from the operator's namespace, and the operator reads no other namespace's Secrets
// unless its configuration's secrets.clusterPolicyNamespaces names it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cacp,categories=compaction
// +kubebuilder:printcolumn:name="Window",type=integer,JSONPath=`.spec.contextWindow`
// +kubebuilder:printcolumn:name="Warn",type=integer,JSONPath=`.spec.thresholds.warnPercent`
// +kubebuilder:printcolumn:name="Full",type=integer,JSONPath=`.spec.thresholds.fullPercent`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.sessions`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterCompactionPolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the compaction configuration and the namespaces that may use it.
	// +required
	Spec ClusterCompactionPolicySpec `json:"spec,omitzero"`

	// status is the observed state, written by the operator.
	// +optional
	Status CompactionPolicyStatus `json:"status,omitzero"`
}

// ClusterCompactionPolicySpec is a CompactionPolicySpec and the namespaces whose sessions may
// use it.
type ClusterCompactionPolicySpec struct {
	CompactionPolicySpec `json:",inline"`

	// namespaceSelector selects the namespaces, by their labels, whose AgentSessions may use
	// this policy (and so its storage credentials and summarizer key). Omitted, every
	// namespace may; an empty selector ({}) also selects every namespace. A session in a
	// namespace it does not select is not Ready (reason NamespaceNotAllowed), and the
	// compaction API refuses its requests (403 NamespaceNotAllowed); relabelling the
	// namespace re-evaluates its sessions.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// ClusterCompactionPolicyList is a list of ClusterCompactionPolicy.
// +kubebuilder:object:root=true
type ClusterCompactionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterCompactionPolicy `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &ClusterCompactionPolicy{}, &ClusterCompactionPolicyList{})
}
