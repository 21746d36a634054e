package toolout

import (
	"slices"
	"testing"
)

// TestFindReturnCode: reading the tag by hand finds what returnCode finds.
func TestFindReturnCode(t *testing.T) {
	for _, text := range []string{"", "<returncode>", "<returncode>0</returncode>", "x<returncode>-12</returncode>y",
		"<returncode>-</returncode><returncode>3</returncode>", "<returncode>1 </returncode>", "<returncode>7</returncode",
		"<returncode><returncode>42</returncode>", "<returncode>٣</returncode>", "<returncode>--1</returncode><returncode>5</returncode>"} {
		got, want := findReturnCode(text), returnCode.FindStringSubmatch(text)
		if !slices.Equal(got, want) {
			t.Errorf("findReturnCode(%q) = %q, returnCode finds %q", text, got, want)
		}
	}
}

func TestStatus(t *testing.T) {
	cases := []struct {
		content              string
		exitFailed, statusNo bool
	}{
		{"<returncode>0</returncode>\nok", false, false},
		{"<returncode>2</returncode>\nsed: can't read a.py", true, false},
		{"make: *** [all] Error 2\nexit status 2", true, false},
		{"Process finished with exit code 0", false, false},
		{"ERROR: file not found", false, true},
		{"OBSERVATION:\nNo replacement was performed, old_str did not appear verbatim", false, true},
		{"Here's the result of running `cat -n`:\n1 raise ValueError('error: x')", false, false},
	}
	for _, c := range cases {
		if got := ExitFailed(c.content); got != c.exitFailed {
			t.Errorf("ExitFailed(%q) = %v, want %v", c.content, got, c.exitFailed)
		}
		if got := StatusFailed(c.content); got != c.statusNo {
			t.Errorf("StatusFailed(%q) = %v, want %v", c.content, got, c.statusNo)
		}
	}
}

func TestLeadingReturnCode(t *testing.T) {
	cases := []struct {
		content, code, rest string
		ok                  bool
	}{
		{"<returncode>1</returncode>\n<output>x", "1", "\n<output>x", true},
		{"  <returncode>-9</returncode>", "-9", "", true},
		{"output\n<returncode>1</returncode>", "", "output\n<returncode>1</returncode>", false},
		{"<returncode>x</returncode>", "", "<returncode>x</returncode>", false},
	}
	for _, c := range cases {
		code, rest, ok := LeadingReturnCode(c.content)
		if code != c.code || rest != c.rest || ok != c.ok {
			t.Errorf("LeadingReturnCode(%q) = %q, %q, %v; want %q, %q, %v", c.content, code, rest, ok, c.code, c.rest, c.ok)
		}
	}
}

func TestDiffFiles(t *testing.T) {
	diff := "diff --git a/x/a.py b/x/a.py\n+1\n not diff --git a/skip.py b/skip.py\ndiff --git a/b.go b/b.go\ndiff --git a/nob\n"
	if got, want := DiffFiles(diff, 10), []string{"x/a.py", "b.go"}; !slices.Equal(got, want) {
		t.Errorf("DiffFiles = %q, want %q", got, want)
	}
	if got := DiffFiles(diff, 1); !slices.Equal(got, []string{"x/a.py"}) {
		t.Errorf("DiffFiles to 1 = %q", got)
	}
}
