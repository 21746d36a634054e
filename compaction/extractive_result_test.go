package compaction

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The extractive summarizer hands the engine its anchors and prose as values; they must be
// exactly what its text parses back to, and the text's size what the records count, so a
// record is the same whichever way the engine reads the summary. Spans of every size from
// the repository's transcripts, with and without previous anchors.
func TestExtractiveResultIsItsParsedText(t *testing.T) {
	ctx := context.Background()
	files, err := filepath.Glob("../testdata/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in ../testdata: %v", err)
	}
	checked := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := DecodeTranscript(fh, DecodeOptions{})
		_ = fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var prev SummaryRequest
		for end := 4; end <= len(msgs); end += 7 {
			for _, start := range []int{0, end / 2} {
				req := SummaryRequest{Messages: msgs[start:end], MaxSummaryChars: 1500 + 37*end%4000,
					PreviousAnchors: prev.PreviousAnchors, PreviousSummary: prev.PreviousSummary}
				res, err := ExtractiveSummarizer{}.SummarizeResult(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				text, err := ExtractiveSummarizer{}.Summarize(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				anchors, prose, perr := ParseAnchorsAndSummary(text)
				if perr != nil {
					t.Fatalf("%s [%d:%d]: the text does not parse cleanly: %v", filepath.Base(f), start, end, perr)
				}
				if !reflect.DeepEqual(anchors, res.Anchors) || prose != res.Prose {
					t.Fatalf("%s [%d:%d]: values differ from the parsed text\nvalues: %q\n%q\nparsed: %q\n%q",
						filepath.Base(f), start, end, res.Anchors, res.Prose, anchors, prose)
				}
				if res.size() != len(text) {
					t.Fatalf("%s [%d:%d]: size %d, text %d bytes", filepath.Base(f), start, end, res.size(), len(text))
				}
				prev = SummaryRequest{PreviousAnchors: mergeAnchors(prev.PreviousAnchors, res.Anchors), PreviousSummary: res.Prose}
				checked++
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d spans checked", checked)
	}
}
