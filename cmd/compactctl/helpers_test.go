package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harness9/compaction-operator/compaction"
)

// result is what one run of the command produced.
type result struct {
	code   int
	stdout string
	stderr string
}

// runCLI runs the command in-process with args and stdin.
func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s\n--- stderr\n%s", r.code, clip(r.stdout, 4000), clip(r.stderr, 4000))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("... (%d more bytes)", len(s)-n)
}

// genOptions shapes a generated transcript.
type genOptions struct {
	rounds    int // tool-call rounds after the user request
	bigResult int // size of the first tool result in bytes (0: a normal one)
	resultLen int // size of the other tool results in bytes
}

// genTranscript returns a realistic coding-agent transcript: a system prompt, the user's
// request, then rounds of (assistant tool call, tool result), and a final answer.
func genTranscript(o genOptions) []compaction.Message {
	if o.resultLen == 0 {
		o.resultLen = 800
	}
	// System prompt and request, two messages a round, the final answer.
	msgs := make([]compaction.Message, 0, 2+2*o.rounds+1)
	msgs = append(msgs,
		compaction.Message{Role: compaction.RoleSystem, Content: "You are a careful coding agent. Work in small verified steps."},
		compaction.Message{Role: compaction.RoleUser, Content: "Fix the flaky TestEviction in pkg/cache and keep the public API unchanged."},
	)
	for r := range o.rounds {
		id := fmt.Sprintf("call_%d", r)
		msgs = append(msgs, compaction.Message{
			Role:    compaction.RoleAssistant,
			Content: fmt.Sprintf("Step %d: I decided to read pkg/cache/file_%d.go because the failure trace points there.", r, r),
			ToolCalls: []compaction.ToolCall{{
				ID: id, Type: "function",
				Function: compaction.FunctionCall{Name: "bash", Arguments: fmt.Sprintf(`{"cmd":"cat pkg/cache/file_%d.go"}`, r)},
			}},
		})
		size := o.resultLen
		if r == 0 && o.bigResult > 0 {
			size = o.bigResult
		}
		msgs = append(msgs, compaction.Message{Role: compaction.RoleTool, ToolCallID: id, Content: toolOutput(r, size)})
	}
	msgs = append(msgs, compaction.Message{Role: compaction.RoleAssistant, Content: "Done: the eviction race is fixed and go test -race ./pkg/cache passes."})
	return msgs
}

// toolOutput is about size bytes of numbered source-like lines.
func toolOutput(round, size int) string {
	var b strings.Builder
	for i := 1; b.Len() < size; i++ {
		fmt.Fprintf(&b, "file_%d.go:%04d: func step%d() { cache.Evict(key%d) } // round %d\n", round, i, i, i, round)
	}
	return b.String()[:size]
}

// writeTranscript writes msgs as JSONL into dir and returns the path.
func writeTranscript(t *testing.T, dir, name string, msgs []compaction.Message) string {
	t.Helper()
	var buf bytes.Buffer
	if err := compaction.EncodeJSONL(&buf, msgs); err != nil {
		t.Fatalf("encode transcript: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// windowFor returns the context window that puts tokens at the given usage ratio.
func windowFor(tokens int, ratio float64) int {
	return int(float64(tokens) / ratio)
}

// compactResult is compact's output, decoded.
type compactResult struct {
	Messages []compaction.Message
	Record   compaction.CompactionRecord
}

// decodeCompact checks that stdout holds exactly one JSON object with valid messages and a
// record, and returns them.
func decodeCompact(t *testing.T, stdout string) compactResult {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var raw struct {
		Messages json.RawMessage `json:"messages"`
		Record   json.RawMessage `json:"record"`
	}
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, clip(stdout, 2000))
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", clip(stdout, 2000))
	}
	// The messages must read back as a transcript (a JSON array), valid for the engine.
	msgs, err := compaction.DecodeTranscript(bytes.NewReader(raw.Messages), compaction.DecodeOptions{})
	if err != nil {
		t.Fatalf("output messages do not decode back: %v", err)
	}
	var rec compaction.CompactionRecord
	rd := json.NewDecoder(bytes.NewReader(raw.Record))
	rd.DisallowUnknownFields()
	if err := rd.Decode(&rec); err != nil {
		t.Fatalf("output record does not decode: %v\n%s", err, raw.Record)
	}
	return compactResult{Messages: msgs, Record: rec}
}

// listFiles returns every regular file under dir, relative to it.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			rel, _ := filepath.Rel(dir, path)
			if d.IsDir() {
				rel += "/"
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
