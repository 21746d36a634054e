package testenv

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRepoRootFindsModule(t *testing.T) {
	root := RepoRoot(t)
	mod, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if mod != ModulePath {
		t.Fatalf("RepoRoot %s declares module %q, want %q", root, mod, ModulePath)
	}
	if !filepath.IsAbs(root) {
		t.Fatalf("RepoRoot %q is not absolute", root)
	}
}

func TestFindRepoRootSkipsOtherModules(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module "+ModulePath+"\n\ngo 1.26\n")
	nested := filepath.Join(dir, "hack", "tools", "x")
	writeFile(t, filepath.Join(nested, "go.mod"), "// a tool module\nmodule "+ModulePath+"/hack/tools/x\n")
	deep := filepath.Join(nested, "sub")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := findRepoRoot(deep)
	if err != nil {
		t.Fatal(err)
	}
	if got != dir {
		t.Fatalf("findRepoRoot = %q, want %q", got, dir)
	}
}

func TestFindRepoRootMissing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.com/other\n")
	if _, err := findRepoRoot(dir); err == nil || !strings.Contains(err.Error(), ModulePath) {
		t.Fatalf("findRepoRoot outside the repo: err = %v, want one naming %s", err, ModulePath)
	}
}

func TestModulePathQuotedAndCommented(t *testing.T) {
	path := filepath.Join(t.TempDir(), "go.mod")
	writeFile(t, path, "// modules are fun\nmodule \"example.com/q\" // trailing\n")
	got, err := modulePath(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != "example.com/q" {
		t.Fatalf("modulePath = %q", got)
	}
}

func TestCheckAssets(t *testing.T) {
	dir := t.TempDir()
	_, err := checkAssets(dir)
	if err == nil {
		t.Fatal("checkAssets on an empty dir succeeded")
	}
	for _, want := range []string{"make tools", "kube-apiserver", "etcd", "kubectl"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	for _, name := range []string{"kube-apiserver", "etcd"} {
		writeExecutable(t, filepath.Join(dir, name))
	}
	writeFile(t, filepath.Join(dir, "kubectl"), "not executable")
	_, err = checkAssets(dir)
	if err == nil || !strings.Contains(err.Error(), "kubectl is not executable") || strings.Contains(err.Error(), "etcd does not exist") {
		t.Fatalf("checkAssets with a non-executable kubectl: err = %v", err)
	}

	writeExecutable(t, filepath.Join(dir, "kubectl"))
	got, err := checkAssets(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != dir {
		t.Fatalf("checkAssets = %q, want %q", got, dir)
	}
}

func TestKubebuilderAssetsHonoursEnv(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		writeExecutable(t, filepath.Join(dir, name))
	}
	t.Setenv("KUBEBUILDER_ASSETS", dir)
	if got := KubebuilderAssets(t); got != dir {
		t.Fatalf("KubebuilderAssets = %q, want %q", got, dir)
	}
}

// The repository's own bin/ must hold the envtest binaries (`make tools` builds them).
func TestKubebuilderAssetsRepoBin(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", "")
	want := filepath.Join(RepoRoot(t), "bin")
	if got := KubebuilderAssets(t); got != want {
		t.Fatalf("KubebuilderAssets = %q, want %q", got, want)
	}
}

func TestMinioBinaryMissingNamesMakeTools(t *testing.T) {
	t.Setenv("MINIO_BIN", filepath.Join(t.TempDir(), "no-such-minio"))
	_, err := minioBinary(t)
	if err == nil || !strings.Contains(err.Error(), "make tools") || !strings.Contains(err.Error(), "MINIO_BIN") {
		t.Fatalf("minioBinary with a missing MINIO_BIN: err = %v, want one naming make tools and MINIO_BIN", err)
	}
}

func TestStartMinIOStopRestart(t *testing.T) {
	m := StartMinIO(t)
	if m.AccessKey == "" || len(m.SecretKey) < 8 {
		t.Fatalf("credentials not set: %q / %d-byte secret", m.AccessKey, len(m.SecretKey))
	}
	host, _, err := net.SplitHostPort(m.Endpoint)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("Endpoint %q is not a 127.0.0.1 address (err %v)", m.Endpoint, err)
	}
	if !live(m) {
		t.Fatal("server not live right after StartMinIO")
	}

	endpoint := m.Endpoint
	m.Stop()
	if live(m) {
		t.Fatal("server still answers after Stop")
	}
	m.Stop() // idempotent

	m.Start()
	if m.Endpoint != endpoint {
		t.Fatalf("Start moved the server from %s to %s", endpoint, m.Endpoint)
	}
	if !live(m) {
		t.Fatal("server not live after Start")
	}
	m.Start() // no-op while running

	m.Restart()
	if !live(m) {
		t.Fatal("server not live after Restart")
	}
}

func live(m *MinIO) bool {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(m.URL() + "/minio/health/live")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Minio-Server-Status") == ""
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeExecutable(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// WriteFile keeps the mode of a file that already exists.
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
}
