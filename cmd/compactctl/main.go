// Command compactctl runs the progressive context compactor on transcript files, locally
// and without a cluster: "compact" runs one compaction, "simulate" replays a whole
// transcript turn by turn as an agent would and reports (and plots) what the compactor did,
// "eval" replays transcripts and scores what the views kept against facts that must survive.
//
// Transcripts are OpenAI chat messages, one JSON object a line (JSONL), or a single JSON
// array. Exit status: 0 on success, 1 when the input cannot be read or processed, 2 on a
// usage error (unknown command, bad flag, bad flag value, missing argument).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // input or runtime error
	exitUsage = 2 // bad command line
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"; otherwise the module
// version from the build info is used.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: its documentation and its entry point.
type command struct {
	name     string
	synopsis string // one line, for the top-level usage
	usage    string // the usage line, without "Usage: "
	help     string // what it does, in paragraphs
	example  string
	// flags registers the command's flags on fs and returns the function that runs it with
	// the positional arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, std *stdio, args []string) error
}

// stdio carries the process's standard streams.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

func commands() []*command {
	return []*command{compactCommand(), simulateCommand(), evalCommand(), recordsCommand(), toolResultCommand(), historyCommand(), resetCommand(), versionCommand()}
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run is the whole program: main only wires the process to it.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	std := &stdio{in: stdin, out: stdout, err: stderr}
	if len(args) == 0 {
		printUsageOnError(stderr)
		return exitUsage
	}
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && name == "help" {
			c := findCommand(args[1])
			if c == nil {
				warnf(stderr, "compactctl help: unknown command %q\n\n", args[1])
				printUsageOnError(stderr)
				return exitUsage
			}
			fs, _ := newFlagSet(c)
			return helpWritten(printCommandUsage(stdout, c, fs), stderr)
		}
		return helpWritten(printTopUsage(stdout), stderr)
	default:
		c := findCommand(name)
		if c == nil {
			warnf(stderr, "compactctl: unknown command %q\n\n", name)
			printUsageOnError(stderr)
			return exitUsage
		}
		return runCommand(ctx, c, args[1:], std)
	}
}

func runCommand(ctx context.Context, c *command, args []string, std *stdio) int {
	fs, runFn := newFlagSet(c)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return helpWritten(printCommandUsage(std.out, c, fs), std.err)
	}
	if err == nil {
		err = runFn(ctx, std, pos)
	}
	return report(c, err, std.err)
}

// report prints err for command c and returns the exit code it deserves.
func report(c *command, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		warnf(stderr, "compactctl %s: %v\nRun 'compactctl %s -h' for usage.\n", c.name, ue.err, c.name)
		return exitUsage
	}
	warnf(stderr, "compactctl %s: %v\n", c.name, err)
	return exitError
}

// helpWritten returns the exit code of a help request whose text was written to standard
// output with the error err: help that could not be written is a failure.
func helpWritten(err error, stderr io.Writer) int {
	if err != nil {
		warnf(stderr, "compactctl: write help: %v\n", err)
		return exitError
	}
	return exitOK
}

// warnf writes a diagnostic to stderr. Its write error is deliberately dropped: when the
// error stream itself fails there is nowhere left to report that, and the exit status
// still tells the caller that something went wrong.
func warnf(stderr io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(stderr, format, args...)
}

// printUsageOnError prints the top-level usage on stderr after a usage error. Best effort
// like warnf: the exit status (2) already reports the error.
func printUsageOnError(stderr io.Writer) {
	_ = printTopUsage(stderr)
}

// usageError marks a bad command line (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

func newFlagSet(c *command) (*flag.FlagSet, func(context.Context, *stdio, []string) error) {
	fs := flag.NewFlagSet("compactctl "+c.name, flag.ContinueOnError)
	// Errors and help are printed by run, to the right stream.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs, c.flags(fs)
}

// parseInterspersed parses flags that may appear before or after the positional
// arguments ("compact t.jsonl --force"), which the flag package alone does not allow. A
// "--" ends the flags: everything after it is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err: err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// printTopUsage writes the program's usage to w in one write and returns its error.
func printTopUsage(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`compactctl runs the tiered progressive context compactor on agent transcripts.

Usage:
  compactctl <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.synopsis)
	}
	b.WriteString(`  help       show this help, or a command's help: compactctl help <command>

A transcript is OpenAI chat messages (role system|user|assistant|tool, content, tool_calls,
tool_call_id), one JSON object a line (JSONL) or one JSON array; "-" reads standard input.

Exit status: 0 success, 1 input or processing error, 2 usage error.
Run 'compactctl <command> -h' for a command's flags and an example.
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// printCommandUsage writes the usage of command c, with the flags of fs, to w in one write
// and returns its error.
func printCommandUsage(w io.Writer, c *command, fs *flag.FlagSet) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s\n\nFlags:\n", c.usage, strings.TrimSpace(c.help))
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if c.example != "" {
		fmt.Fprintf(&b, "\nExample:\n%s\n", strings.TrimRight(c.example, "\n"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func versionCommand() *command {
	return &command{
		name:     "version",
		synopsis: "print the version of compactctl",
		usage:    "compactctl version",
		help:     "Prints the compactctl version, the VCS revision it was built from when known, and the Go version.",
		example:  "  compactctl version",
		flags: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			return func(_ context.Context, std *stdio, args []string) error {
				if len(args) > 0 {
					return usageErrorf("unexpected argument %q", args[0])
				}
				if _, err := fmt.Fprintln(std.out, versionString()); err != nil {
					return fmt.Errorf("write version: %w", err)
				}
				return nil
			}
		},
	}
}

// versionString is "compactctl VERSION (REVISION) GOVERSION OS/ARCH".
func versionString() string {
	v, rev, dirty := version, "", false
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" && info.Main.Version != "" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	out := "compactctl " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "-dirty"
		}
		out += " (" + rev + ")"
	}
	return fmt.Sprintf("%s %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
