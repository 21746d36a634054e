package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactapi"
	"github.com/harness9/compaction-operator/internal/controller"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/servingcert"
)

const header = "apiVersion: config.compaction.harness9.io/v1alpha1\nkind: Configuration\n"

// configFile writes a configuration file with body after its apiVersion and kind.
func configFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(header+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "--config"},
		{[]string{"--help"}, 0, "--api-bind-address"},
		{[]string{"--help"}, 0, "docs/operations.md"},
		{[]string{"--help"}, 0, "--zap-log-level"},
		{[]string{"--version"}, 0, "compaction-operator manager"},
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		// What the configuration file replaced is no flag any more.
		{[]string{"--leader-elect"}, 2, "flag provided but not defined: -leader-elect"},
		{[]string{"--api-request-timeout=20s"}, 2, "flag provided but not defined: -api-request-timeout"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--config", "/does/not/exist.yaml"}, 2, "/does/not/exist.yaml"},
		{[]string{"--config", configFile(t, "api: {requestTimout: 20s}\n")}, 2, `unknown field "api.requestTimout"`},
		{[]string{"--config", configFile(t, "api: {tls: {insecureServeHTTP: true, certDir: /tls}}\n")}, 2, "insecureServeHTTP and certDir are exclusive"},
		{[]string{"--config", configFile(t, "leaderElection: {renewDeadline: 20s}\n")}, 2, "0 < retryPeriod < renewDeadline < leaseDuration"},
	}
	for _, tc := range cases {
		var stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), strings.TrimPrefix(tc.want, "--")) {
			t.Errorf("manager %v: exit %d, output %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestFewFlags: the flags are what an operator changes by hand (the file, the kubeconfig,
// the addresses, the log); everything else is in the configuration file.
func TestFewFlags(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &stderr); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	var flags []string
	for line := range strings.SplitSeq(stderr.String(), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "-"); ok {
			name, _, _ = strings.Cut(name, " ")
			if !strings.HasPrefix(name, "zap-") {
				flags = append(flags, name)
			}
		}
	}
	want := []string{"api-bind-address", "config", "health-probe-bind-address", "kubeconfig", "metrics-bind-address", "pprof-bind-address", "version"}
	if strings.Join(flags, " ") != strings.Join(want, " ") {
		t.Errorf("flags %q besides zap's, want %q", flags, want)
	}
}

func TestBadKubeconfigFails(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--kubeconfig", "/does/not/exist", "--metrics-bind-address", "0"}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "/does/not/exist") {
		t.Errorf("exit %d, output %q; want exit 1 naming the kubeconfig", code, stderr.String())
	}
}

// TestDefaultsMatchPackages: the configuration's defaults are the ones of the packages
// its fields configure.
func TestDefaultsMatchPackages(t *testing.T) {
	c := configv1alpha1.Configuration{}
	configv1alpha1.SetDefaults(&c)
	checks := []struct {
		what      string
		got, want any
	}{
		{"controllers.sessionWorkers", int(c.Controllers.SessionWorkers), controller.DefaultSessionWorkers},
		{"controllers.storageProbeInterval", c.Controllers.StorageProbeInterval.Duration, controller.DefaultProbeInterval},
		{"controllers.storageRetryInterval", c.Controllers.StorageRetryInterval.Duration, controller.DefaultRetryInterval},
		{"controllers.gcRetryMaxDelay", c.Controllers.GCRetryMaxDelay.Duration, controller.DefaultRetryMaxDelay},
		{"secrets.recheckInterval", c.Secrets.RecheckInterval.Duration, controller.DefaultSecretRecheckInterval},
		{"secrets.cacheTTL", c.Secrets.CacheTTL.Duration, policy.DefaultSecretTTL},
		{"api.tokenAudience", c.API.TokenAudience, compactclient.DefaultTokenAudience},
		{"api.requestTimeout", c.API.RequestTimeout.Duration, compactapi.DefaultRequestTimeout},
		{"api.readTimeout", c.API.ReadTimeout.Duration, compactapi.DefaultReadTimeout},
		{"api.maxBodyBytes", c.API.MaxBodyBytes, int64(compactapi.DefaultMaxBodyBytes)},
		{"api.maxMessages", int(c.API.MaxMessages), compactapi.DefaultMaxMessages},
		{"api.maxInflightBytes", c.API.MaxInflightBytes, int64(compactapi.DefaultMaxInflightBytes)},
		{"api.usageInterval", c.API.UsageInterval.Duration, compactapi.DefaultUsageInterval},
		{"api.statusInterval", c.API.StatusInterval.Duration, compactapi.DefaultStatusInterval},
		{"api.stateTrust", c.API.StateTrust.Duration, compactapi.DefaultStateTrust},
		{"api.reviews.qps", c.API.Reviews.QPS, float64(compactapi.DefaultReviewQPS)},
		{"api.reviews.burst", int(c.API.Reviews.Burst), compactapi.DefaultReviewBurst},
		{"api.reviews.newTokenRate", c.API.Reviews.NewTokenRate, float64(compactapi.DefaultNewTokenRate)},
		{"api.reviews.newTokenBurst", int(c.API.Reviews.NewTokenBurst), compactapi.DefaultNewTokenBurst},
		{"api.reviews.callerRate", c.API.Reviews.CallerRate, float64(compactapi.DefaultCallerReviewRate)},
		{"api.reviews.callerBurst", int(c.API.Reviews.CallerBurst), compactapi.DefaultCallerReviewBurst},
		{"api.summarizerBudget.namespaceSessions", int(*c.API.SummarizerBudget.NamespaceSessions), compactapi.DefaultSummarizerNamespaceSessions},
		{"api.summarizerBudget.policySessions", int(*c.API.SummarizerBudget.PolicySessions), compactapi.DefaultSummarizerPolicySessions},
		{"api.tls.caValidity", c.API.TLS.CAValidity.Duration, servingcert.DefaultCAValidity},
		{"api.tls.certValidity", c.API.TLS.CertValidity.Duration, servingcert.DefaultCertValidity},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s defaults to %v (%T), its package's default is %v (%T)", ch.what, ch.got, ch.got, ch.want, ch.want)
		}
	}
}

