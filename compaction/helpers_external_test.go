package compaction_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/faultstore"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
	"github.com/harness9/compaction-operator/compaction/storage/storetest"
)

// Helpers shared with the internal tests: defined once, in package compaction's test files,
// and handed over by export_test.go.
var (
	sys              = compaction.Sys
	user             = compaction.User
	asst             = compaction.Asst
	call             = compaction.Call
	result           = compaction.ToolResultMessage
	genHistory       = compaction.GenHistory
	lines            = compaction.Lines
	compactDelta     = compaction.CompactDelta
	ids              = compaction.IDs
	anchorMap        = compaction.AnchorMap
	pixels           = compaction.Pixels
	chatImage        = compaction.ChatImage
	responsesImage   = compaction.ResponsesImage
	anthropicImage   = compaction.AnthropicImage
	pytestVerboseLog = compaction.PytestVerboseLog
)

// newStore is an empty in-memory store (storage/mem) behind a faultstore: the engine sees a
// plain compaction.Store, and the test counts its writes and makes them fail.
func newStore() *faultstore.Store { return faultstore.New(mem.New()) }

// storedState is the state st holds for session sid, nil when none was saved.
func storedState(t testing.TB, st compaction.Store, sid string) *compaction.State {
	t.Helper()
	s, err := st.LoadState(context.Background(), sid)
	if errors.Is(err, compaction.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("load state of %s: %v", sid, err)
	}
	return s
}

// mustLoad is the state st holds for session sid; the test fails when there is none.
func mustLoad(t testing.TB, st compaction.Store, sid string) *compaction.State {
	t.Helper()
	s := storedState(t, st, sid)
	if s == nil {
		t.Fatalf("no state stored for %s", sid)
	}
	return s
}

// stateJSON is the JSON encoding of the state st holds for session s1 (the tests' session),
// nil when none was saved.
func stateJSON(t testing.TB, st compaction.Store) []byte {
	t.Helper()
	s := storedState(t, st, "s1")
	if s == nil {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// records is session sid's trail in st, oldest first.
func records(t testing.TB, st compaction.Store, sid string) []compaction.CompactionRecord {
	t.Helper()
	return storetest.ReadRecords(t, st, sid)
}

// charsOf is the characters of msgs, as the engine counts them.
func charsOf(msgs []compaction.Message) int {
	n := 0
	for i := range msgs {
		n += msgs[i].Chars()
	}
	return n
}

// recordingSummarizer counts calls, keeps the last request and returns a fixed output or error.
type recordingSummarizer struct {
	mu     sync.Mutex
	calls  int
	last   compaction.SummaryRequest
	output string
	err    error
}

func (r *recordingSummarizer) Name() string { return "recording" }

func (r *recordingSummarizer) Summarize(_ context.Context, req compaction.SummaryRequest) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.last = req
	return r.output, r.err
}

// snapshot serializes msgs so a test can prove they were not modified.
func snapshot(t testing.TB, msgs []compaction.Message) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := compaction.EncodeJSONL(&buf, msgs); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// windowFor returns a context window that puts msgs at the given usage ratio.
func windowFor(msgs []compaction.Message, usage float64) int {
	return int(float64(compaction.EstimateTokens(msgs)) / usage)
}

// compactForce is Compact of a full history with Force, as view and record.
func compactForce(ctx context.Context, c *compaction.ProgressiveCompactor, msgs []compaction.Message) ([]compaction.Message, *compaction.CompactionRecord, error) {
	res, err := c.Compact(ctx, compaction.Request{Messages: msgs, Force: true})
	return res.View, res.Record, err
}
