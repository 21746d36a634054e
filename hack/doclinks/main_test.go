package main

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Two commands", "two-commands"},
		{"What a compaction costs, and when it is worth it", "what-a-compaction-costs-and-when-it-is-worth-it"},
		{"Engine per tier (`BenchmarkCompactWithRecord`)", "engine-per-tier-benchmarkcompactwithrecord"},
		{"Latency with a slow summarizer (make bench-latency)", "latency-with-a-slow-summarizer-make-bench-latency"},
		{"Pins: what survives a compaction verbatim", "pins-what-survives-a-compaction-verbatim"},
		{"Status is not an input (issue 14, item 1)", "status-is-not-an-input-issue-14-item-1"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
		{"A [linked](other.md#x) heading", "a-linked-heading"},
		{"Größe & Ärger", "größe--ärger"},
		{"5,000 sessions: the controllers alone", "5000-sessions-the-controllers-alone"},
		{"  spaced  ", "spaced"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name        string
		src         string
		wantAnchors []string
		wantLinks   []link
	}{
		{
			name:        "duplicate headings get -1, -2",
			src:         "# A\n## A\n### A\n## B\n",
			wantAnchors: []string{"a", "a-1", "a-2", "b"},
		},
		{
			name:        "closing hashes and indentation",
			src:         "   ## Title ##\n#NotAHeading\n",
			wantAnchors: []string{"title"},
		},
		{
			name:        "setext headings",
			src:         "First\n=====\n\nSecond one\n---\n\n- item\n---\n",
			wantAnchors: []string{"first", "second-one"},
		},
		{
			name:        "nothing inside fenced code blocks",
			src:         "```sh\n# comment\n[a](gone.md)\n```\n~~~~\n```\n# still code\n~~~~\n# Real\n",
			wantAnchors: []string{"real"},
		},
		{
			name:        "indented fence in a list item",
			src:         "- text\n\n  ```text\n  [x](gone.md)\n  ```\n- [y](here.md)\n",
			wantAnchors: []string{},
			wantLinks:   []link{{6, "here.md"}},
		},
		{
			name:        "HTML ids",
			src:         `<a name="top"></a>` + "\n" + `<div id="box">` + "\n",
			wantAnchors: []string{"box", "top"},
		},
		{
			name:        "inline links, images, titles, angle brackets",
			src:         "See [a](a.md), ![img](img/x.png \"title\") and [b](<b c.md>).\n[c](https://example.com) [d](#local) [e](f_(1).md)\n",
			wantAnchors: []string{},
			wantLinks:   []link{{1, "a.md"}, {1, "img/x.png"}, {1, "<b c.md>"}, {2, "https://example.com"}, {2, "#local"}, {2, "f_(1).md"}},
		},
		{
			name:        "reference definitions",
			src:         "[x][ref]\n\n[ref]: docs/x.md#y \"t\"\n",
			wantAnchors: []string{},
			wantLinks:   []link{{3, "docs/x.md#y"}},
		},
		{
			name:        "code spans are not links",
			src:         "`[a](gone.md)` and ``x ` [b](gone.md)`` but [c](c.md)\n",
			wantAnchors: []string{},
			wantLinks:   []link{{1, "c.md"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := parse(tc.src)
			anchors := make([]string, 0, len(d.anchors))
			for a := range d.anchors {
				anchors = append(anchors, a)
			}
			sort.Strings(anchors)
			if !reflect.DeepEqual(anchors, tc.wantAnchors) {
				t.Errorf("anchors = %q, want %q", anchors, tc.wantAnchors)
			}
			if !reflect.DeepEqual(d.links, tc.wantLinks) {
				t.Errorf("links = %v, want %v", d.links, tc.wantLinks)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{
			name: "all alive",
			files: map[string]string{
				"README.md":           "# Top\n[docs](docs/guide.md) [dir](docs/) [anchor](docs/guide.md#setup-and-run) [self](#top) [abs](/docs/guide.md#faq)\n[web](https://example.com/x.md#nope) [mail](mailto:a@b.c) [outside](../shared/DESIGN.md) [go](main.go#L3)\n",
				"docs/guide.md":       "# Guide\n## Setup and run\n## FAQ\n[back](../README.md#top) [sibling](other%20page.md)\n",
				"docs/other page.md":  "# Other\n",
				"main.go":             "package main\n",
				"docs/code/sample.md": "```\n[dead](nothing.md)\n```\n",
			},
		},
		{
			name: "dead files and anchors",
			files: map[string]string{
				"README.md":     "# Top\n\n[gone](docs/gone.md)\n[bad anchor](docs/guide.md#install)\n[self](#bottom)\n",
				"docs/guide.md": "# Guide\n## Setup\n## Setup\n[ok](#setup-1) [dup](#setup-2) [up](../README.md#top)\n",
			},
			want: []string{
				"README.md:3: dead link docs/gone.md: no such file or directory",
				"README.md:4: dead link docs/guide.md#install: no heading with anchor #install in docs/guide.md",
				"README.md:5: dead link #bottom: no heading with anchor #bottom in this file",
				"docs/guide.md:4: dead link #setup-2: no heading with anchor #setup-2 in this file",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			var files []string
			for name, content := range tc.files {
				p := filepath.Join(root, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(name, ".md") {
					files = append(files, name)
				}
			}
			sort.Strings(files)
			got, err := newChecker(root).check(files)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestWalk checks the listing outside a git work tree.
func TestWalk(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"README.md", "docs/a.md", "bin/x.md", "node_modules/p/README.md", "testdata/t.md", ".git/y.md", "docs/b.txt"} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := walkMarkdown(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "docs/a.md"}; !reflect.DeepEqual(got, want) {
		t.Errorf("walkMarkdown = %q, want %q", got, want)
	}
}
