// Package sources remembers what each engine message of a decoded request was decoded from
// (its original JSON, in the request's own dialect), and finds it again for the messages of
// a compacted view, so a dialect package (anthropic, gemini, responses) writes the messages
// the compaction kept byte for byte as they came.
package sources

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
)

// key identifies a message by what the engine reads of it (a 128-bit hash, in hex).
type key string

// Index maps each message added to what it was decoded from, S (a dialect's source record).
// The zero Index is not usable: use New.
type Index[S any] struct {
	m map[key][]S
}

// New returns an empty Index.
func New[S any]() Index[S] {
	return Index[S]{m: map[key][]S{}}
}

// Add records that m was decoded from src.
func (ix Index[S]) Add(m *compaction.Message, src S) {
	k := fingerprint(m)
	ix.m[k] = append(ix.m[k], src)
}

// Latest is the source added last for a message that reads as m, or nil: a dialect that
// learns more of a message after decoding it (fields after its content) completes it there.
func (ix Index[S]) Latest(m *compaction.Message) *S {
	list := ix.m[fingerprint(m)]
	if len(list) == 0 {
		return nil
	}
	return &list[len(list)-1]
}

// Match finds, for every view message, the source it was decoded from, or the zero S for a
// message the compaction wrote. It matches from the end: the messages a compaction keeps
// are the latest, so of two messages that read the same the later one's source is used.
func (ix Index[S]) Match(view []compaction.Message) []S {
	taken := make(map[key]int, len(ix.m))
	out := make([]S, len(view))
	for i := len(view) - 1; i >= 0; i-- {
		k := fingerprint(&view[i])
		list := ix.m[k]
		if n := len(list) - taken[k]; n > 0 {
			out[i] = list[n-1]
			taken[k]++
		}
	}
	return out
}

// fingerprint identifies a message by what the engine reads of it: the engine's own
// PrefixHash of the message alone, with the parts in canonical form. The pin mark is left
// out: views never carry it.
func fingerprint(m *compaction.Message) key {
	c := compaction.Message{
		Role:         m.Role,
		Content:      m.Content,
		ContentParts: json.RawMessage(canonical(m.ContentParts)),
		ToolCallID:   m.ToolCallID,
		ToolCalls:    m.ToolCalls,
	}
	return key(compaction.PrefixHash(nil, 0, &c))
}

// canonical is raw without insignificant whitespace and with <, > and & unescaped: the form
// the parts have after a trip through a JSON encoder (the compaction API's answer), so a kept
// message still matches its source.
func canonical(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return htmlUnescaper.Replace(buf.String())
}

var htmlUnescaper = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&")
