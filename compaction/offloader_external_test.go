package compaction_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/internal/toolout"
)

func TestOffloadHookAtSource(t *testing.T) {
	st := newStore()
	o := compaction.NewOffloader(st, "s", 4000, 10)
	ctx := context.Background()
	small := result("a", strings.Repeat("x", 9000))
	got, entry, err := o.Hook(ctx, small, 10000)
	if err != nil || entry != nil || got.Content != small.Content {
		t.Fatal("a result under the hook threshold must pass through")
	}
	big := result("b", strings.Repeat("y\n", 6000))
	got, entry, err = o.Hook(ctx, big, 10000)
	if err != nil || entry == nil || entry.Bytes != 12000 || !strings.HasPrefix(got.Content, compaction.PlaceholderPrefix) {
		t.Fatalf("hook did not offload: %v %+v", err, entry)
	}
	if big.Content == got.Content {
		t.Fatal("hook modified its input")
	}
	// A placeholder the hook produced is never offloaded again during compaction.
	rec := &compaction.CompactionRecord{}
	out := o.OffloadMessages(ctx, []compaction.Message{got}, rec)
	if st.Puts() != 1 || len(rec.Offloaded) != 0 || out[0].Content != got.Content {
		t.Fatalf("placeholder re-offloaded: puts %d", st.Puts())
	}
	st.FailPut(errors.New("down"))
	if _, _, err := o.Hook(ctx, result("c", strings.Repeat("z", 20000)), 10000); err == nil {
		t.Fatal("hook must report a write failure to its caller")
	}
}

func TestOffloadSkipsWhenPlaceholderWouldBeLarger(t *testing.T) {
	st := newStore()
	o := compaction.NewOffloader(st, "s", 10, 10)
	rec := &compaction.CompactionRecord{}
	msgs := []compaction.Message{result("a", strings.Repeat("short line\n", 20)), result("", strings.Repeat("q", 50000))}
	out := o.OffloadMessages(context.Background(), msgs, rec)
	if st.Puts() != 0 || out[0].Content != msgs[0].Content || out[1].Content != msgs[1].Content {
		t.Fatal("offloaded a result the placeholder would not shrink, or one without a tool call id")
	}
}

// An offloaded result read back (marked with ReadBackPrefix, on its first line or after a
// line the tool printed first) is offloaded neither by compaction nor by the OffloadHook.
func TestReadBackIsNeverOffloadedAgain(t *testing.T) {
	st := newStore()
	o := compaction.NewOffloader(st, "s", 4000, 10)
	ctx := context.Background()
	body := strings.Repeat("full output line\n", 2000)
	marked := result("rb1", compaction.ReadBackPrefix+" tool_call_id: a, 34000 bytes\n"+body)
	afterCommand := result("rb2", "$ curl -s http://127.0.0.1:4141/compaction/v1/toolresults/a\n"+compaction.ReadBackPrefix+"\n"+body)
	tooLate := result("rb3", strings.Repeat("x", compaction.ReadBackScanBytes)+"\n"+compaction.ReadBackPrefix+"\n"+body)
	rec := &compaction.CompactionRecord{}
	out := o.OffloadMessages(ctx, []compaction.Message{marked, afterCommand, tooLate}, rec)
	if out[0].Content != marked.Content || out[1].Content != afterCommand.Content {
		t.Fatal("compaction offloaded a result read back")
	}
	if !strings.HasPrefix(out[2].Content, compaction.PlaceholderPrefix) || len(rec.Offloaded) != 1 {
		t.Fatal("a marker past the first KB must not keep a result in the view")
	}
	for _, m := range []compaction.Message{marked, afterCommand} {
		got, entry, err := o.Hook(ctx, m, 10000)
		if err != nil || entry != nil || got.Content != m.Content {
			t.Fatalf("the hook offloaded %s, a result read back", m.ToolCallID)
		}
	}
	if st.Puts() != 1 {
		t.Fatalf("%d store writes, want 1", st.Puts())
	}
	if compaction.IsReadBack("x"+compaction.ReadBackPrefix) || !compaction.IsReadBack(compaction.ReadBackPrefix) {
		t.Fatal("IsReadBack must look for the marker at the start of a line")
	}
	// The placeholder's last line is PlaceholderReadBack, for programs to replace.
	if ph := compaction.Placeholder("id", body, "ref", 3); !strings.HasSuffix(ph, "\n"+compaction.PlaceholderReadBack) {
		t.Fatalf("placeholder does not end with PlaceholderReadBack:\n%s", ph)
	}
}

