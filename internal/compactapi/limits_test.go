package compactapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactrequest"
)

func TestJSONValues(t *testing.T) {
	for _, tc := range []struct {
		json string
		want int
	}{
		{`{}`, 1},
		{`[]`, 1},
		{`[1,2,3]`, 3},
		{`{"a":1,"b":[{}]}`, 6},
		{`"{[:,"`, 0},
		{`{"a\"{[:,":"\\"}`, 2},
		{`{"a":"\\\"[,"}`, 2},
		{`  1  `, 0},
		{`[`, 1}, // malformed JSON is counted the same way
	} {
		if got := jsonValues([]byte(tc.json), 1000); got != tc.want {
			t.Errorf("jsonValues(%s) = %d, want %d", tc.json, got, tc.want)
		}
	}
	if got := jsonValues([]byte(strings.Repeat("[", 100)), 10); got != 11 {
		t.Errorf("jsonValues stops past the limit: got %d, want 11", got)
	}
}

// messagesBody is a compact body of n user messages, each with unknown fields "x0".."xK-1".
func messagesBody(n, unknown int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"messages": [`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role": "user", "content": "hi"`)
		for j := range unknown {
			fmt.Fprintf(&b, `, "x%d": %d`, j, j)
		}
		b.WriteByte('}')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// unknownCall is a tool call with n unknown fields.
func unknownCall(n int) string {
	call := map[string]any{"id": "call_1", "type": "function", "function": map[string]string{"name": "f", "arguments": "{}"}}
	for i := range n {
		call[fmt.Sprintf("x%d", i)] = i
	}
	b, err := json.Marshal(call)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// parseBody is what the compact route does with a body before the session is locked.
func parseBody(s *Server, body []byte) (*compactclient.CompactRequest, error) {
	if _, err := s.checkValues(body); err != nil {
		return nil, err
	}
	return s.parseCompact(body)
}

// TestRequestLimits: the limits on messages, JSON values and kept unknown fields answer a
// clear 413 (too much in all) or 400 (a malformed message), and what is within them is
// accepted.
func TestRequestLimits(t *testing.T) {
	const maxMessages = 100
	s := &Server{cfg: Config{MaxMessages: maxMessages}}
	toolCalls := func(n int, call string) []byte {
		return []byte(`{"messages": [{"role": "assistant", "tool_calls": [` + strings.TrimSuffix(strings.Repeat(call+",", n), ",") + `]}]}`)
	}
	for _, tc := range []struct {
		name string
		body []byte
		code int    // 0: accepted
		says string // in the error message
	}{
		{"the message limit", messagesBody(maxMessages, 0), 0, ""},
		{"a message more", messagesBody(maxMessages+1, 0), http.StatusRequestEntityTooLarge, "101 messages, more than the limit of 100"},
		{"16 unknown fields", messagesBody(1, maxUnknownFields), 0, ""},
		{"17 unknown fields", messagesBody(1, maxUnknownFields+1), http.StatusBadRequest, `message 0 has 17 fields the engine does not know ("x0", "x1", "x10", ...)`},
		{"4 unknown fields a message", messagesBody(maxMessages, unknownFieldsPerMessage), 0, ""},
		{"unknown fields in all", messagesBody(maxMessages/2, 2*unknownFieldsPerMessage+1), http.StatusRequestEntityTooLarge, "carry 450 fields the engine does not know, more than the 400"},
		{"17 unknown fields in a tool call", toolCalls(1, unknownCall(maxUnknownFields+1)), http.StatusBadRequest, "message 0: tool_calls[0] has 17 fields"},
		{"16 unknown fields in a tool call", toolCalls(1, unknownCall(maxUnknownFields)), 0, ""},
		{"numbers for messages", []byte(`{"messages": [` + strings.Repeat("1,", valuesPerMessage*maxMessages) + `1]}`), http.StatusRequestEntityTooLarge, "more than 3200 JSON values"},
		{"empty tool calls", toolCalls(valuesPerMessage*maxMessages, `{}`), http.StatusRequestEntityTooLarge, "more than 3200 JSON values"},
		{"fields of one message", messagesBody(1, valuesPerMessage*maxMessages), http.StatusRequestEntityTooLarge, "more than 3200 JSON values"},
		{"a long string", []byte(`{"messages": [{"role": "user", "content": "` + strings.Repeat(`[{:,\"`, 10000) + `"}]}`), 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parseBody(s, tc.body)
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(req.Messages) == 0 {
					t.Fatal("no messages")
				}
				return
			}
			var ae *apiError
			if !errors.As(err, &ae) || ae.code != tc.code || !strings.Contains(ae.msg, tc.says) {
				t.Fatalf("got %v, want a %d saying %q", err, tc.code, tc.says)
			}
			if want := map[int]string{http.StatusBadRequest: ReasonInvalidMessages, http.StatusRequestEntityTooLarge: ReasonTooLarge}[tc.code]; ae.reason != want {
				t.Errorf("reason %s, want %s", ae.reason, want)
			}
		})
	}
}

