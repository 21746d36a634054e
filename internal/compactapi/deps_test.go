package compactapi

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoStorageOrLLMClient: the compaction API serves stores and summarizers through
// policy.StoreOpener and policy.SummarizerFactory; the S3 and OpenAI clients are linked by
// the manager (package backends), never by this package, whose dependencies stay what it
// serves with (issue 31, item 4).
func TestLinksNoStorageOrLLMClient(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to list the package's dependencies (install Go; the tests are run with it): %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/harness9/compaction-operator/compaction/storage/s3",
		"github.com/harness9/compaction-operator/compaction/summarize/openai",
		"github.com/minio/",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("internal/compactapi depends on %s: reach it through the policy package's interfaces (go list -deps ./internal/compactapi says which import brings it)", dep)
			}
		}
	}
}
