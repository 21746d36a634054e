package testenv

import (
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/replay"
)

// MustLoad reads and validates a transcript (JSONL, or a JSON array) or fails the test.
func MustLoad(t testing.TB, path string) []compaction.Message {
	t.Helper()
	msgs, err := replay.Load(path)
	Must(t, err)
	return msgs
}