// TestOffloadLimits: the offload body's one message has the same limit on unknown fields.
func TestOffloadLimits(t *testing.T) {
	s := &Server{cfg: Config{MaxMessages: DefaultMaxMessages}}
	msg := map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "out"}
	for i := range maxUnknownFields + 1 {
		msg[fmt.Sprintf("x%d", i)] = i
	}
	body, err := json.Marshal(map[string]any{"message": msg})
	if err != nil {
		t.Fatal(err)
	}
	var ae *apiError
	if _, err := s.parseOffload(body); !errors.As(err, &ae) || ae.code != http.StatusBadRequest {
		t.Errorf("an offload with %d unknown fields: %v, want a 400", maxUnknownFields+1, err)
	}
}

// hostileBodies are bodies just under the default body limit that are cheap to send and
// expensive to decode.
func hostileBodies() []struct {
	name string
	body []byte
} {
	const size = DefaultMaxBodyBytes - 4096
	repeat := func(head, item, tail string) []byte {
		n := (size - len(head) - len(tail)) / (len(item) + 1)
		return []byte(head + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + tail)
	}
	manyFields := func() []byte {
		var b bytes.Buffer
		b.WriteString(`{"messages": [{"role": "user"`)
		for i := 0; b.Len() < size; i++ {
			fmt.Fprintf(&b, `, "x%d": 1`, i)
		}
		b.WriteString(`}]}`)
		return b.Bytes()
	}
	return []struct {
		name string
		body []byte
	}{
		{"tiny messages with an unknown key", repeat(`{"messages": [`, `{"role":"user","x":1}`, `]}`)},
		{"numbers for messages", repeat(`{"messages": [`, `1`, `]}`)},
		{"empty tool calls", repeat(`{"messages": [{"role": "assistant", "tool_calls": [`, `{}`, `]}]}`)},
		{"one message with many unknown fields", manyFields()},
	}
}

// TestHostileBodiesRefusedBeforeDecoding: the hostile bodies are refused with a 413 by the
// scan of their JSON values, which allocates nothing. (BenchmarkDecodeHostileBody measures
// what decoding them would cost.)
func TestHostileBodiesRefusedBeforeDecoding(t *testing.T) {
	s := &Server{cfg: Config{MaxMessages: DefaultMaxMessages}}
	for _, h := range hostileBodies() {
		t.Run(h.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := parseBody(s, h.body)
			runtime.ReadMemStats(&after)
			var ae *apiError
			if !errors.As(err, &ae) || ae.code != http.StatusRequestEntityTooLarge || ae.reason != ReasonTooLarge {
				t.Fatalf("%d KiB: %v, want a 413 %s", len(h.body)>>10, err, ReasonTooLarge)
			}
			if n := after.Mallocs - before.Mallocs; n > 100 {
				t.Errorf("refusing it took %d allocations", n)
			}
			t.Logf("%d KiB: %d %s %q", len(h.body)>>10, ae.code, ae.reason, ae.msg)
		})
	}
}

// BenchmarkParseHostileBody measures what the compact route spends on a hostile body before
// the session is locked (B/op is the memory allocated).
func BenchmarkParseHostileBody(b *testing.B) {
	s := &Server{cfg: Config{MaxMessages: DefaultMaxMessages}}
	for _, h := range hostileBodies() {
		b.Run(strings.ReplaceAll(h.name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(h.body)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = parseBody(s, h.body)
			}
		})
	}
}

// BenchmarkDecodeHostileBody is what decoding the hostile bodies costs without the limits
// (as the parent commit did): live-MiB is the heap the decoded request holds.
func BenchmarkDecodeHostileBody(b *testing.B) {
	for _, h := range hostileBodies() {
		b.Run(strings.ReplaceAll(h.name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(h.body)))
			b.ReportAllocs()
			var live uint64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				var req compactclient.CompactRequest
				_ = compactrequest.Decode(h.body, &req)
				runtime.GC()
				runtime.ReadMemStats(&after)
				live = max(live, after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc))
				runtime.KeepAlive(req)
			}
			b.ReportMetric(float64(live)/(1<<20), "live-MiB")
		})
	}
}

// BenchmarkParseHistory is the same for a valid full history of 10,000 messages.
func BenchmarkParseHistory(b *testing.B) {
	s := &Server{cfg: Config{MaxMessages: DefaultMaxMessages}}
	msgs := make([]compaction.Message, 0, DefaultMaxMessages)
	for i := range DefaultMaxMessages {
		msgs = append(msgs, compaction.Message{Role: compaction.RoleUser, Content: fmt.Sprintf("message %d: %s", i, strings.Repeat("text ", 100))})
	}
	body, err := json.Marshal(compactclient.CompactRequest{Messages: msgs})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseBody(s, body); err != nil {
			b.Fatal(err)
		}
	}
}
