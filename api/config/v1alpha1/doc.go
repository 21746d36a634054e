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

// Package v1alpha1 is the manager's configuration file format (apiVersion
// config.compaction.harness9.io/v1alpha1, kind Configuration): the types, their defaults,
// their validation, and Load, which reads a file strictly (an unknown or repeated field is
// an error) and returns it defaulted and validated. docs/operations.md lists every field.
// +kubebuilder:object:generate=true
package v1alpha1
