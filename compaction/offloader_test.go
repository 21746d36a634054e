package compaction

import (
	"fmt"
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

// maxShownBytes bounds what a placeholder shows, and offloadSavingAtLeast what offloading a
// result saves, without rendering: the Soft and Full predictions take the bound when it is
// enough. The contents come close to the bound's terms: long preview and closing lines,
// eight long failure lines of alternating invalid bytes (made valid, each grows to twice
// its length), more failures than are shown.
func TestPlaceholderBoundsHold(t *testing.T) {
	long := func(c string) string { return strings.Repeat(c, 1000) + "\n" }
	// Failure lines that differ (a repeated one is shown once), of alternating invalid bytes.
	failures := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "ERROR %d: %s\n", i, strings.Repeat("\xffa", 400))
		}
		return b.String()
	}
	// The same, with the line's whole cut head invalid every other byte, and a preview that
	// is under maxPreviewBytes by a few bytes before its last, longest line.
	worstFailures := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "%s FAILED test_%s\n", strings.Repeat("\xffa", 100), strings.Repeat("x", i))
		}
		return b.String()
	}
	worstPreview := strings.Repeat(long("w"), 8) + strings.Repeat("u", 300) + "\n" + long("w")
	contents := map[string]string{
		"long lines":   strings.Repeat(long("w"), 200),
		"worst case":   worstPreview + worstFailures(20) + strings.Repeat(long("v"), 3),
		"many lines":   strings.Repeat(long("w"), 12) + failures(20) + strings.Repeat(long("v"), 3),
		"one failure":  strings.Repeat("x\n", 20) + failures(1) + strings.Repeat("y\n", 20),
		"short lines":  strings.Repeat("--- FAIL: TestX\n", 3000),
		"one line":     strings.Repeat("Traceback error ", 10_000),
		"many repeats": strings.Repeat("z\n", 20) + strings.Repeat("FAILED test_"+strings.Repeat("n", 300)+"\n", 20_000) + "y\n",
	}
	for n := 5_000; n <= 60_000; n += 5_000 { // around the size where rendering is needed
		contents[fmt.Sprintf("%d bytes", n)] = strings.Repeat(long("p"), 10) + failures(n/1000) + strings.Repeat(long("q"), 3)
	}
	o := NewOffloader(nil, "s", 4000, 10)
	for name, content := range contents {
		shown := placeholderShown(content, o.previewLines)
		t.Logf("%s: %d bytes shown", name, len(shown))
		if len(shown) > maxShownBytes {
			t.Errorf("%s: the placeholder shows %d bytes, over maxShownBytes %d", name, len(shown), maxShownBytes)
		}
		if !strings.Contains(shown, "failure and error lines") && (strings.Contains(content, "ERROR") || strings.Contains(content, " FAILED")) {
			t.Errorf("%s: no failure lines shown: the content does not test their bound", name)
		}
		m := Message{Role: RoleTool, ToolCallID: "call_" + strings.Repeat("i", 40), Content: content}
		atLeast, ok := o.offloadSavingAtLeast(&m)
		exact := o.offloadSaving(&m)
		if ok && atLeast > exact {
			t.Errorf("%s: the lower bound %d is over the saving %d", name, atLeast, exact)
		}
		if !ok && len(content) > 20_000 {
			t.Errorf("%s: a %d-byte result had to be rendered for its bound", name, len(content))
		}
	}
}
