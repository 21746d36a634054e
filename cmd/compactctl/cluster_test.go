package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// TestKubeconfigTokenWrongAudience: a token taken from the kubeconfig is usually for the
// Kubernetes API's audience, which the compaction API refuses with 401; the error says which
// token to get instead. A token passed with --token gets the plain answer.
func TestKubeconfigTokenWrongAudience(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"code":401,"reason":"Unauthorized","message":"the bearer token is for audience https://kubernetes.default.svc"}`))
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: kube-api-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	hint := "kubectl create token SERVICE_ACCOUNT --audience " + compactclient.DefaultTokenAudience
	r := runCLI(t, "", "records", "--server", srv.URL, "--kubeconfig", kubeconfig, "default/agent")
	if r.code == 0 || !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, hint) {
		t.Errorf("records with the kubeconfig's token: want a 401 naming %q\n%s", hint, r)
	}
	r = runCLI(t, "", "tool-result", "--server", srv.URL, "--kubeconfig", kubeconfig, "default/agent", "call_1")
	if r.code == 0 || !strings.Contains(r.stderr, hint) {
		t.Errorf("tool-result with the kubeconfig's token: want %q\n%s", hint, r)
	}
	r = runCLI(t, "", "records", "--server", srv.URL, "--token", "x.y.z", "default/agent")
	if r.code == 0 || !strings.Contains(r.stderr, "401") || strings.Contains(r.stderr, "came from the kubeconfig") {
		t.Errorf("records with --token: want the plain 401\n%s", r)
	}
}
