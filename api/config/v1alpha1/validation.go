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
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harness9/compaction-operator/internal/egress"
)

// Paths of the endpoint lists, as the conditions of a policy naming another endpoint name them.
var (
	AllowedEndpointsPath          = field.NewPath("egress", "allowedEndpoints")
	NamespacedPolicyEndpointsPath = field.NewPath("egress", "namespacedPolicyEndpoints")
)

// Validate returns what is wrong with a defaulted Configuration, each error naming its
// field's path (api.tls.certDir, ...).
func Validate(c *Configuration) field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != GroupVersion.String() || c.Kind != Kind {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), c.APIVersion+", "+c.Kind,
			fmt.Sprintf("must be apiVersion %s, kind %s", GroupVersion, Kind)))
	}
	errs = append(errs, namespace(field.NewPath("clusterResourceNamespace"), c.ClusterResourceNamespace)...)

	le, p := c.LeaderElection, field.NewPath("leaderElection")
	if le.ResourceNamespace != "" {
		errs = append(errs, namespace(p.Child("resourceNamespace"), le.ResourceNamespace)...)
	}
	for _, msg := range validation.IsDNS1123Subdomain(le.ResourceName) {
		errs = append(errs, field.Invalid(p.Child("resourceName"), le.ResourceName, msg))
	}
	if le.RetryPeriod.Duration <= 0 || le.RenewDeadline.Duration <= le.RetryPeriod.Duration || le.LeaseDuration.Duration <= le.RenewDeadline.Duration {
		errs = append(errs, field.Invalid(p, fmt.Sprintf("retryPeriod %s, renewDeadline %s, leaseDuration %s",
			le.RetryPeriod.Duration, le.RenewDeadline.Duration, le.LeaseDuration.Duration),
			"must be 0 < retryPeriod < renewDeadline < leaseDuration"))
	}

	p = field.NewPath("clientConnection")
	errs = append(errs, positive(p.Child("qps"), c.ClientConnection.QPS)...)
	errs = append(errs, positive(p.Child("burst"), c.ClientConnection.Burst)...)

	p = field.NewPath("controllers")
	errs = append(errs, positive(p.Child("sessionWorkers"), c.Controllers.SessionWorkers)...)
	errs = append(errs, positiveDuration(p.Child("storageProbeInterval"), c.Controllers.StorageProbeInterval.Duration)...)
	errs = append(errs, positiveDuration(p.Child("storageRetryInterval"), c.Controllers.StorageRetryInterval.Duration)...)
	errs = append(errs, positiveDuration(p.Child("gcRetryMaxDelay"), c.Controllers.GCRetryMaxDelay.Duration)...)

	p = field.NewPath("secrets")
	for i, ns := range c.Secrets.ClusterPolicyNamespaces {
		errs = append(errs, namespace(p.Child("clusterPolicyNamespaces").Index(i), ns)...)
	}
	errs = append(errs, positiveDuration(p.Child("recheckInterval"), c.Secrets.RecheckInterval.Duration)...)
	errs = append(errs, positiveDuration(p.Child("cacheTTL"), c.Secrets.CacheTTL.Duration)...)

	if _, err := egress.ParseFlag(AllowedEndpointsPath.String(), c.Egress.AllowedEndpoints); err != nil {
		errs = append(errs, field.Invalid(AllowedEndpointsPath, c.Egress.AllowedEndpoints, err.Error()))
	}
	if ns := c.Egress.NamespacedPolicyEndpoints; len(ns) != 1 || strings.TrimSpace(ns[0]) != "*" {
		if _, err := egress.ParseFlag(NamespacedPolicyEndpointsPath.String(), ns); err != nil {
			errs = append(errs, field.Invalid(NamespacedPolicyEndpointsPath, ns, err.Error()))
		}
	}
	return append(errs, validateAPI(&c.API)...)
}

