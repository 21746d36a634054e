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

// Well-known label keys and values of objects the operator does not own.
const (
	// CredentialsLabel marks a Secret a policy may use: the operator reads a Secret that a
	// policy's credentialsSecretRef or apiKeySecretRef names only when it carries this label
	// with the value CredentialsLabelValue. Any other Secret is treated as absent: its values
	// are never sent anywhere, and conditions do not tell it apart from a missing one
	// (ReasonSecretNotUsable). Write access to policies is not read access to Secrets; the
	// label is how whoever writes a Secret says the operator may use it.
	CredentialsLabel = "compaction.harness9.io/credentials"
	// CredentialsLabelValue is the value of CredentialsLabel on a Secret a policy may use.
	CredentialsLabelValue = "true"
)
