package compaction

import (
	"strings"
	"testing"
)

func TestPlaceholderPreviewIsBounded(t *testing.T) {
	oneHugeLine := strings.Repeat("{\"k\":1},", 100000)
	ph := Placeholder("id", oneHugeLine, "ref", 10)
	if len(ph) > 1500 || !strings.Contains(ph, "more bytes on this line") || !strings.Contains(ph, "size: 800000 bytes, 1 lines") {
		t.Fatalf("placeholder %d bytes:\n%s", len(ph), ph)
	}
	manyLines := strings.Repeat(strings.Repeat("w", 290)+"\n", 50)
	ph = Placeholder("id", manyLines, "ref", 1000)
	if len(ph) > maxPreviewBytes+600+previewTailLines*(maxPreviewLineBytes+40) {
		t.Fatalf("preview of many long lines is %d bytes", len(ph))
	}
	// The closing lines (a test summary, the error ending a traceback) are shown too.
	log := strings.Repeat("collecting ...\n", 200) + "E   AttributeError: 'str' object has no attribute 'name'\n1 failed, 9 passed\n"
	ph = Placeholder("id", log, "ref", 10)
	if !strings.Contains(ph, "last 3 lines:\ncollecting ...\nE   AttributeError: 'str' object has no attribute 'name'\n1 failed, 9 passed\n") {
		t.Fatalf("placeholder lacks the result's last lines:\n%s", ph)
	}
	if ph := Placeholder("id", "a\nb\n", "ref", 10); strings.Contains(ph, "last") {
		t.Fatalf("a result shown whole by the preview must not repeat its end:\n%s", ph)
	}
	if ph := Placeholder("id", "a\nb\n", "ref", 0); strings.Contains(ph, "preview") {
		t.Fatal("PreviewLines 0 must show no preview")
	}
}
