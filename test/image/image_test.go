// Package image checks what the Dockerfile builds, without a Docker engine: it runs the same
// build script the Dockerfile runs and checks the binary is static and starts.
package image

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

func TestStaticManagerBinary(t *testing.T) {
	root := testenv.RepoRoot(t)
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), "hack/build-static.sh /out/manager ./cmd/manager") {
		t.Fatal("the Dockerfile no longer builds with hack/build-static.sh: this test checks the wrong command")
	}

	out := filepath.Join(t.TempDir(), "manager")
	cmd := exec.Command(filepath.Join(root, "hack", "build-static.sh"), out, "./cmd/manager")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=v9.9.9-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/build-static.sh: %v\n%s", err, b)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatalf("not an ELF binary: %v", err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links shared libraries: %v", libs)
	}

	help, err := exec.Command(out, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "-api-bind-address") {
		t.Errorf("manager --help: %v\n%s", err, help)
	}
	version, err := exec.Command(out, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(version), "v9.9.9-test") {
		t.Errorf("manager --version: %v: %s; want the VERSION the build was given", err, version)
	}
}

// The image carries compaction-proxy too, built the same way: agent pods run it from the
// operator's image as their sidecar.
func TestStaticProxyBinary(t *testing.T) {
	root := testenv.RepoRoot(t)
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hack/build-static.sh /out/compaction-proxy ./cmd/compaction-proxy", "COPY --from=build /out/compaction-proxy /compaction-proxy"} {
		if !strings.Contains(string(dockerfile), want) {
			t.Fatalf("the Dockerfile does not say %q", want)
		}
	}
	out := filepath.Join(t.TempDir(), "compaction-proxy")
	cmd := exec.Command(filepath.Join(root, "hack", "build-static.sh"), out, "./cmd/compaction-proxy")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/build-static.sh: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatalf("not an ELF binary: %v", err)
	}
	defer func() { _ = f.Close() }()
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links shared libraries: %v", libs)
	}
	help, err := exec.Command(out, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "-upstream") {
		t.Errorf("compaction-proxy --help: %v\n%s", err, help)
	}
}
