package compaction

import (
	"bytes"
	"encoding/json"
	"testing"
)

// jsonStringRef is s as encoding/json writes it without HTML escaping.
func jsonStringRef(t testing.TB, s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// TestAppendJSONStringEveryPosition: each byte that must be escaped or decoded (and the
// bytes around the 8-byte test's limits) is written as encoding/json writes it, at every
// position of strings of 1 to 24 bytes, so each lands in every lane of a word and in the
// tail after the last whole word.
func TestAppendJSONStringEveryPosition(t *testing.T) {
	specials := []string{"\x00", "\x1f", "\x20", "\"", "\\", "\x7f", "\x80", "\xff", "é", "\u2028", "\u2029", "😀", "\xed\xa0\x80", "\n", "\t", "!", "#", "[", "]", "<", "&"}
	for n := 1; n <= 24; n++ {
		for pos := 0; pos < n; pos++ {
			for _, sp := range specials {
				b := bytes.Repeat([]byte("a"), n)
				s := string(b[:pos]) + sp + string(b[pos+1:])
				if got, want := string(appendJSONString(nil, s)), jsonStringRef(t, s); got != want {
					t.Fatalf("appendJSONString(%q) = %s, encoding/json writes %s", s, got, want)
				}
			}
		}
	}
}

// FuzzAppendJSONString: appendJSONString writes what encoding/json writes, whatever the bytes.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain ascii text of some length", "ctl \x00\x01\x1f\x7f \b\f\n\r\t", "quote\" back\\ slash/", "<tag> & \u2028\u2029", "\xff\xfe é 😀 \xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(appendJSONString(nil, s)), jsonStringRef(t, s); got != want {
			t.Fatalf("appendJSONString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	})
}

// BenchmarkAppendJSONString encodes 64 KB of tool output: a traceback (short lines, quotes
// and tabs to escape) and a log (long lines).
func BenchmarkAppendJSONString(b *testing.B) {
	for name, line := range map[string]string{
		"traceback": "  File \"/repo/src/pkg/module.py\", line 123, in handler\n    return self.process(request, timeout=30)  # retry\n\tvalue = {'key': [1, 2, 3]}\r\n",
		"log":       "2026-12-07T15:04:05.123Z INFO controller reconciled the session default/agent-7 in 12.5ms after 3 retries; the policy team-policy resolved to window 200000 and thresholds 60/70/80/95 percent\n",
	} {
		b.Run(name, func(b *testing.B) {
			s := string(bytes.Repeat([]byte(line), 64<<10/len(line)))
			b.SetBytes(int64(len(s)))
			buf := make([]byte, 0, 2*len(s))
			for b.Loop() {
				buf = appendJSONString(buf[:0], s)
			}
		})
	}
}
