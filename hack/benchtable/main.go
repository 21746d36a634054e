// Command benchtable turns the output of the engine benchmark (BenchmarkCompactWithRecord)
// into the table of docs/benchmarks.md, so the table is regenerated, not retyped:
//
//	make bench-table
//
// It reads `go test -bench` output on standard input and writes a Markdown table with one
// row per history size and tier: the time of the first, steady and next modes, the bytes
// and allocations of the first, and the offloads of the first.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	rows, err := parse(bufio.NewScanner(in))
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("no BenchmarkCompactWithRecord results on standard input")
	}
	return render(out, rows)
}
