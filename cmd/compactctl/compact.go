package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/harness9/compaction-operator/compaction"
)

// compactOutput is what compact prints: the compacted view and the record of the compaction.
type compactOutput struct {
	Messages []compaction.Message         `json:"messages"`
	Record   *compaction.CompactionRecord `json:"record"`
}

func compactCommand() *command {
	return &command{
		name:     "compact",
		synopsis: "compact a transcript once and print the compacted messages and the record",
		usage:    "compactctl compact [flags] TRANSCRIPT",
		help: `Reads TRANSCRIPT (a file, or - for standard input), runs one compaction on it as the agent
would before its next LLM call, and prints one JSON object on standard output:

  {"messages": [...the compacted view...], "record": {...the CompactionRecord...}}

The tier follows from the estimated usage (bytes / 4 / --context-window) and the four
thresholds; --force runs the Emergency tier whatever the usage. Tool results longer than
--hook-threshold are first offloaded at source, as the agent's OffloadHook would have done
before they entered the history.

Offloaded tool results, the record (appended to the session's JSONL trail) and the session's
incremental state (last summary and anchors, merged into by the next run with the same
--session-id) are written under --store: by default .harness9/ in a per-user cache directory
(see -h), never the current one, and a line on standard error says where.
The transcript is read and validated first: bad input writes nothing at all.`,
		example: `  compactctl compact --context-window 32000 --store /tmp/work session.jsonl | jq .record
  compactctl compact --force --store '' - < session.jsonl
  compactctl compact --summarizer openai --openai-base-url http://localhost:11434/v1 \
      --openai-model llama3.1 session.jsonl`,
		flags: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			ef := addEngineFlags(fs)
			force := fs.Bool("force", false, "run the Emergency tier (forced truncation) whatever the usage, as a manual /compact does")
			return func(ctx context.Context, std *stdio, args []string) error {
				return runCompact(ctx, std, ef, *force, args)
			}
		},
	}
}

func runCompact(ctx context.Context, std *stdio, ef *engineFlags, force bool, args []string) error {
	path, err := transcriptArg(args)
	if err != nil {
		return err
	}
	cfg, err := ef.config()
	if err != nil {
		return err
	}
	summarizer, err := ef.newSummarizer()
	if err != nil {
		return err
	}
	msgs, err := readTranscript(path, std.in)
	if err != nil {
		return err
	}
	// Only now, with good input, is anything created.
	store, _, err := ef.openStore(std.err)
	if err != nil {
		return err
	}
	c, err := compaction.NewProgressiveCompactor(cfg,
		compaction.WithStore(store),
		compaction.WithSummarizer(summarizer),
		compaction.WithSessionID(ef.sessionID),
		compaction.WithLogger(ef.logger(std.err)),
	)
	if err != nil {
		return fmt.Errorf("create compactor: %w", err)
	}
	hook := &hookOffloader{off: c.Offloader(), threshold: ef.hookThreshold}
	for i := range msgs {
		if msgs[i], err = hook.apply(ctx, msgs[i]); err != nil {
			return err
		}
	}
	if hook.count > 0 {
		warnf(std.err, "compactctl compact: offloaded %d tool result(s), %s, at source (over --hook-threshold %d)\n",
			hook.count, humanBytes(hook.bytes), ef.hookThreshold)
	}

	res, err := c.Compact(ctx, compaction.Request{Messages: msgs, Force: force})
	out, rec := res.View, res.Record
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(compactOutput{Messages: out, Record: rec}); err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if _, err := std.out.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}
