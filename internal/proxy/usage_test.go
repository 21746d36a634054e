package proxy

import (
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// A stream's usage is read whatever the pieces it arrives in.
func TestSSEUsageAcrossWrites(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1234,\"completion_tokens\":5}}\r\n\r\n" +
		"data: [DONE]\n\n"
	for _, size := range []int{1, 3, 7, 64, len(stream)} {
		u := &sseUsage{read: readOpenAIUsage}
		for rest := stream; rest != ""; {
			n := min(size, len(rest))
			if w, err := u.Write([]byte(rest[:n])); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			rest = rest[n:]
		}
		if n, ok := u.promptTokens(); !ok || n != 1234 {
			t.Errorf("pieces of %d: prompt tokens %d, %v; want 1234", size, n, ok)
		}
	}
}

func TestAnthropicUsage(t *testing.T) {
	u := &sseUsage{read: readAnthropicEvent}
	_, _ = u.Write([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":900,\"cache_creation_input_tokens\":20,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":50}}\n\n"))
	if n, ok := u.promptTokens(); !ok || n != 1020 {
		t.Errorf("stream: %d, %v; want 1020 (uncached, read and written cache tokens)", n, ok)
	}
	j := &jsonUsage{read: readAnthropicMessage}
	_, _ = j.Write([]byte(`{"type":"message","usage":{"input_tokens":7,"output_tokens":3}}`))
	if n, ok := j.promptTokens(); !ok || n != 7 {
		t.Errorf("message: %d, %v; want 7", n, ok)
	}
}

// Lines and bodies past their bounds are skipped, not kept: the answer still reaches the
// agent, only its usage is unknown.
func TestUsageBounds(t *testing.T) {
	u := &sseUsage{read: readOpenAIUsage}
	long := "data: {\"usage\":{\"prompt_tokens\":9},\"pad\":\"" + strings.Repeat("x", maxEventLine) + "\"}\n"
	if n, err := u.Write([]byte(long)); n != len(long) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if _, ok := u.promptTokens(); ok || cap(u.line) > 2*maxEventLine {
		t.Errorf("an over-long line was read (kept %d bytes)", cap(u.line))
	}
	j := &jsonUsage{read: readOpenAIUsage}
	_, _ = j.Write([]byte(`{"usage":{"prompt_tokens":9},"pad":"` + strings.Repeat("x", maxUsageBody) + `"}`))
	if _, ok := j.promptTokens(); ok || j.buf.Len() != 0 {
		t.Errorf("an over-long body was read")
	}
}

// A conversation keeps its name as it grows; another system prompt or task is another
// conversation.
func TestConversationOf(t *testing.T) {
	sys := compaction.Message{Role: compaction.RoleSystem, Content: "You are an agent."}
	task := compaction.Message{Role: compaction.RoleUser, Content: "Fix the bug."}
	reply := compaction.Message{Role: compaction.RoleAssistant, Content: "On it."}
	a := conversationOf([]compaction.Message{sys, task})
	if b := conversationOf([]compaction.Message{sys, task, reply, {Role: compaction.RoleUser, Content: "More."}}); a != b {
		t.Errorf("the conversation changed name as it grew: %s, %s", a, b)
	}
	if b := conversationOf([]compaction.Message{{Role: compaction.RoleSystem, Content: "You are a sub-agent."}, task}); a == b {
		t.Error("another system prompt is the same conversation")
	}
	if b := conversationOf([]compaction.Message{sys, {Role: compaction.RoleUser, Content: "Other task."}}); a == b {
		t.Error("another task is the same conversation")
	}
	if err := compaction.ValidateConversationID(a); err != nil {
		t.Errorf("conversation name %q is not a valid conversation ID: %v", a, err)
	}
}
