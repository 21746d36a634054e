package shellscan

import (
	"slices"
	"testing"
)

func TestLines(t *testing.T) {
	cases := []struct {
		cmd  string
		max  int
		want []Line
	}{
		{"# comment\n\nls -la\ncd /x && make", 10, []Line{{Text: "ls -la"}, {Text: "cd /x && make"}}},
		{"python -m pytest \\\n  tests/a.py", 10, []Line{{Text: "python -m pytest  tests/a.py"}}},
		{"python -c \"\nimport x\nx.run()\n\" && echo ok", 10, []Line{{Text: "python -c \"\nimport x\nx.run()\n\" && echo ok"}}},
		{"cat <<'EOF' > a.py\nrm -rf /\nEOF\nls", 10, []Line{{Text: "cat <<'EOF' > a.py", Body: "rm -rf /"}, {Text: "ls"}}},
		{"cat <<EOF\nnever closed", 10, []Line{{Text: "cat <<EOF", Body: "never closed"}}},
		{"a\nb\nc", 2, []Line{{Text: "a"}, {Text: "b"}}},
	}
	for _, c := range cases {
		if got := Lines(c.cmd, c.max); !slices.Equal(got, c.want) {
			t.Errorf("Lines(%q) = %q, want %q", c.cmd, got, c.want)
		}
	}
}

func TestHeredocTag(t *testing.T) {
	cases := []struct {
		line, tag string
		ok        bool
	}{
		{"cat <<EOF > x", "EOF", true},
		{"cat <<-'END'", "END", true},
		{`python - << "PY"`, "PY", true},
		{"grep x <<< \"$s\"", "", false},
		{"echo a << b", "b", true},
		{"echo no heredoc", "", false},
	}
	for _, c := range cases {
		if tag, ok := heredocTag(c.line); tag != c.tag || ok != c.ok {
			t.Errorf("heredocTag(%q) = %q, %v; want %q, %v", c.line, tag, ok, c.tag, c.ok)
		}
	}
}

// The one quote scanner: where a line splits, and whether it ends inside quotes.
func TestQuotes(t *testing.T) {
	cases := []struct {
		line  string
		split []string
		open  bool
	}{
		{"a && b || c; d | e & f", []string{"a ", " b ", " c", " d ", " e ", " f"}, false},
		{`echo "a && b" 'c;d' && x`, []string{`echo "a && b" 'c;d' `, " x"}, false},
		{`echo a\;b`, []string{`echo a\;b`}, false},
		{"make 2>&1 | tee log &> out", []string{"make 2>&1 ", " tee log &> out"}, false},
		{`echo "it\"s" && y`, []string{`echo "it\"s" `, " y"}, false},
		{`echo 'it\' && y`, []string{`echo 'it\' `, " y"}, false},
		{`python -c "import x`, []string{`python -c "import x`}, true},
		{`echo 'open`, []string{`echo 'open`}, true},
		{`echo done\`, []string{`echo done\`}, false},
	}
	for _, c := range cases {
		if got := SplitSimple(c.line); !slices.Equal(got, c.split) {
			t.Errorf("SplitSimple(%q) = %q, want %q", c.line, got, c.split)
		}
		if got := openQuote(c.line); got != c.open {
			t.Errorf("openQuote(%q) = %v, want %v", c.line, got, c.open)
		}
	}
}

func TestWords(t *testing.T) {
	cases := []struct {
		s    string
		want []string
	}{
		{"  sed -i 's/a b/c/'  file.py ", []string{"sed", "-i", "s/a b/c/", "file.py"}},
		{`echo "" x`, []string{"echo", "", "x"}},
		{`cat my\ file`, []string{"cat", "my file"}},
		{"", nil},
	}
	for _, c := range cases {
		if got := Words(c.s); !slices.Equal(got, c.want) {
			t.Errorf("Words(%q) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestSedFiles(t *testing.T) {
	cases := []struct {
		args    []string
		inPlace bool
		files   []string
	}{
		{[]string{"-n", "1,5p", "a.py", "b.py"}, false, []string{"a.py", "b.py"}},
		{[]string{"-i", "s/a/b/", "a.py"}, true, []string{"a.py"}},
		{[]string{"-i.bak", "-e", "s/a/b/", "-e", "s/c/d/", "a.py"}, true, []string{"a.py"}},
		{[]string{"--in-place", "-f", "script.sed", "x.txt"}, true, []string{"x.txt"}},
	}
	for _, c := range cases {
		inPlace, files := SedFiles(c.args)
		if inPlace != c.inPlace || !slices.Equal(files, c.files) {
			t.Errorf("SedFiles(%q) = %v, %q; want %v, %q", c.args, inPlace, files, c.inPlace, c.files)
		}
	}
}

func TestLooksLikePath(t *testing.T) {
	for w, want := range map[string]bool{
		"src/a.py": true, "a.py": true, "./x": true, "..": false, "./": false, "3.14": false, "*.py": false,
		"$HOME/x": false, "https://x.io/a": false, "a": false, "word": false, "a,b.py": false,
	} {
		if got := LooksLikePath(w); got != want {
			t.Errorf("LooksLikePath(%q) = %v, want %v", w, got, want)
		}
	}
}

func TestCommandLines(t *testing.T) {
	got := CommandLines("cd /testbed && cd src && python  x.py\n# note\ncat <<EOF > y\nbody\nEOF\nls", 3)
	want := []string{"python x.py", "cat <<EOF > y", "ls"}
	if !slices.Equal(got, want) {
		t.Errorf("CommandLines = %q, want %q", got, want)
	}
}

func TestPythonWrites(t *testing.T) {
	code := "open('a.py', 'w').write(s)\nopen(\"b.py\").read()\nPath('c/d.py').write_text(x)\nopen(f'e.txt', 'a')"
	if got, want := PythonWrites(code), []string{"a.py", "c/d.py", "e.txt"}; !slices.Equal(got, want) {
		t.Errorf("PythonWrites = %q, want %q", got, want)
	}
}

func TestStripCommandPrefix(t *testing.T) {
	got := StripCommandPrefix([]string{"sudo", "A=1", "env", "time", "python", "-x=1"})
	if !slices.Equal(got, []string{"python", "-x=1"}) {
		t.Errorf("StripCommandPrefix = %q", got)
	}
	if got := NonOptions([]string{"-n", "+5", "a", "b"}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("NonOptions = %q", got)
	}
}
