// Package replay holds what every transcript replay (demo, load test, end-to-end and fault
// tests) needs: reading a transcript file and finding the turns an agent compacts before.
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

// AssistantTurns are the indexes of the assistant messages after the first user message:
// the agent compacts history[:i] before producing message i.
func AssistantTurns(msgs []compaction.Message) []int {
	var out []int
	seenUser := false
	for i, m := range msgs {
		if m.Role == compaction.RoleUser {
			seenUser = true
		}
		if m.Role == compaction.RoleAssistant && seenUser {
			out = append(out, i)
		}
	}
	return out
}
