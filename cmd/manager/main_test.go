package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "--leader-elect"},
		{[]string{"--help"}, 0, "--api-insecure-serve-http"},
		{[]string{"--help"}, 0, "--api-ca-configmap"},
		{[]string{"--api-insecure-serve-http", "--api-cert-dir", "/tls"}, 2, "--api-insecure-serve-http and --api-cert-dir are exclusive"},
		{[]string{"--api-cert-validity", "0s"}, 2, "must be positive"},
		{[]string{"--version"}, 0, "compaction-operator manager"},
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--help"}, 0, "--api-token-audience"},
		{[]string{"--api-token-audience", " "}, 2, "--api-token-audience must not be empty"},
		{[]string{"--api-new-token-rate", "0"}, 2, "--api-new-token-rate (0)"},
		{[]string{"--help"}, 0, "--allowed-endpoints"},
		{[]string{"--help"}, 0, "--cluster-policy-secret-namespaces"},
		{[]string{"--allowed-endpoints", "10.0.0.0/33"}, 2, `--allowed-endpoints entry "10.0.0.0/33"`},
		{[]string{"--help"}, 0, "--namespaced-policy-endpoints"},
		{[]string{"--namespaced-policy-endpoints", "*,minio:9000"}, 2, `--namespaced-policy-endpoints entry "*"`},
		{[]string{"--cluster-policy-secret-namespaces", "ok,Not_A_Namespace"}, 2, `namespace "Not_A_Namespace"`},
		{[]string{"--secret-recheck-interval", "0s"}, 2, "must be positive"},
		{[]string{"--leader-election-renew-deadline", "20s"}, 2, "--leader-election-renew-deadline (20s) < --leader-election-lease-duration (15s)"},
	}
	for _, tc := range cases {
		var stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), strings.TrimPrefix(tc.want, "--")) {
			t.Errorf("manager %v: exit %d, output %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

func TestBadKubeconfigFails(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--kubeconfig", "/does/not/exist", "--metrics-bind-address", "0"}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "/does/not/exist") {
		t.Errorf("exit %d, output %q; want exit 1 naming the kubeconfig", code, stderr.String())
	}
}

// TestNamespacedEndpoints: issue 28, item 1. Namespaced policies may name nothing unless a
// platform admin lists endpoints (--namespaced-policy-endpoints, or --allowed-endpoints);
// their list never widens --allowed-endpoints.
func TestNamespacedEndpoints(t *testing.T) {
	cases := []struct {
		args                []string
		host, port          string
		cluster, namespaced bool
	}{
		{nil, "minio.minio.svc", "9000", true, false},
		{nil, "10.0.0.1", "443", true, false},
		{[]string{"--allowed-endpoints=minio.minio.svc:9000"}, "minio.minio.svc", "9000", true, true},
		{[]string{"--allowed-endpoints=minio.minio.svc:9000"}, "evil.example", "9000", false, false},
		{[]string{"--namespaced-policy-endpoints=*"}, "evil.example", "9000", true, true},
		{[]string{"--namespaced-policy-endpoints=minio.minio.svc"}, "minio.minio.svc", "9000", true, true},
		{[]string{"--namespaced-policy-endpoints=minio.minio.svc"}, "evil.example", "9000", true, false},
		{[]string{"--namespaced-policy-endpoints="}, "minio.minio.svc", "9000", true, false},
		{[]string{"--allowed-endpoints=*.amazonaws.com", "--namespaced-policy-endpoints=minio.minio.svc"}, "minio.minio.svc", "9000", false, false},
		{[]string{"--allowed-endpoints=*.amazonaws.com", "--namespaced-policy-endpoints=*"}, "s3.amazonaws.com", "443", true, true},
	}
	for _, tc := range cases {
		var stderr bytes.Buffer
		o, err := parseFlags(tc.args, &stderr)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		allowed, namespaced, err := o.endpoints()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := allowed.CheckHostPort(tc.host, tc.port) == nil; got != tc.cluster {
			t.Errorf("%v: cluster policies may name %s:%s = %v, want %v", tc.args, tc.host, tc.port, got, tc.cluster)
		}
		if got := namespaced.CheckHostPort(tc.host, tc.port) == nil; got != tc.namespaced {
			t.Errorf("%v: namespaced policies may name %s:%s = %v, want %v", tc.args, tc.host, tc.port, got, tc.namespaced)
		}
	}
}

// TestSummariesOffTurnFlag: issue 29. Summaries off the turn are the default (no turn waits
// for an LLM summarizer); --api-summaries-off-turn=false restores the summarizer call on the
// crossing turn.
func TestSummariesOffTurnFlag(t *testing.T) {
	cases := []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--api-summaries-off-turn"}, true},
		{[]string{"--api-summaries-off-turn=false"}, false},
	}
	for _, tc := range cases {
		var stderr bytes.Buffer
		o, err := parseFlags(tc.args, &stderr)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.apiSummariesOffTurn != tc.want {
			t.Errorf("%v: summaries off the turn = %v, want %v", tc.args, o.apiSummariesOffTurn, tc.want)
		}
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &stderr); code != 0 || !strings.Contains(stderr.String(), "api-summaries-off-turn") ||
		!strings.Contains(stderr.String(), "(default true)") {
		t.Errorf("--help: exit %d; want the flag listed with its default true:\n%s", code, stderr.String())
	}
}
