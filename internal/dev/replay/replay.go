// Package replay holds what every transcript replay (demo, load test, end-to-end and fault
// tests) needs: reading a transcript file (its turns are compaction.AssistantTurns).
package replay

import (
	"fmt"
	"os"

	"github.com/harness9/compaction-operator/compaction"
)

// Load reads and validates a JSONL (or JSON array) transcript file.
func Load(path string) ([]compaction.Message, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open transcript: %w", err)
	}
	defer func() { _ = f.Close() }()
	msgs, err := compaction.DecodeTranscript(f, compaction.DecodeOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return msgs, nil
}
