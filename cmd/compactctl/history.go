package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/harness9/compaction-operator/compaction/compactclient"
)

func historyCommand() *command {
	return &command{
		name:     "history",
		synopsis: "print or search what an AgentSession's compactions summarized",
		usage:    "compactctl history [flags] NAMESPACE/NAME",
		help: `Prints the messages the session's compactions summarized (or an Emergency truncation
dropped), read back from its archive through the operator's compaction API
(GET /v1/namespaces/NAMESPACE/sessions/NAME/history, or .../history/search with --search), one
JSON object a line: {"index": N, "role": ..., "archive": "from-to", "message": {...}}, in
index order. N is the message's index in the agent's raw history. An offloaded tool result
appears as its placeholder: read it back with compactctl tool-result.

--search TEXT prints only the messages whose text holds TEXT (case-insensitive), or matches
it as a Go RE2 regular expression with --regex. --from and --to bound the indices
(from <= index < to). One page holds at most --limit messages (the server's default: 100, 20
for a search); --all follows the pages to the end. When more remain, standard error says
where to go on. The caller needs "get" on agentsessions/toolresults in the namespace.`,
		example: `  compactctl history --server https://localhost:8082 --ca-file ca.crt default/swe-agent-1 --from 40 --to 60
  compactctl history --server https://localhost:8082 --ca-file ca.crt default/swe-agent-1 --search 'FAIL: Test\w+' --regex --all
  compactctl history --server https://localhost:8082 --ca-file ca.crt --conversation sub-agent-2 default/swe-agent-1 --format text`,
		flags: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			cf := addClusterFlags(fs)
			from := fs.Int("from", 0, "first index to print (from <= index)")
			to := fs.Int("to", 0, "index to stop before (index < to); 0: no bound")
			limit := fs.Int("limit", 0, fmt.Sprintf("messages per page, 1 to %d (default: the server's)", compactclient.MaxHistoryLimit))
			search := fs.String("search", "", "print only the messages whose text holds this (case-insensitive)")
			regex := fs.Bool("regex", false, "--search is a Go RE2 regular expression (case-insensitive; (?-i) turns that off)")
			all := fs.Bool("all", false, "follow the pages to the end of the range")
			format := fs.String("format", "jsonl", "jsonl (one JSON object a line) or text (index, role and content, for people)")
			return func(ctx context.Context, std *stdio, args []string) error {
				ns, name, err := sessionArgs(args)
				if err != nil {
					return err
				}
				switch {
				case *from < 0:
					return usageErrorf("--from %d: want 0 or more", *from)
				case *to < 0 || *to > 0 && *to <= *from:
					return usageErrorf("--to %d: want 0 (no bound) or more than --from (%d)", *to, *from)
				case *limit < 0 || *limit > compactclient.MaxHistoryLimit:
					return usageErrorf("--limit %d: want 1 to %d", *limit, compactclient.MaxHistoryLimit)
				case *regex && *search == "":
					return usageErrorf("--regex needs --search")
				case *format != "jsonl" && *format != "text":
					return usageErrorf("--format %q: want jsonl or text", *format)
				}
				c, err := cf.client()
				if err != nil {
					return err
				}
				page := func(from int) (*compactclient.HistoryResponse, error) {
					conv := compactclient.InConversation(*cf.conversation)
					if *search != "" {
						return c.SearchHistory(ctx, ns, name, compactclient.HistorySearch{Text: *search, Regex: *regex, From: from, To: *to, Limit: *limit}, conv)
					}
					return c.History(ctx, ns, name, compactclient.HistoryRange{From: from, To: *to, Limit: *limit}, conv)
				}
				return cf.explain(printHistory(std, page, *from, *all, *format == "text"))
			}
		},
	}
}

// printHistory prints the pages of a history read from from: one, or with all every one to
// the end. The next page starts where the last one said; one that does not move on ends it.
func printHistory(std *stdio, page func(from int) (*compactclient.HistoryResponse, error), from int, all, text bool) error {
	w := bufio.NewWriter(std.out)
	for {
		resp, err := page(from)
		if err != nil {
			return err
		}
		for i := range resp.Messages {
			if err := writeHistoryMessage(w, &resp.Messages[i], text); err != nil {
				return fmt.Errorf("write history: %w", err)
			}
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
		if !resp.Truncated {
			return nil
		}
		if !all || resp.Next <= from {
			warnf(std.err, "compactctl history: more from index %d: run again with --from %d (or --all)\n", resp.Next, resp.Next)
			return nil
		}
		from = resp.Next
	}
}

func writeHistoryMessage(w io.Writer, m *compactclient.HistoryMessage, text bool) error {
	if !text {
		line, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = w.Write(append(line, '\n'))
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%d] %s", m.Index, m.Role)
	if m.Message.ToolCallID != "" {
		fmt.Fprintf(&b, " (%s)", m.Message.ToolCallID)
	}
	b.WriteString(":\n")
	content := m.Message.Content
	if content == "" && len(m.Message.ContentParts) > 0 {
		content = string(m.Message.ContentParts)
	}
	if content != "" {
		b.WriteString(indent(content))
	}
	for _, tc := range m.Message.ToolCalls {
		b.WriteString(indent(fmt.Sprintf("-> %s %s(%s)", tc.ID, tc.Function.Name, tc.Function.Arguments)))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// indent puts two spaces before each line of s and ends it with a newline.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}
