package compaction

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeOptions bounds what DecodeTranscript accepts, so input the caller does not control
// cannot exhaust memory.
type DecodeOptions struct {
	// MaxMessageBytes is the largest single message (one JSONL line). Default 32 MiB.
	MaxMessageBytes int
	// MaxMessages is the largest number of messages. Default 1,000,000.
	MaxMessages int
}

func (o DecodeOptions) withDefaults() DecodeOptions {
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 32 << 20
	}
	if o.MaxMessages <= 0 {
		o.MaxMessages = 1_000_000
	}
	return o
}

// DecodeTranscript reads a transcript: JSONL (one message a line, blank lines ignored) or a
// single JSON array of messages. The result is validated with Validate; errors name the
// line (JSONL) or the array element.
func DecodeTranscript(r io.Reader, opts DecodeOptions) ([]Message, error) {
	opts = opts.withDefaults()
	br := bufio.NewReaderSize(r, 64<<10)
	first, err := firstNonSpace(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("empty transcript")
		}
		return nil, err
	}
	if first == '[' {
		return decodeArray(br, opts)
	}
	return decodeJSONL(br, opts)
}

func firstNonSpace(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b, br.UnreadByte()
	}
}

func decodeJSONL(br *bufio.Reader, opts DecodeOptions) ([]Message, error) {
	var msgs []Message
	var lines []int // line number of each message, for validation errors
	line := 0
	for {
		raw, err := readLine(br, opts.MaxMessageBytes)
		if len(raw) == 0 && errors.Is(err, io.EOF) {
			break
		}
		line++
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		trimmed := bytes.TrimSpace(raw)
		if len(trimmed) > 0 {
			if len(msgs) >= opts.MaxMessages {
				return nil, fmt.Errorf("line %d: more than %d messages", line, opts.MaxMessages)
			}
			var m Message
			if uerr := json.Unmarshal(trimmed, &m); uerr != nil {
				return nil, fmt.Errorf("line %d: malformed message: %w", line, uerr)
			}
			msgs = append(msgs, m)
			lines = append(lines, line)
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("transcript holds no messages")
	}
	if err := Validate(msgs); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("line %d: %s", lines[ve.Index], ve.Reason)
		}
		return nil, err
	}
	return msgs, nil
}

// readLine reads one line without its newline, failing once it passes max bytes instead of
// buffering an unbounded line.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > max+1 {
			return nil, fmt.Errorf("message longer than %d bytes", max)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(buf, []byte("\n")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return buf, err
		}
	}
}

func decodeArray(br *bufio.Reader, opts DecodeOptions) ([]Message, error) {
	dec := json.NewDecoder(br)
	if _, err := dec.Token(); err != nil { // the opening '['
		return nil, fmt.Errorf("malformed JSON array: %w", err)
	}
	var msgs []Message
	for dec.More() {
		if len(msgs) >= opts.MaxMessages {
			return nil, fmt.Errorf("element %d: more than %d messages", len(msgs), opts.MaxMessages)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("element %d: malformed JSON: %w", len(msgs), err)
		}
		if len(raw) > opts.MaxMessageBytes {
			return nil, fmt.Errorf("element %d: message longer than %d bytes", len(msgs), opts.MaxMessageBytes)
		}
		var m Message
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("element %d: malformed message: %w", len(msgs), err)
		}
		msgs = append(msgs, m)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("malformed JSON array: %w", err)
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("unexpected data after the JSON array: %v", tok)
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("transcript holds no messages")
	}
	if err := Validate(msgs); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("element %d: %s", ve.Index, ve.Reason)
		}
		return nil, err
	}
	return msgs, nil
}

// EncodeJSONL writes messages as JSONL, one message a line.
func EncodeJSONL(w io.Writer, msgs []Message) error {
	bw := bufio.NewWriter(w)
	for i := range msgs {
		b, err := msgs[i].MarshalJSON()
		if err != nil {
			return fmt.Errorf("encode message %d: %w", i, err)
		}
		// bufio.Writer keeps its first error and Flush returns it.
		_, _ = bw.Write(b)
		_ = bw.WriteByte('\n')
	}
	return bw.Flush()
}

// appendJSONL is EncodeJSONL into one buffer sized for it up front: an archive of a
// long span is megabytes, which a growing buffer copied several times over.
func appendJSONL(msgs []Message) ([]byte, error) {
	size := 0
	for i := range msgs {
		size += msgs[i].jsonSize() + 1
	}
	dst := make([]byte, 0, size)
	for i := range msgs {
		n := len(dst)
		b, ok := msgs[i].appendJSON(dst)
		if !ok {
			slow, err := msgs[i].marshalSlow()
			if err != nil {
				return nil, fmt.Errorf("encode message %d: %w", i, err)
			}
			b = append(dst[:n], slow...)
		}
		dst = append(b, '\n')
	}
	return dst, nil
}

// AssistantTurns are the indexes of the assistant messages after the first user message: the
// turns of a transcript, an agent compacting history[:i] before producing message i.
// compactctl simulate and eval, the demo and the tests all replay transcripts by this rule.
func AssistantTurns(msgs []Message) []int {
	var out []int
	seenUser := false
	for i := range msgs {
		switch msgs[i].Role {
		case RoleUser:
			seenUser = true
		case RoleAssistant:
			if seenUser {
				out = append(out, i)
			}
		}
	}
	return out
}
