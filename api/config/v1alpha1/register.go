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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the apiVersion of a configuration file.
var GroupVersion = schema.GroupVersion{Group: "config.compaction.harness9.io", Version: "v1alpha1"}

// Kind is the kind of a configuration file.
const Kind = "Configuration"

var (
	// SchemeBuilder registers Configuration and its defaulting function.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs)
	// AddToScheme adds Configuration to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Configuration{})
	return nil
}

func addDefaultingFuncs(s *runtime.Scheme) error {
	s.AddTypeDefaultingFunc(&Configuration{}, func(obj any) { SetDefaults(obj.(*Configuration)) })
	return nil
}
