package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHeadTail(t *testing.T) {
	cases := []struct {
		s          string
		n          int
		head, tail string
	}{
		{"abc", 5, "abc", "abc"},
		{"abc", 2, "ab", "bc"},
		{"abc", 0, "", ""},
		{"héllo", 2, "h", "lo"},   // é is two bytes: a cut inside it moves out of it
		{"héllo", 3, "hé", "llo"}, // the cut falls on a boundary
		{"日本", 4, "日", "本"},
		{"\xff\xfe", 1, "\xff", "\xfe"}, // invalid bytes are runes of their own
	}
	for _, c := range cases {
		if got := Head(c.s, c.n); got != c.head {
			t.Errorf("Head(%q, %d) = %q, want %q", c.s, c.n, got, c.head)
		}
		if got := Tail(c.s, c.n); got != c.tail {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.s, c.n, got, c.tail)
		}
		if utf8.ValidString(c.s) && (!utf8.ValidString(Head(c.s, c.n)) || !utf8.ValidString(Tail(c.s, c.n))) {
			t.Errorf("%q cut to %d: invalid UTF-8", c.s, c.n)
		}
	}
}

func TestLines(t *testing.T) {
	cases := []struct{ s, first, one string }{
		{"", "", ""},
		{"  one  ", "one", "one"},
		{"\n first \nsecond\n", "first", "first second"},
		{"a\t b\r\n c", "a\t b", "a b c"},
	}
	for _, c := range cases {
		if got := FirstLine(c.s); got != c.first {
			t.Errorf("FirstLine(%q) = %q, want %q", c.s, got, c.first)
		}
		if got := OneLine(c.s); got != c.one {
			t.Errorf("OneLine(%q) = %q, want %q", c.s, got, c.one)
		}
	}
}

func TestClip(t *testing.T) {
	cases := []struct {
		s    string
		n    int
		want string
	}{
		{" short ", 10, "short"},
		{"exactly", 7, "exactly"},
		{"a longer text", 8, "a longer..."},
		{"word  next", 5, "word..."}, // the space before the cut is trimmed
		{"héllo", 2, "h..."},
	}
	for _, c := range cases {
		if got := Clip(c.s, c.n); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

// FuzzOneLine: OneLine is strings.Join(strings.Fields(s), " "), whatever the bytes.
func FuzzOneLine(f *testing.F) {
	for _, s := range []string{"", " ", "a", " a  b\tc\n", "x\u00a0y\u2003z\u0085", "\xff \xfe\n\xc3", "tab\v\fform\r\n", "héllo  wörld "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := OneLine(s), strings.Join(strings.Fields(s), " "); got != want {
			t.Fatalf("OneLine(%q) = %q, want %q", s, got, want)
		}
	})
}
