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

// CompactionPolicy configures context compaction for the AgentSessions of its namespace:
// the tier thresholds, offloading, the summarizer and the S3 storage. Secrets it references
// are read from its own namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=acp,categories=compaction
// +kubebuilder:printcolumn:name="Window",type=integer,JSONPath=`.spec.contextWindow`
// +kubebuilder:printcolumn:name="Warn",type=integer,JSONPath=`.spec.thresholds.warnPercent`
// +kubebuilder:printcolumn:name="Full",type=integer,JSONPath=`.spec.thresholds.fullPercent`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.sessions`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CompactionPolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the compaction configuration. Secret references must not set a namespace: a
	// CompactionPolicy reads Secrets from its own namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.storage.s3.credentialsSecretRef) || !has(self.storage.s3.credentialsSecretRef.namespace)",message="namespace is only allowed in a ClusterCompactionPolicy",fieldPath=".storage.s3.credentialsSecretRef.namespace"
	// +kubebuilder:validation:XValidation:rule="!has(self.summarizer) || !has(self.summarizer.openAI) || !has(self.summarizer.openAI.apiKeySecretRef) || !has(self.summarizer.openAI.apiKeySecretRef.namespace)",message="namespace is only allowed in a ClusterCompactionPolicy",fieldPath=".summarizer.openAI.apiKeySecretRef.namespace"
	Spec CompactionPolicySpec `json:"spec,omitzero"`

	// status is the observed state, written by the operator.
	// +optional
	Status CompactionPolicyStatus `json:"status,omitzero"`
}

// CompactionPolicyList is a list of CompactionPolicy.
// +kubebuilder:object:root=true
type CompactionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CompactionPolicy `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &CompactionPolicy{}, &CompactionPolicyList{})
}
