package main

import (
	"context"
	"errors"
	"fmt"
)

func resetCommand() *command {
	return &command{
		name:     "reset",
		synopsis: "undo an AgentSession's compaction: its next turn starts from the full history",
		usage:    "compactctl reset [flags] NAMESPACE/NAME",
		help: `Forgets the compaction state of the session (or of one conversation, --conversation) through
the operator's compaction API (POST /v1/namespaces/NAMESPACE/sessions/NAME/reset): the agent's
next turn is compacted from its own full history again, as before its first compaction (the
history was never changed). The trail gets a Reset record, printed here as one JSON line;
the archive (compactctl history) and offloaded tool results are kept. The caller needs
"create" on agentsessions/compact in the namespace.`,
		example: `  compactctl reset --server https://localhost:8082 --ca-file ca.crt default/swe-agent-1
  compactctl reset --server https://localhost:8082 --ca-file ca.crt --conversation sub-agent-2 default/swe-agent-1`,
		flags: sessionFlags(func(ctx context.Context, std *stdio, s sessionCall) error {
			resp, err := s.client.Reset(ctx, s.ns, s.name, s.conv)
			if err != nil {
				return err
			}
			if resp.Record == nil {
				return errors.New("the server answered without the Reset record")
			}
			line, err := resp.Record.JSONLine()
			if err != nil {
				return err
			}
			if _, err := std.out.Write(line); err != nil {
				return fmt.Errorf("write record: %w", err)
			}
			warnf(std.err, "compactctl reset: compaction state forgotten (watermark %d -> 0): the next turn starts from the full history\n", resp.Record.WatermarkBefore)
			if resp.RecordError != "" {
				warnf(std.err, "compactctl reset: the Reset record was not stored: %s\n", resp.RecordError)
			}
			return nil
		}),
	}
}
