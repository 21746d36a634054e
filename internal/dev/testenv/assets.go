// Package testenv starts the real external programs the tests need (a MinIO server, the
// envtest control plane binaries) from the repository's bin/ directory.
//
// A missing binary is always a test failure that names the make target building it, never
// a skip: a skipped storage or controller test looks green in CI while testing nothing.
package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ModulePath is the module whose go.mod marks the repository root.
const ModulePath = "github.com/harness9/compaction-operator"

// makeToolsHint is appended to every "binary missing" failure so the fix is one command away.
const makeToolsHint = "run `make tools` from the repository root to build it"

// RepoRoot returns the absolute path of the repository root: the nearest directory at or
// above the working directory whose go.mod declares ModulePath. Go runs tests in the
// package's directory, so walking up works from any package.
func RepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("testenv: get working directory: %v", err)
	}
	root, err := findRepoRoot(wd)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return root
}

// findRepoRoot walks up from start to the directory whose go.mod declares ModulePath. It
// checks the module line, not just the presence of go.mod, because tools under hack/tools
// have go.mod files of their own.
func findRepoRoot(start string) (string, error) {
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", fmt.Errorf("make %q absolute: %w", start, err)
	}
	for {
		mod, err := modulePath(filepath.Join(dir, "go.mod"))
		switch {
		case err == nil && mod == ModulePath:
			return dir, nil
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod declaring module %s at or above %s", ModulePath, start)
		}
		dir = parent
	}
}

// modulePath returns the module path declared by the go.mod file at path.
func modulePath(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer func() { _ = f.Close() }() // read-only: a failed Close loses nothing
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		if i := strings.Index(rest, "//"); i >= 0 {
			rest = rest[:i]
		}
		return strings.Trim(strings.TrimSpace(rest), `"`), nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return "", nil
}

// KubebuilderAssets returns the absolute directory holding kube-apiserver, etcd and
// kubectl for envtest: $KUBEBUILDER_ASSETS when set, otherwise the repository's bin/. It
// fails the test when a binary is missing.
func KubebuilderAssets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(t), "bin")
	}
	abs, err := checkAssets(dir)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return abs
}

// checkAssets returns dir made absolute after checking every envtest binary is in it.
func checkAssets(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("make envtest assets dir %q absolute: %w", dir, err)
	}
	var missing []string
	// The programs controller-runtime's envtest looks for in KUBEBUILDER_ASSETS.
	for _, name := range [...]string{"kube-apiserver", "etcd", "kubectl"} {
		if err := checkExecutable(filepath.Join(abs, name)); err != nil {
			missing = append(missing, err.Error())
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("envtest binaries missing in %s (KUBEBUILDER_ASSETS or bin/): %s; %s",
			abs, strings.Join(missing, "; "), makeToolsHint)
	}
	return abs, nil
}

// checkExecutable reports why path cannot be run as a program, or nil when it can.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s does not exist", path)
		}
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}
