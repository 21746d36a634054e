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
	"cmp"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The defaults of the fields that have one (cmd/manager's tests check that they are the
// ones of the packages the fields configure).
const (
	DefaultNamespace                   = "compaction-system"
	DefaultLeaseName                   = "compaction-operator.harness9.io"
	DefaultLeaseDuration               = 15 * time.Second
	DefaultRenewDeadline               = 10 * time.Second
	DefaultRetryPeriod                 = 2 * time.Second
	DefaultQPS                         = 100
	DefaultBurst                       = 200
	DefaultMetricsServiceName          = "compaction-operator-controller-manager-metrics-service"
	DefaultSessionWorkers              = 4
	DefaultStorageProbeInterval        = 5 * time.Minute
	DefaultStorageRetryInterval        = 30 * time.Second
	DefaultGCRetryMaxDelay             = 2 * time.Minute
	DefaultSecretRecheckInterval       = time.Minute
	DefaultSecretCacheTTL              = 30 * time.Second
	DefaultTokenAudience               = "compaction.harness9.io"
	DefaultRequestTimeout              = time.Minute
	DefaultReadTimeout                 = 30 * time.Second
	DefaultMaxBodyBytes                = 8 << 20
	DefaultMaxMessages                 = 10000
	DefaultMaxInflightBytes            = 64 << 20
	DefaultUsageInterval               = 5 * time.Second
	DefaultStatusInterval              = 5 * time.Second
	DefaultStateTrust                  = time.Minute
	DefaultReviewQPS                   = 50
	DefaultReviewBurst                 = 100
	DefaultNewTokenRate                = 20
	DefaultNewTokenBurst               = 100
	DefaultCallerReviewRate            = 2
	DefaultCallerReviewBurst           = 20
	DefaultSummarizerNamespaceSessions = 20
	DefaultSummarizerPolicySessions    = 100
	DefaultAPIServiceName              = "compaction-operator-api"
	DefaultCertSecret                  = "compaction-operator-api-cert"
	DefaultCAConfigMap                 = "compaction-operator-api-ca"
	DefaultCAValidity                  = 3 * 365 * 24 * time.Hour
	DefaultCertValidity                = 90 * 24 * time.Hour
)

// SetDefaults fills in every unset field of c that has a default (a zero number or
// duration, an empty string, a nil pointer), and apiVersion and kind. The two namespaces
// default to $POD_NAMESPACE, else DefaultNamespace.
func SetDefaults(c *Configuration) {
	c.APIVersion, c.Kind = GroupVersion.String(), Kind
	namespace := cmp.Or(os.Getenv("POD_NAMESPACE"), DefaultNamespace)
	c.ClusterResourceNamespace = cmp.Or(c.ClusterResourceNamespace, namespace)

	le := &c.LeaderElection
	le.ResourceName = cmp.Or(le.ResourceName, DefaultLeaseName)
	duration(&le.LeaseDuration, DefaultLeaseDuration)
	duration(&le.RenewDeadline, DefaultRenewDeadline)
	duration(&le.RetryPeriod, DefaultRetryPeriod)

	c.ClientConnection.QPS = cmp.Or(c.ClientConnection.QPS, DefaultQPS)
	c.ClientConnection.Burst = cmp.Or(c.ClientConnection.Burst, DefaultBurst)

	if c.Metrics.Secure == nil {
		c.Metrics.Secure = ptr.To(true)
	}
	c.Metrics.ServiceName = cmp.Or(c.Metrics.ServiceName, DefaultMetricsServiceName)

	ct := &c.Controllers
	ct.SessionWorkers = cmp.Or(ct.SessionWorkers, DefaultSessionWorkers)
	duration(&ct.StorageProbeInterval, DefaultStorageProbeInterval)
	duration(&ct.StorageRetryInterval, DefaultStorageRetryInterval)
	duration(&ct.GCRetryMaxDelay, DefaultGCRetryMaxDelay)

	duration(&c.Secrets.RecheckInterval, DefaultSecretRecheckInterval)
	duration(&c.Secrets.CacheTTL, DefaultSecretCacheTTL)

	a := &c.API
	a.TokenAudience = cmp.Or(a.TokenAudience, DefaultTokenAudience)
	duration(&a.RequestTimeout, DefaultRequestTimeout)
	duration(&a.ReadTimeout, DefaultReadTimeout)
	a.MaxBodyBytes = cmp.Or(a.MaxBodyBytes, DefaultMaxBodyBytes)
	a.MaxMessages = cmp.Or(a.MaxMessages, DefaultMaxMessages)
	a.MaxInflightBytes = cmp.Or(a.MaxInflightBytes, DefaultMaxInflightBytes)
	duration(&a.UsageInterval, DefaultUsageInterval)
	if a.StatusInterval == nil {
		a.StatusInterval = &metav1.Duration{Duration: DefaultStatusInterval}
	}
	if a.StateTrust == nil {
		a.StateTrust = &metav1.Duration{Duration: DefaultStateTrust}
	}
	if a.SummariesOffTurn == nil {
		a.SummariesOffTurn = ptr.To(true)
	}
	r := &a.Reviews
	r.QPS = cmp.Or(r.QPS, DefaultReviewQPS)
	r.Burst = cmp.Or(r.Burst, DefaultReviewBurst)
	r.NewTokenRate = cmp.Or(r.NewTokenRate, DefaultNewTokenRate)
	r.NewTokenBurst = cmp.Or(r.NewTokenBurst, DefaultNewTokenBurst)
	r.CallerRate = cmp.Or(r.CallerRate, DefaultCallerReviewRate)
	r.CallerBurst = cmp.Or(r.CallerBurst, DefaultCallerReviewBurst)
	if a.SummarizerBudget.NamespaceSessions == nil {
		a.SummarizerBudget.NamespaceSessions = ptr.To[int32](DefaultSummarizerNamespaceSessions)
	}
	if a.SummarizerBudget.PolicySessions == nil {
		a.SummarizerBudget.PolicySessions = ptr.To[int32](DefaultSummarizerPolicySessions)
	}
	t := &a.TLS
	t.Namespace = cmp.Or(t.Namespace, namespace)
	t.ServiceName = cmp.Or(t.ServiceName, DefaultAPIServiceName)
	t.SecretName = cmp.Or(t.SecretName, DefaultCertSecret)
	t.CAConfigMap = cmp.Or(t.CAConfigMap, DefaultCAConfigMap)
	duration(&t.CAValidity, DefaultCAValidity)
	duration(&t.CertValidity, DefaultCertValidity)
}

func duration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}
