package compaction

import (
	"context"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// TestExtractMemoSameSummary: a summary read from the memo is the summary read afresh, for
// spans cut anywhere in the test histories and the repository's transcripts (so the state
// a call's reading depends on, such as the file an editor has open, differs between spans
// holding the same messages), with and without previous anchors.
func TestExtractMemoSameSummary(t *testing.T) {
	// The same result text answering a call that runs something and one that only looks:
	// what is read of it differs.
	same := "FAILED tests/test_a.py::test_b - KeyError: 'k'\n===== 1 failed, 2 passed in 0.1s =====\n<returncode>1</returncode>"
	twice := []Message{user("Fix the test."),
		asstCalls("Running the tests.", tcall("r1", "bash", jsonArgs("command", "python -m pytest"))),
		{Role: RoleTool, ToolCallID: "r1", Content: same},
		asstCalls("Looking at the log.", tcall("r2", "bash", jsonArgs("command", "cat log.txt"))),
		{Role: RoleTool, ToolCallID: "r2", Content: same},
	}
	transcripts := []string{"../testdata/long-session.jsonl", "../testdata/coding-agent-small.jsonl", "../testdata/parallel-tools.jsonl"}
	histories := make([][]Message, 0, 5+len(transcripts))
	histories = append(histories, twice, sweAgentHistory(), miniSWEHistory(), openHandsHistory(), benchSpan(40))
	for _, name := range transcripts {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := DecodeTranscript(f, DecodeOptions{})
		_ = f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		histories = append(histories, msgs)
	}
	ctx := context.Background()
	memo := newExtractMemo()
	rng := rand.New(rand.NewPCG(13, 14))
	for h, msgs := range histories {
		var prev []Anchor
		for range 40 {
			from := rng.IntN(len(msgs))
			to := from + 1 + rng.IntN(len(msgs)-from)
			req := SummaryRequest{Messages: msgs[from:to], PreviousAnchors: prev}
			want, err := ExtractiveSummarizer{}.SummarizeResult(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			for pass := range 2 { // the first fills the memo, the second reads it
				got, err := ExtractiveSummarizer{memo: memo}.SummarizeResult(ctx, req)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("history %d, messages %d-%d, pass %d: with the memo\n%+v\nwithout\n%+v", h, from, to, pass, got, want)
				}
			}
			if rng.IntN(2) == 0 {
				prev = want.Anchors
			}
		}
	}
	if memo.entries.Len() == 0 {
		t.Fatal("the memo holds nothing: the test compared no reading from it")
	}
}

// TestExtractMemoKeysDoNotCollide: two different lists of parts whose bytes joined with a
// separator are the same (a tool name holding a NUL byte against a name and arguments) get
// two entries, not one read for the other.
func TestExtractMemoKeysDoNotCollide(t *testing.T) {
	m := newExtractMemo()
	if got := memoGet(m, memoCall, []string{"a\x00b"}, func() string { return "one part" }, nil); got != "one part" {
		t.Fatalf("first read = %q", got)
	}
	if got := memoGet(m, memoCall, []string{"a", "b"}, func() string { return "two parts" }, nil); got != "two parts" {
		t.Errorf(`the parts "a", "b" read the entry of "a\x00b": %q`, got)
	}
}

// TestReadResultDiffHeads: one search for the diff header tells a header in the first KB
// from one in the first 4 KB, as a search of each head did, wherever the header stands
// (across the first KB's end too).
func TestReadResultDiffHeads(t *testing.T) {
	const mark = "diff --git a/x.py b/x.py\n"
	for _, at := range []int{0, 500, 1024 - len("diff --git a/"), 1024 - len("diff --git a/") + 1, 1020, 1024, 2000, 4096 - len("diff --git a/"), 4090, 5000} {
		content := strings.Repeat("d", at) + mark + strings.Repeat("z", 6000)
		f := readResult(content)
		short := strings.Contains(textcut.Head(content, 1024), "diff --git a/")
		long := strings.Contains(textcut.Head(content, 4096), "diff --git a/")
		if f.diffShort != short || f.diffLong != long {
			t.Errorf("header at %d: diffShort %v, diffLong %v; the heads say %v, %v", at, f.diffShort, f.diffLong, short, long)
		}
	}
}