// TestNamespacedEndpoints: issue 28, item 1. Namespaced policies may name nothing unless a
// platform admin lists endpoints (egress.namespacedPolicyEndpoints, or
// egress.allowedEndpoints); their list never widens egress.allowedEndpoints.
func TestNamespacedEndpoints(t *testing.T) {
	cases := []struct {
		egress              string
		host, port          string
		cluster, namespaced bool
	}{
		{"{}", "minio.minio.svc", "9000", true, false},
		{"{}", "10.0.0.1", "443", true, false},
		{"{allowedEndpoints: [minio.minio.svc:9000]}", "minio.minio.svc", "9000", true, true},
		{"{allowedEndpoints: [minio.minio.svc:9000]}", "evil.example", "9000", false, false},
		{"{namespacedPolicyEndpoints: ['*']}", "evil.example", "9000", true, true},
		{"{namespacedPolicyEndpoints: [minio.minio.svc]}", "minio.minio.svc", "9000", true, true},
		{"{namespacedPolicyEndpoints: [minio.minio.svc]}", "evil.example", "9000", true, false},
		{"{namespacedPolicyEndpoints: []}", "minio.minio.svc", "9000", true, false},
		{"{allowedEndpoints: ['*.amazonaws.com'], namespacedPolicyEndpoints: [minio.minio.svc]}", "minio.minio.svc", "9000", false, false},
		{"{allowedEndpoints: ['*.amazonaws.com'], namespacedPolicyEndpoints: ['*']}", "s3.amazonaws.com", "443", true, true},
	}
	for _, tc := range cases {
		var stderr bytes.Buffer
		o, err := parseFlags([]string{"--config", configFile(t, "egress: "+tc.egress+"\n")}, &stderr)
		if err != nil {
			t.Fatalf("%s: %v", tc.egress, err)
		}
		allowed, namespaced, err := o.endpoints()
		if err != nil {
			t.Fatalf("%s: %v", tc.egress, err)
		}
		if got := allowed.CheckHostPort(tc.host, tc.port) == nil; got != tc.cluster {
			t.Errorf("%s: cluster policies may name %s:%s = %v, want %v", tc.egress, tc.host, tc.port, got, tc.cluster)
		}
		if err := namespaced.CheckHostPort(tc.host, tc.port); (err == nil) != tc.namespaced {
			t.Errorf("%s: namespaced policies may name %s:%s = %v, want %v", tc.egress, tc.host, tc.port, err == nil, tc.namespaced)
		} else if err != nil && !strings.Contains(err.Error(), "egress.") {
			t.Errorf("%s: %v does not name the configuration field", tc.egress, err)
		}
	}
}

// TestSummariesOffTurn: issue 29. Summaries off the turn are the default (no turn waits
// for an LLM summarizer); api.summariesOffTurn: false restores the summarizer call on the
// crossing turn.
func TestSummariesOffTurn(t *testing.T) {
	cases := []struct {
		file string
		want bool
	}{
		{"", true},
		{"api: {summariesOffTurn: true}\n", true},
		{"api: {summariesOffTurn: false}\n", false},
	}
	for _, tc := range cases {
		var stderr bytes.Buffer
		o, err := parseFlags([]string{"--config", configFile(t, tc.file)}, &stderr)
		if err != nil {
			t.Fatalf("%q: %v", tc.file, err)
		}
		if *o.cfg.API.SummariesOffTurn != tc.want {
			t.Errorf("%q: summaries off the turn = %v, want %v", tc.file, *o.cfg.API.SummariesOffTurn, tc.want)
		}
	}
}

// TestNoConfigIsDefaults: without --config the manager runs with the defaults.
func TestNoConfigIsDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "ops")
	var stderr bytes.Buffer
	o, err := parseFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.ClusterResourceNamespace != "ops" || o.cfg.API.RequestTimeout.Duration != time.Minute || !*o.cfg.Metrics.Secure {
		t.Errorf("configuration without --config: %+v", o.cfg)
	}
}
