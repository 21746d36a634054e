package v1alpha1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const header = "apiVersion: config.compaction.harness9.io/v1alpha1\nkind: Configuration\n"

// TestDefaults: an empty file is the defaults, which are valid; the namespaces follow
// $POD_NAMESPACE; set fields, and the zeros that mean something, are kept.
func TestDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	c, err := Decode([]byte(header))
	if err != nil {
		t.Fatal(err)
	}
	fromEmptyPath, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(c, fromEmptyPath) {
		t.Errorf("Load(\"\") = %+v, the empty file gives %+v", fromEmptyPath, c)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"clusterResourceNamespace", c.ClusterResourceNamespace, "compaction-system"},
		{"api.tls.namespace", c.API.TLS.Namespace, "compaction-system"},
		{"leaderElection.leaderElect", c.LeaderElection.LeaderElect, false},
		{"leaderElection.resourceName", c.LeaderElection.ResourceName, "compaction-operator.harness9.io"},
		{"leaderElection.leaseDuration", c.LeaderElection.LeaseDuration.Duration, 15 * time.Second},
		{"metrics.secure", *c.Metrics.Secure, true},
		{"controllers.sessionWorkers", c.Controllers.SessionWorkers, int32(4)},
		{"api.tokenAudience", c.API.TokenAudience, "compaction.harness9.io"},
		{"api.maxBodyBytes", c.API.MaxBodyBytes, int64(8 << 20)},
		{"api.statusInterval", c.API.StatusInterval.Duration, 5 * time.Second},
		{"api.summariesOffTurn", *c.API.SummariesOffTurn, true},
		{"api.summarizerBudget.policySessions", *c.API.SummarizerBudget.PolicySessions, int32(100)},
		{"api.tls.certValidity", c.API.TLS.CertValidity.Duration, 90 * 24 * time.Hour},
		{"egress.namespacedPolicyEndpoints", c.Egress.NamespacedPolicyEndpoints == nil, true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.what, ch.got, ch.want)
		}
	}

	t.Setenv("POD_NAMESPACE", "operators")
	c, err = Decode([]byte(header + `
api:
  statusInterval: 0s
  stateTrust: 0s
  summariesOffTurn: false
  summarizerBudget: {namespaceSessions: 0}
  requestTimeout: 20s
  tls: {namespace: certs}
metrics: {secure: false}
egress: {namespacedPolicyEndpoints: []}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.ClusterResourceNamespace != "operators" || c.API.TLS.Namespace != "certs" {
		t.Errorf("namespaces %q and %q, want operators (from $POD_NAMESPACE) and certs", c.ClusterResourceNamespace, c.API.TLS.Namespace)
	}
	if c.API.StatusInterval.Duration != 0 || c.API.StateTrust.Duration != 0 || *c.API.SummariesOffTurn || *c.API.SummarizerBudget.NamespaceSessions != 0 ||
		*c.Metrics.Secure || c.API.RequestTimeout.Duration != 20*time.Second {
		t.Errorf("explicit values not kept: %+v", c.API)
	}
	if c.Egress.NamespacedPolicyEndpoints == nil || len(c.Egress.NamespacedPolicyEndpoints) != 0 {
		t.Errorf("namespacedPolicyEndpoints: [] decoded as %#v, want empty and not nil (none allowed)", c.Egress.NamespacedPolicyEndpoints)
	}
}

// TestStrictDecoding: a typo or a repeated field is an error naming it, as is a file of
// another apiVersion or kind.
func TestStrictDecoding(t *testing.T) {
	cases := []struct{ file, want string }{
		{header + "api:\n  requestTimeot: 20s\n", `unknown field "api.requestTimeot"`},
		{header + "leaderElect: true\n", `unknown field "leaderElect"`},
		{header + "api:\n  requestTimeout: 20s\n  requestTimeout: 30s\n", `"requestTimeout" already set`},
		{"apiVersion: config.compaction.harness9.io/v1\nkind: Configuration\n", `apiVersion "config.compaction.harness9.io/v1"`},
		{"kind: Configuration\n", `apiVersion ""`},
		{"apiVersion: config.compaction.harness9.io/v1alpha1\nkind: Config\n", `kind "Config"`},
		{"", `apiVersion ""`},
		{header + "api: {requestTimeout: soon}\n", "soon"},
		{header + "api: {maxMessages: many}\n", "maxMessages"},
	}
	for _, tc := range cases {
		if _, err := Decode([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one with %s", tc.file, err, tc.want)
		}
	}
}

// TestValidation: each invalid value is reported with its field's path.
func TestValidation(t *testing.T) {
	cases := []struct{ file, want string }{
		{"api: {tls: {insecureServeHTTP: true, certDir: /tls}}", "api.tls.certDir: Forbidden: insecureServeHTTP and certDir are exclusive"},
		{"api: {tls: {certValidity: -1s}}", `api.tls.certValidity: Invalid value: "-1s": must be positive`},
		{"api: {tokenAudience: ' '}", "api.tokenAudience: Required value"},
		{"api: {reviews: {newTokenRate: -1}}", "api.reviews.newTokenRate: Invalid value: -1: must be positive"},
		{"api: {maxInflightBytesPerCaller: -2}", "api.maxInflightBytesPerCaller: Invalid value: -2"},
		{"api: {stateTrust: -1s}", "api.stateTrust: Invalid value: \"-1s\": must not be negative"},
		{"api: {summarizerBudget: {policySessions: -1}}", "api.summarizerBudget.policySessions: Invalid value: -1: must not be negative"},
		{"egress: {allowedEndpoints: [10.0.0.0/33]}", `egress.allowedEndpoints entry "10.0.0.0/33"`},
		{"egress: {namespacedPolicyEndpoints: ['*', 'minio:9000']}", `egress.namespacedPolicyEndpoints entry "*"`},
		{"secrets: {clusterPolicyNamespaces: [ok, Not_A_Namespace]}", `secrets.clusterPolicyNamespaces[1]: Invalid value: "Not_A_Namespace"`},
		{"secrets: {recheckInterval: -1s}", "secrets.recheckInterval"},
		{"controllers: {sessionWorkers: -1}", "controllers.sessionWorkers: Invalid value: -1: must be positive"},
		{"clientConnection: {qps: -5}", "clientConnection.qps"},
		{"leaderElection: {renewDeadline: 20s}", "must be 0 < retryPeriod < renewDeadline < leaseDuration"},
		{"clusterResourceNamespace: Bad", `clusterResourceNamespace: Invalid value: "Bad"`},
		{"api: {tls: {caConfigMap: no/slash}}", "api.tls.caConfigMap"},
	}
	for _, tc := range cases {
		if _, err := Decode([]byte(header + tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %s", tc.file, err, tc.want)
		}
	}
	// Every error at once, not the first only.
	_, err := Decode([]byte(header + "api: {requestTimeout: -1s, readTimeout: -1s}"))
	if err == nil || !strings.Contains(err.Error(), "api.requestTimeout") || !strings.Contains(err.Error(), "api.readTimeout") {
		t.Errorf("error %v, want both timeouts named", err)
	}
	// ["*"] is all that allowedEndpoints allows, not a malformed entry.
	if _, err := Decode([]byte(header + "egress: {namespacedPolicyEndpoints: ['*']}")); err != nil {
		t.Error(err)
	}
}

// TestLoad reads a file, and names it in errors.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(header+"leaderElection: {leaderElect: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil || !c.LeaderElection.LeaderElect {
		t.Fatalf("Load: %+v, %v", c, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte(header+"nope: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `unknown field "nope"`) {
		t.Errorf("unknown field: %v", err)
	}
}

// TestDeepCopy: the copy shares no pointer with the original.
func TestDeepCopy(t *testing.T) {
	c := &Configuration{API: API{StatusInterval: &metav1.Duration{Duration: time.Second}, SummariesOffTurn: ptr.To(true)},
		Egress: Egress{AllowedEndpoints: []string{"a"}}}
	d := c.DeepCopy()
	d.API.StatusInterval.Duration, *d.API.SummariesOffTurn, d.Egress.AllowedEndpoints[0] = 0, false, "b"
	if c.API.StatusInterval.Duration != time.Second || !*c.API.SummariesOffTurn || c.Egress.AllowedEndpoints[0] != "a" {
		t.Errorf("DeepCopy shares memory: %+v", c)
	}
}