// TestReusedIDOfTheSameLength is issue 28 item 6: a result that reuses an offloaded result's
// tool call ID with content of the same length is not shown as the first one's placeholder.
func TestReusedIDOfTheSameLength(t *testing.T) {
	ctx := context.Background()
	o := compaction.NewOffloader(newStore(), "s", 4000, 10)
	first := result("call_0", strings.Repeat("first result line\n", 500))
	got, entry, err := o.Hook(ctx, first, 1000)
	if err != nil || entry == nil || entry.CRC32C == 0 {
		t.Fatalf("hook: %v %+v, want an entry with its CRC", err, entry)
	}
	again := result("call_0", strings.Repeat("other result line\n", 500))
	if len(again.Content) != len(first.Content) {
		t.Fatal("the test needs two results of the same length")
	}
	for name, msgs := range map[string][]compaction.Message{
		"ApplyKnown": o.ApplyKnown([]compaction.Message{again}),
		"the same":   o.ApplyKnown([]compaction.Message{first}),
	} {
		want := again.Content
		if name == "the same" {
			want = got.Content
		}
		if msgs[0].Content != want {
			t.Errorf("%s: %.60q, want %.60q", name, msgs[0].Content, want)
		}
	}
	if ph, ok := o.CachedPlaceholder(&again); ok {
		t.Errorf("cachedPlaceholder gave the first result's %.60q to another", ph)
	}
	// An entry stored before the CRC existed still matches by size.
	old := compaction.OffloadEntry{ToolCallID: "x", Bytes: 3}
	if !old.Matches("abc") || old.Matches("abcd") {
		t.Error("an entry without a CRC must match by size alone")
	}
}

// Issue 30 item 5: a 500-line test log names its failing tests in the middle, which the first
// and last lines do not show; its placeholder names them, within its budget, and stays the
// same bytes for the same result.
func TestPlaceholderNamesMiddleFailures(t *testing.T) {
	log := pytestVerboseLog(500, 211, 240, 262)
	// Without its summary the failures are only in the middle.
	log = log[:strings.Index(log, "=========================== short test summary")] + strings.Repeat("teardown ok\n", 3)
	o := compaction.NewOffloader(newStore(), "s", 4000, 10)
	rec := &compaction.CompactionRecord{}
	out := o.OffloadMessages(context.Background(), []compaction.Message{result("call_log", log)}, rec)
	ph := out[0].Content
	if len(rec.Offloaded) != 1 || !strings.HasPrefix(ph, compaction.PlaceholderPrefix) {
		t.Fatalf("the log was not offloaded: %+v", rec)
	}
	want := "[...]\nfailure and error lines (3):\n" +
		"tests/test_mod.py::test_case_211 FAILED [ 42%]\n" +
		"tests/test_mod.py::test_case_240 FAILED [ 48%]\n" +
		"tests/test_mod.py::test_case_262 FAILED [ 52%]\n" +
		"[...]\nlast 3 lines:\nteardown ok\nteardown ok\nteardown ok\n" + compaction.PlaceholderReadBack
	if !strings.HasSuffix(ph, want) {
		t.Fatalf("placeholder does not name the failing tests in the middle:\n%s", ph)
	}
	if !strings.Contains(ph, "preview (first 10 of 507 lines):\n=====") {
		t.Fatalf("the preview changed:\n%s", ph)
	}
	if again := compaction.Placeholder("call_log", log, rec.Offloaded[0].Ref, 10); again != ph {
		t.Fatalf("the same result gave another placeholder:\n%s\n---\n%s", again, ph)
	}

	// Many failures: the budget holds, the latest are named (the tail shows the last two
	// summary lines) and the rest counted: 30 -v lines and 28 summary lines in the middle.
	var many []int
	for i := 100; i < 400; i += 10 {
		many = append(many, i)
	}
	ph = compaction.Placeholder("id", pytestVerboseLog(500, many...), "ref", 10)
	section := ph[strings.Index(ph, "failure and error lines"):]
	section = section[:strings.Index(section, "[...]")]
	if !strings.HasPrefix(section, "failure and error lines (8 shown, 50 more not shown):\n") ||
		strings.Count(section, "\n") != toolout.KeyLines+1 || !strings.HasSuffix(section, "FAILED tests/test_mod.py::test_case_370 - assert 2 == 3\n") {
		t.Fatalf("failure section over budget or without the latest failures:\n%s", section)
	}
	if len(ph) > compaction.MaxPreviewBytes+600+compaction.PreviewTailLines*(compaction.MaxPreviewLineBytes+40)+toolout.KeyLines*(toolout.KeyLineBytes+40)+80 {
		t.Fatalf("placeholder of %d bytes", len(ph))
	}
	// With no preview there is no failure section either.
	if ph := compaction.Placeholder("id", log, "ref", 0); strings.Contains(ph, "FAILED") {
		t.Fatalf("PreviewLines 0 showed lines:\n%s", ph)
	}
}

// TestOffloadReusesMeasuredPreview: what offloadSaving rendered is reused by the offload
// that follows only for the same content; a result of the same ID and size with other
// content gets its own preview.
func TestOffloadReusesMeasuredPreview(t *testing.T) {
	ctx := context.Background()
	for _, same := range []bool{true, false} {
		o := compaction.NewOffloader(newStore(), "s", 100, 5)
		measured := result("c1", strings.Repeat("first line\n", 400))
		if o.OffloadSaving(&measured) <= 0 {
			t.Fatal("a large result must save bytes")
		}
		sent := measured
		if !same {
			sent = result("c1", strings.Repeat("other line\n", 400))
		}
		ph, _, _, err := o.Offload(ctx, &sent)
		if err != nil {
			t.Fatal(err)
		}
		want := compaction.Placeholder("c1", sent.Content, o.Entries()["c1"].Ref, 5)
		if ph != want {
			t.Fatalf("same content %v: placeholder\n%s\nwant\n%s", same, ph, want)
		}
		if o.MeasuredLen() != 0 {
			t.Fatalf("same content %v: %d measured previews left after the offload", same, o.MeasuredLen())
		}
	}
}
