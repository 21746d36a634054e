// Command demo is `make demo`: see internal/dev/demo. Environment: DEMO_KEEP=1 leaves everything
// running after the replay; DEMO_TRANSCRIPT and DEMO_WINDOW choose the replay.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/harness9/compaction-operator/internal/dev/demo"
)

func main() {
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	window := int32(8000)
	if v := os.Getenv("DEMO_WINDOW"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1024 {
			fmt.Fprintf(os.Stderr, "demo: DEMO_WINDOW=%q is not a number of tokens >= 1024\n", v)
			os.Exit(2)
		}
		window = int32(n)
	}
	transcript := os.Getenv("DEMO_TRANSCRIPT")
	if transcript == "" {
		transcript = filepath.Join(root, "testdata", "long-session.jsonl")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = demo.Run(ctx, demo.Options{
		Root: root, Dir: filepath.Join(root, "demo-out"), Transcript: transcript, Window: window,
		Keep: os.Getenv("DEMO_KEEP") == "1", Out: os.Stdout,
	})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
