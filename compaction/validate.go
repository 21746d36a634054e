package compaction

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// MaxToolCallIDLength bounds a tool-call ID; real providers use IDs of 20 to 60 bytes.
const MaxToolCallIDLength = 256

// ValidationError says which message of a history is malformed and why.
type ValidationError struct {
	Index  int // 0-based position of the message
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("message %d: %s", e.Index, e.Reason)
}

// Validate checks a history before the engine touches it: known roles, valid UTF-8, safe
// and unique tool-call IDs, and no orphaned tool result (a tool message must answer a call
// made by an earlier assistant message, once). An assistant tool call whose result is
// missing is accepted: the views the compactor returns close it with a synthetic result.
// Only user and assistant messages without tool calls may carry the pin mark.
func Validate(msgs []Message) error {
	return validate(msgs, nil)
}

// validate is Validate for the messages after a watermark: open holds the tool calls the
// compacted part made and did not answer, so their late results are not orphans.
func validate(msgs []Message, open []string) error {
	n := len(open)
	for i := range msgs {
		n += len(msgs[i].ToolCalls)
	}
	calls := make(map[string]bool, n) // call ID -> answered; sized once, not grown per call
	for _, id := range open {
		calls[id] = false
	}
	for i := range msgs {
		m := &msgs[i]
		fail := func(format string, args ...any) error {
			return &ValidationError{Index: i, Reason: fmt.Sprintf(format, args...)}
		}
		if m.Role == "" {
			return fail("missing role")
		}
		if !m.Role.valid() {
			return fail("unknown role %q (want system, user, assistant or tool)", truncateForError(string(m.Role)))
		}
		if !utf8.ValidString(m.Content) {
			return fail("content is not valid UTF-8")
		}
		if !utf8.ValidString(m.Name) {
			return fail("name is not valid UTF-8")
		}
		if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
			return fail("only assistant messages may carry tool_calls, not %s", m.Role)
		}
		if m.Pinned && (m.Role == RoleTool || len(m.ToolCalls) > 0) {
			return fail("pinned: only user, system and assistant messages without tool_calls can be pinned")
		}
		for j := range m.ToolCalls {
			tc := &m.ToolCalls[j]
			if err := ValidateToolCallID(tc.ID); err != nil {
				return fail("tool_calls[%d]: %v", j, err)
			}
			if _, dup := calls[tc.ID]; dup {
				return fail("tool_calls[%d]: duplicate tool call id %q", j, tc.ID)
			}
			if tc.Type != "" && tc.Type != "function" {
				return fail("tool_calls[%d]: unsupported type %q (want function)", j, truncateForError(tc.Type))
			}
			if !utf8.ValidString(tc.Function.Name) || !utf8.ValidString(tc.Function.Arguments) {
				return fail("tool_calls[%d]: function name or arguments are not valid UTF-8", j)
			}
			calls[tc.ID] = false
		}
		switch {
		case m.Role == RoleTool:
			if m.ToolCallID == "" {
				return fail("tool message without tool_call_id")
			}
			if err := ValidateToolCallID(m.ToolCallID); err != nil {
				return fail("tool_call_id: %v", err)
			}
			answered, ok := calls[m.ToolCallID]
			if !ok {
				return fail("orphaned tool result: no earlier assistant message called %q", m.ToolCallID)
			}
			if answered {
				return fail("second tool result for tool call %q", m.ToolCallID)
			}
			calls[m.ToolCallID] = true
		case m.ToolCallID != "":
			return fail("tool_call_id on a %s message (only tool messages answer calls)", m.Role)
		}
	}
	return nil
}

// ValidateToolCallID rejects IDs that cannot be stored or shown safely: empty, longer than
// MaxToolCallIDLength, invalid UTF-8, or holding control or space characters. Other
// characters ('/', '.', unicode) are allowed: SafeKey encodes them for storage keys.
func ValidateToolCallID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("empty tool call id")
	case len(id) > MaxToolCallIDLength:
		return fmt.Errorf("tool call id is %d bytes, longer than %d", len(id), MaxToolCallIDLength)
	}
	ascii := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("tool call id %q holds a control or space character", truncateForError(id))
		}
	}
	if ascii { // the common case: provider IDs are ASCII
		return nil
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("tool call id is not valid UTF-8")
	}
	for _, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("tool call id %q holds a control or space character", truncateForError(id))
		}
	}
	return nil
}

// truncateForError keeps error messages short when the offending value is huge.
func truncateForError(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return textcut.Head(s, max) + "..."
}
