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
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"
)

var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// Load reads the configuration file at path (YAML or JSON), defaults and validates it. An
// empty path is the defaults. The decoding is strict: an unknown field, a field given
// twice, or another apiVersion or kind is an error.
func Load(path string) (*Configuration, error) {
	if path == "" {
		c := &Configuration{}
		SetDefaults(c)
		if errs := Validate(c); len(errs) > 0 {
			return nil, fmt.Errorf("default configuration: %w", errs.ToAggregate())
		}
		return c, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	c, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w", path, err)
	}
	return c, nil
}

// Decode decodes a configuration file's content strictly, defaults and validates it.
func Decode(data []byte) (*Configuration, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return nil, err
	}
	if tm.APIVersion != GroupVersion.String() || tm.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q and kind %q: want %s and %s", tm.APIVersion, tm.Kind, GroupVersion, Kind)
	}
	c := &Configuration{}
	if err := runtime.DecodeInto(codecs.UniversalDecoder(GroupVersion), data, c); err != nil {
		return nil, err
	}
	if errs := Validate(c); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return c, nil
}
