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

// TestConversationFlag: records and tool-result send --conversation as the API's
// conversation parameter, and nothing without it.
func TestConversationFlag(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.RequestURI())
		_, _ = w.Write([]byte("x\n"))
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"records", "--server", srv.URL, "--token", "t", "default/agent"},
		{"records", "--server", srv.URL, "--token", "t", "--conversation", "sub-2", "default/agent"},
		{"tool-result", "--server", srv.URL, "--token", "t", "--conversation", "sub-2", "default/agent", "call_1"},
	} {
		if r := runCLI(t, "", args...); r.code != 0 {
			t.Fatalf("%q: %s", args, r)
		}
	}
	want := []string{
		"/v1/namespaces/default/sessions/agent/records",
		"/v1/namespaces/default/sessions/agent/records?conversation=sub-2",
		"/v1/namespaces/default/sessions/agent/toolresults/call_1?conversation=sub-2",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("requests %q, want %q", got, want)
	}
}
