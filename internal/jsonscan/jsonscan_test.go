package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkAgainstEncodingJSON compares the scanner with encoding/json on one input: a value
// SkipValue takes (valid UTF-8, within MaxDepth) is one encoding/json takes; a string
// ScanString takes decodes to the same text; a plain string is its own text.
func checkAgainstEncodingJSON(t *testing.T, data []byte) {
	t.Helper()
	i := SkipSpace(data, 0)
	end, ok := SkipValue(data, i, 0)
	whole := ok && SkipSpace(data, end) == len(data)
	if whole && utf8.Valid(data) && !json.Valid(data) {
		t.Fatalf("SkipValue takes %q, encoding/json does not", data)
	}
	if json.Valid(data) && !whole && depthOf(data) < MaxDepth {
		t.Fatalf("encoding/json takes %q, SkipValue does not", data) // only deep nesting is left to it
	}
	if i < len(data) && data[i] == '"' {
		if end, _, ok := ScanString(data, i); ok && SkipSpace(data, end) == len(data) && utf8.Valid(data) {
			var want string
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatalf("ScanString takes %q, encoding/json: %v", data, err)
			}
			if got := DecodeString(data[i:end]); got != want {
				t.Fatalf("DecodeString(%q) = %q, encoding/json gives %q", data, got, want)
			}
		}
		if s, end, ok := PlainString(data, i); ok && SkipSpace(data, end) == len(data) {
			var want string
			if err := json.Unmarshal(data, &want); err != nil || s != want {
				t.Fatalf("PlainString(%q) = %q, encoding/json gives %q, %v", data, s, want, err)
			}
		}
	}
}

// depthOf is the deepest nesting of brackets outside strings.
func depthOf(data []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == '{' || c == '['):
			depth++
			deepest = max(deepest, depth)
		case !inString && (c == '}' || c == ']'):
			depth--
		}
	}
	return deepest
}

var seeds = []string{
	`{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5e-3, -0, true, false, null, "x"]} `, `"plain"`, `"esc\"aped\n\u00e9\ud83d\ude00"`,
	`"\ud800"`, `"\ud800\u0041"`, `"bad \x"`, "\"ctl\x01\"", `01`, `-`, `1.`, `1e`, `{"a":}`, `[1,]`, `{"a":1,}`,
	`{"a" 1}`, `"unterminated`, `tru`, `nul`, strings.Repeat("[", 300) + strings.Repeat("]", 300), `{"k\u0041":1}`,
}

func TestAgainstEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		checkAgainstEncodingJSON(t, []byte(s))
	}
}

func FuzzScan(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstEncodingJSON(t, data)
	})
}

func TestEachField(t *testing.T) {
	var keys, values []string
	ok := EachField([]byte(` {"a": 1, "b" : {"c": [2]}, "d": "e"} `), func(k, v []byte) bool {
		keys, values = append(keys, string(k)), append(values, string(v))
		return true
	})
	if !ok || strings.Join(keys, ",") != "a,b,d" || strings.Join(values, "|") != `1|{"c": [2]}|"e"` {
		t.Fatalf("EachField = %v: keys %q values %q", ok, keys, values)
	}
	for _, bad := range []string{`[]`, `{"a":1} x`, `{"\u0061":1}`, `{"a":1,}`, `{"a"}`, ``} {
		if EachField([]byte(bad), func(_, _ []byte) bool { return true }) {
			t.Errorf("EachField takes %q", bad)
		}
	}
	if EachField([]byte(`{"a":1}`), func(_, _ []byte) bool { return false }) {
		t.Error("EachField must report f's false")
	}
}

func TestEachElement(t *testing.T) {
	var got []string
	if !EachElement([]byte(`[ 1 , "two", {"x": [3]} ]`), func(v []byte) bool { got = append(got, string(v)); return true }) ||
		strings.Join(got, "|") != `1|"two"|{"x": [3]}` {
		t.Fatalf("EachElement: %q", got)
	}
	if !EachElement([]byte(`[ ]`), func([]byte) bool { t.Fatal("no element"); return false }) {
		t.Fatal("an empty array must be taken")
	}
}

func TestObjectEnd(t *testing.T) {
	for _, tc := range []struct {
		in    string
		depth int
		end   int
		ok    bool
	}{
		{`{"a":"}"}, 1`, 10, 9, true},
		{`{"a":"\"}"}`, 10, 11, true},
		{`{"a":[{}]}`, 10, 10, true},
		{`{"a":[{}]}`, 2, 6, false}, // deeper than allowed: stops at the third bracket
		{`[1]`, 10, 0, false},
		{`{"a":1`, 10, 6, false},
	} {
		end, ok := ObjectEnd([]byte(tc.in), 0, tc.depth)
		if end != tc.end || ok != tc.ok {
			t.Errorf("ObjectEnd(%q, %d) = %d, %v; want %d, %v", tc.in, tc.depth, end, ok, tc.end, tc.ok)
		}
	}
}