func validateAPI(a *API) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("api")
	if strings.TrimSpace(a.TokenAudience) == "" {
		errs = append(errs, field.Required(p.Child("tokenAudience"), "agents' tokens must be for an audience of the compaction API"))
	}
	errs = append(errs, positiveDuration(p.Child("requestTimeout"), a.RequestTimeout.Duration)...)
	errs = append(errs, positiveDuration(p.Child("readTimeout"), a.ReadTimeout.Duration)...)
	errs = append(errs, positive(p.Child("maxBodyBytes"), a.MaxBodyBytes)...)
	errs = append(errs, positive(p.Child("maxMessages"), a.MaxMessages)...)
	errs = append(errs, positive(p.Child("maxInflightBytes"), a.MaxInflightBytes)...)
	if a.MaxInflightBytesPerCaller < -1 {
		errs = append(errs, field.Invalid(p.Child("maxInflightBytesPerCaller"), a.MaxInflightBytesPerCaller, "must be -1 (no share), 0 (an eighth of maxInflightBytes) or more"))
	}
	errs = append(errs, positiveDuration(p.Child("usageInterval"), a.UsageInterval.Duration)...)
	errs = append(errs, nonNegativeDuration(p.Child("statusInterval"), a.StatusInterval.Duration)...)
	errs = append(errs, nonNegativeDuration(p.Child("stateTrust"), a.StateTrust.Duration)...)

	r := p.Child("reviews")
	errs = append(errs, positive(r.Child("qps"), a.Reviews.QPS)...)
	errs = append(errs, positive(r.Child("burst"), a.Reviews.Burst)...)
	errs = append(errs, positive(r.Child("newTokenRate"), a.Reviews.NewTokenRate)...)
	errs = append(errs, positive(r.Child("newTokenBurst"), a.Reviews.NewTokenBurst)...)
	errs = append(errs, positive(r.Child("callerRate"), a.Reviews.CallerRate)...)
	errs = append(errs, positive(r.Child("callerBurst"), a.Reviews.CallerBurst)...)

	b := p.Child("summarizerBudget")
	errs = append(errs, atLeastZero(b.Child("namespaceSessions"), *a.SummarizerBudget.NamespaceSessions)...)
	errs = append(errs, atLeastZero(b.Child("policySessions"), *a.SummarizerBudget.PolicySessions)...)

	t := p.Child("tls")
	if a.TLS.InsecureServeHTTP && a.TLS.CertDir != "" {
		errs = append(errs, field.Forbidden(t.Child("certDir"), "insecureServeHTTP and certDir are exclusive"))
	}
	errs = append(errs, namespace(t.Child("namespace"), a.TLS.Namespace)...)
	for _, n := range []struct{ field, name string }{{"serviceName", a.TLS.ServiceName}, {"secretName", a.TLS.SecretName}, {"caConfigMap", a.TLS.CAConfigMap}} {
		for _, msg := range validation.IsDNS1123Subdomain(n.name) {
			errs = append(errs, field.Invalid(t.Child(n.field), n.name, msg))
		}
	}
	errs = append(errs, positiveDuration(t.Child("caValidity"), a.TLS.CAValidity.Duration)...)
	errs = append(errs, positiveDuration(t.Child("certValidity"), a.TLS.CertValidity.Duration)...)
	return errs
}

type number interface {
	int32 | int64 | float64
}

func positive[T number](p *field.Path, v T) field.ErrorList {
	if v > 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, v, "must be positive")}
}

func atLeastZero[T number](p *field.Path, v T) field.ErrorList {
	if v >= 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, v, "must not be negative")}
}

func positiveDuration(p *field.Path, d time.Duration) field.ErrorList {
	if d > 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, d.String(), "must be positive")}
}

func nonNegativeDuration(p *field.Path, d time.Duration) field.ErrorList {
	if d >= 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, d.String(), "must not be negative")}
}

func namespace(p *field.Path, ns string) field.ErrorList {
	msgs := validation.IsDNS1123Label(ns)
	errs := make(field.ErrorList, 0, len(msgs))
	for _, msg := range msgs {
		errs = append(errs, field.Invalid(p, ns, msg))
	}
	return errs
}
