package compaction

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// memStore is an in-memory Store with failure injection, for unit tests of the engine's
// logic. The real backends are tested in compaction/storage/... against disk and MinIO.
type memStore struct {
	mu       sync.Mutex
	results  map[string][]byte
	records  []*CompactionRecord
	states   map[string][]byte
	puts     int
	putsByID map[string]int
	failPut  error
	failRec  error
	failLoad error
	failSave error
}

func newMemStore() *memStore {
	return &memStore{results: map[string][]byte{}, states: map[string][]byte{}}
}

func (s *memStore) PutToolResult(_ context.Context, sid, id string, content []byte) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPut != nil {
		return "", s.failPut
	}
	s.puts++
	if s.putsByID == nil {
		s.putsByID = map[string]int{}
	}
	s.putsByID[id]++
	key := ToolResultKey(sid, id)
	s.results[key] = append([]byte(nil), content...)
	return "mem://" + key, nil
}

func (s *memStore) GetToolResult(_ context.Context, sid, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.results[ToolResultKey(sid, id)]
	if !ok {
		return nil, fmt.Errorf("get %s: %w", id, ErrNotFound)
	}
	return b, nil
}

func (s *memStore) AppendRecord(_ context.Context, rec *CompactionRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failRec != nil {
		return s.failRec
	}
	cp := *rec
	s.records = append(s.records, &cp)
	return nil
}

func (s *memStore) ReadRecords(_ context.Context, sid string, w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.records {
		if r.SessionID == sid {
			b, _ := json.Marshal(r)
			w.Write(append(b, '\n'))
		}
	}
	return nil
}

func (s *memStore) LoadState(_ context.Context, sid string) (*State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failLoad != nil {
		return nil, s.failLoad
	}
	b, ok := s.states[sid]
	if !ok {
		return nil, ErrNotFound
	}
	var st State
	return &st, json.Unmarshal(b, &st)
}

func (s *memStore) SaveState(_ context.Context, sid string, st *State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSave != nil {
		return s.failSave
	}
	b, err := json.Marshal(st)
	s.states[sid] = b
	return err
}

func (s *memStore) DeleteSession(context.Context, string) (int, error) {
	return 0, errors.New("not implemented in memStore")
}

// recordingSummarizer counts calls, keeps the last request and returns a fixed output or error.
type recordingSummarizer struct {
	mu     sync.Mutex
	calls  int
	last   SummaryRequest
	output string
	err    error
}

func (r *recordingSummarizer) Name() string { return "recording" }

func (r *recordingSummarizer) Summarize(_ context.Context, req SummaryRequest) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.last = req
	return r.output, r.err
}

// history builders.

func sys(s string) Message  { return Message{Role: RoleSystem, Content: s} }
func user(s string) Message { return Message{Role: RoleUser, Content: s} }
func asst(s string) Message { return Message{Role: RoleAssistant, Content: s} }
func call(content string, ids ...string) Message {
	m := Message{Role: RoleAssistant, Content: content}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: "bash", Arguments: `{"cmd":"run ` + id + `"}`}})
	}
	return m
}
func result(id, content string) Message {
	return Message{Role: RoleTool, ToolCallID: id, Content: content}
}

// genHistory builds a random but valid agent history: a system prompt, a user task, then
// turns of single or parallel tool calls, text-only replies and user interjections, with some
// large results.
func genHistory(r *rand.Rand, turns int) []Message {
	msgs := []Message{sys("You are a coding agent."), user("Fix the failing test in parser.go; keep the public API unchanged.")}
	id := 0
	for t := 0; t < turns; t++ {
		switch k := r.IntN(10); {
		case k < 6:
			n := 1
			if r.IntN(3) == 0 {
				n = 2 + r.IntN(3)
			}
			ids := make([]string, n)
			for i := range ids {
				id++
				ids[i] = fmt.Sprintf("call_%d", id)
			}
			msgs = append(msgs, call(strings.Repeat("thinking ", r.IntN(40)), ids...))
			for _, cid := range ids {
				size := 50 + r.IntN(3000)
				if r.IntN(5) == 0 {
					size = 5000 + r.IntN(40000)
				}
				msgs = append(msgs, result(cid, lines(r, size)))
			}
		case k < 8:
			msgs = append(msgs, asst(strings.Repeat("I'll try another approach. ", 1+r.IntN(30))))
		default:
			msgs = append(msgs, user(strings.Repeat("please also check the docs ", 1+r.IntN(10))))
		}
	}
	return msgs
}

func lines(r *rand.Rand, size int) string {
	var b strings.Builder
	for b.Len() < size {
		fmt.Fprintf(&b, "line %d: %s\n", b.Len(), strings.Repeat("x", r.IntN(120)))
	}
	return b.String()[:size]
}

// snapshot serializes msgs so a test can prove they were not modified.
func snapshot(t testing.TB, msgs []Message) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := EncodeJSONL(&buf, msgs); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// windowFor returns a context window that puts msgs at the given usage ratio.
func windowFor(msgs []Message, usage float64) int {
	return int(float64(EstimateTokens(msgs)) / usage)
}

// compactDelta is Compact of a request with a Delta, as view and record.
func compactDelta(ctx context.Context, c *ProgressiveCompactor, d Delta, msgs []Message, force bool) ([]Message, *CompactionRecord, error) {
	res, err := c.Compact(ctx, Request{Messages: msgs, Force: force, Delta: d})
	return res.View, res.Record, err
}

// compactForce is Compact of a full history with Force, as view and record.
func compactForce(ctx context.Context, c *ProgressiveCompactor, msgs []Message) ([]Message, *CompactionRecord, error) {
	res, err := c.Compact(ctx, Request{Messages: msgs, Force: true})
	return res.View, res.Record, err
}
