package bounded

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/harness9/compaction-operator/compaction"
)

// endless yields 'x' for ever, counting what it gave.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.n += int64(len(p))
	return len(p), nil
}

func TestReadAll(t *testing.T) {
	const limit = 1000
	cases := []struct {
		name    string
		body    io.Reader
		size    int64
		want    string
		tooLong bool
	}{
		{"declared", strings.NewReader("hello"), 5, "hello", false},
		{"undeclared", strings.NewReader("hello"), -1, "hello", false},
		{"empty", strings.NewReader(""), 0, "", false},
		{"at the cap", strings.NewReader(strings.Repeat("a", limit)), -1, strings.Repeat("a", limit), false},
		{"one over, undeclared", strings.NewReader(strings.Repeat("a", limit+1)), -1, "", true},
		{"declared over", strings.NewReader("short"), limit + 1, "", true},
		{"longer than declared", strings.NewReader("hello world"), 5, "hello world", false},
		{"longer than declared, over", strings.NewReader(strings.Repeat("a", 2*limit)), 5, "", true},
		{"one byte at a time", iotest.OneByteReader(strings.NewReader("hello")), -1, "hello", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadAll(c.body, c.size, limit, "state", "s3://b/k")
			if c.tooLong {
				if !errors.Is(err, compaction.ErrObjectTooLarge) || !strings.Contains(err.Error(), "s3://b/k") || !strings.Contains(err.Error(), "1000") {
					t.Fatalf("ReadAll = %q, %v; want ErrObjectTooLarge naming the object and the cap", got, err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("ReadAll = %q, %v; want %q", got, err, c.want)
			}
		})
	}
	// Shorter than declared: the body was cut.
	if _, err := ReadAll(strings.NewReader("hi"), 5, limit, "state", "k"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a body shorter than declared: %v; want ErrUnexpectedEOF", err)
	}
	// An endless body is read no further than the cap and a byte.
	e := &endless{}
	if _, err := ReadAll(e, -1, 10<<20, "state", "k"); !errors.Is(err, compaction.ErrObjectTooLarge) || e.n > 10<<20+1 {
		t.Errorf("an endless body: %v after %d bytes; want ErrObjectTooLarge after at most the cap and one", err, e.n)
	}
}

func TestReader(t *testing.T) {
	got, err := io.ReadAll(Reader(strings.NewReader("hello"), 5, "record", "k"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("at the cap: %q, %v", got, err)
	}
	var out bytes.Buffer
	e := &endless{}
	n, err := io.Copy(&out, Reader(e, 100_000, "record", "s3://b/r"))
	if !errors.Is(err, compaction.ErrObjectTooLarge) || n != 100_000 || !strings.Contains(err.Error(), "s3://b/r") {
		t.Fatalf("an endless body: copied %d, %v; want the cap's 100000 bytes then ErrObjectTooLarge", n, err)
	}
}
