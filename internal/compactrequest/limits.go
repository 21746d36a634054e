package compactrequest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// Bounds on what one request may make the server decode and keep. Decoding amplifies: a
// message of 20 bytes becomes a Message of about 140 and, with an unknown field, a map of
// about 300 more, and the engine copies messages and their unknown fields. The body limit
// alone does not bound that, so the number of JSON values, of messages and of kept unknown
// fields are bounded too, each in proportion to the message limit.
const (
	// ValuesPerMessage is how many JSON values a body may hold per message of MaxMessages
	// (a message with a tool call is about 16).
	ValuesPerMessage = 32
	// MaxUnknownFields bounds the fields of one message, or of one tool call, that the
	// engine does not know and keeps verbatim (reasoning_content, refusal, annotations,
	// provider extensions: a handful in practice).
	MaxUnknownFields = 16
	// UnknownFieldsPerMessage is how many kept unknown fields a request may carry in all,
	// per message of MaxMessages.
	UnknownFieldsPerMessage = 4
)

// Limits are the bounds of one request.
type Limits struct {
	// MaxMessages bounds the messages of one request (the server's --api-max-messages);
	// the JSON values of a body and the unknown fields its messages keep are bounded in
	// proportion.
	MaxMessages int
}

// MaxValues is the most JSON values a body may hold.
func (l Limits) MaxValues() int { return ValuesPerMessage * l.MaxMessages }

// CheckValues refuses a body with more JSON values than MaxValues, before it is decoded, and
// returns how many it holds.
func (l Limits) CheckValues(body []byte) (int, error) {
	limit := l.MaxValues()
	n := CountValues(body, limit)
	if n > limit {
		return n, &Error{http.StatusRequestEntityTooLarge, compactclient.ReasonTooLarge,
			fmt.Sprintf("the body holds more than %d JSON values (objects, arrays, fields and elements; %d per message of --api-max-messages %d)",
				limit, ValuesPerMessage, l.MaxMessages)}
	}
	return n, nil
}

// CountValues counts the objects, arrays, object fields and array elements of a JSON text
// (its '{', '[', ':' and ',' outside strings; within a factor of two of the values), without
// decoding or allocating anything. It stops counting past limit. Malformed JSON is counted
// the same way and refused by the decoder later.
func CountValues(data []byte, limit int) int {
	n := 0
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte, which may be a quote
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[', ':', ',':
			n++
			if n > limit {
				return n
			}
		}
	}
	return n
}

// CheckMessages bounds the messages of a request and the unknown fields they keep: more
// messages, or more kept fields in all, than the limits is a 413; a message or tool call
// with more than MaxUnknownFields unknown fields is malformed, a 400.
func (l Limits) CheckMessages(msgs []compaction.Message) error {
	if len(msgs) > l.MaxMessages {
		return &Error{http.StatusRequestEntityTooLarge, compactclient.ReasonTooLarge,
			fmt.Sprintf("%d messages, more than the limit of %d (--api-max-messages): send a delta request (the watermark and prefixHash of the last answer) with the messages after the watermark",
				len(msgs), l.MaxMessages)}
	}
	total := 0
	for i := range msgs {
		m := &msgs[i]
		if err := checkUnknown(m.Extra, fmt.Sprintf("message %d", i)); err != nil {
			return err
		}
		total += len(m.Extra)
		for j := range m.ToolCalls {
			if err := checkUnknown(m.ToolCalls[j].Extra, fmt.Sprintf("message %d: tool_calls[%d]", i, j)); err != nil {
				return err
			}
			total += len(m.ToolCalls[j].Extra)
		}
	}
	if limit := UnknownFieldsPerMessage * l.MaxMessages; total > limit {
		return &Error{http.StatusRequestEntityTooLarge, compactclient.ReasonTooLarge,
			fmt.Sprintf("the messages carry %d fields the engine does not know, more than the %d it keeps for a request (%d per message of --api-max-messages %d)",
				total, limit, UnknownFieldsPerMessage, l.MaxMessages)}
	}
	return nil
}

// checkUnknown refuses an object (what names it) with more than MaxUnknownFields unknown
// fields.
func checkUnknown(extra map[string]json.RawMessage, what string) error {
	if len(extra) <= MaxUnknownFields {
		return nil
	}
	names := make([]string, 0, len(extra))
	for k := range extra {
		names = append(names, k)
	}
	slices.Sort(names)
	names = names[:3]
	for i, n := range names {
		names[i] = fmt.Sprintf("%q", clip(n))
	}
	return &Error{http.StatusBadRequest, compactclient.ReasonInvalidMessages,
		fmt.Sprintf("%s has %d fields the engine does not know (%s, ...): at most %d are kept", what, len(extra), strings.Join(names, ", "), MaxUnknownFields)}
}

// clip shortens a name the caller sent for an error message.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
