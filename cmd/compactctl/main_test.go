package main

import (
	"flag"
	"strings"
	"testing"
)

func TestTopLevelUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := runCLI(t, "", args...)
		if r.code != exitOK {
			t.Fatalf("%v: %v", args, r)
		}
		for _, want := range []string{"compact", "simulate", "version", "Usage:"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%v: usage does not mention %q:\n%s", args, want, r.stdout)
			}
		}
	}
	// No command at all is a usage error, with the usage on stderr.
	r := runCLI(t, "")
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "Commands:") {
		t.Fatalf("no arguments: %v", r)
	}
	r = runCLI(t, "", "frobnicate")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %v", r)
	}
	r = runCLI(t, "", "help", "frobnicate")
	if r.code != exitUsage {
		t.Fatalf("help for an unknown command: %v", r)
	}
}

// Every subcommand's help lists every one of its flags with its default, a usage line and
// an example, on stdout, with exit status 0.
func TestCommandHelpDocumentsEveryFlag(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		fs, _ := newFlagSet(c)
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
			r := runCLI(t, "", args...)
			if r.code != exitOK || r.stderr != "" {
				t.Fatalf("%v: %v", args, r)
			}
			if !strings.Contains(r.stdout, "Usage: compactctl "+c.name) || !strings.Contains(r.stdout, "Example:") {
				t.Errorf("%v: help lacks the usage line or the example:\n%s", args, r.stdout)
			}
			fs.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(r.stdout, "  -"+f.Name+" ") && !strings.Contains(r.stdout, "  -"+f.Name+"\n") {
					t.Errorf("%v: help does not document -%s", args, f.Name)
				}
				if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && !strings.Contains(r.stdout, f.DefValue) {
					t.Errorf("%v: help does not show the default %q of -%s", args, f.DefValue, f.Name)
				}
			})
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "compactctl ") {
		t.Fatalf("version: %v", r)
	}
	if r := runCLI(t, "", "version", "extra"); r.code != exitUsage {
		t.Fatalf("version with an argument: %v", r)
	}
}

func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args      []string
		wantPos   []string
		wantForce bool
	}{
		{[]string{"--force", "a"}, []string{"a"}, true},
		{[]string{"a", "--force"}, []string{"a"}, true},
		{[]string{"-", "--force"}, []string{"-"}, true},
		{[]string{"--", "--force"}, []string{"--force"}, false},
		{[]string{"a", "--", "-b"}, []string{"a", "-b"}, false},
	}
	for _, c := range cases {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		force := fs.Bool("force", false, "")
		pos, err := parseInterspersed(fs, c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if strings.Join(pos, "|") != strings.Join(c.wantPos, "|") || *force != c.wantForce {
			t.Errorf("%v: positional %q force %v, want %q %v", c.args, pos, *force, c.wantPos, c.wantForce)
		}
	}
}
