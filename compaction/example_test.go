package compaction_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
)

// A session's turns through the engine: each turn hands Compact the whole history and sends
// the view it returns to the model. Warn offloads large tool results (a placeholder with a
// preview stays); once the history outgrows its window, the view is the system message, a
// compaction message (anchors and prose) and the recent messages.
func Example() {
	ctx := context.Background()
	c, err := compaction.NewProgressiveCompactor(compaction.DefaultConfig(8000),
		compaction.WithStore(mem.New()), compaction.WithSessionID("example"))
	if err != nil {
		panic(err)
	}
	history := make([]compaction.Message, 0, 122)
	history = append(history,
		compaction.Message{Role: compaction.RoleSystem, Content: "You are a coding agent."},
		compaction.Message{Role: compaction.RoleUser, Content: "Fix the failing test in pkg/parse; do not touch the public API."})
	shown, last := 0, compaction.Result{}
	for i := range 60 {
		id := fmt.Sprintf("call_%d", i)
		lines := 20
		if i%5 == 0 {
			lines = 200 // a large result: offloaded at Warn
		}
		history = append(history,
			compaction.Message{Role: compaction.RoleAssistant, ToolCalls: []compaction.ToolCall{{ID: id, Type: "function",
				Function: compaction.FunctionCall{Name: "bash", Arguments: `{"cmd":"go test ./pkg/parse/"}`}}}},
			compaction.Message{Role: compaction.RoleTool, ToolCallID: id, Content: strings.Repeat(fmt.Sprintf("--- FAIL: TestParse/case_%d\n", i), lines)})
		res, err := c.Compact(ctx, compaction.Request{Messages: history})
		if err != nil {
			panic(err)
		}
		if res.Record.ChangedView() && shown < 3 {
			shown++
			fmt.Printf("turn %d: %s, %d messages sent instead of %d, %d%% of the window\n",
				i, res.Record.Tier, len(res.View), len(history), int(100*res.Record.UsageAfter))
		}
		last = res
	}
	fmt.Printf("after 60 turns: %d messages sent instead of %d, %d%% of the window\n",
		len(last.View), len(history), int(100*last.Record.UsageAfter))
	// Output:
	// turn 10: Warn, 24 messages sent instead of 24, 35% of the window
	// turn 15: Warn, 34 messages sent instead of 34, 45% of the window
	// turn 20: Full, 9 messages sent instead of 44, 32% of the window
	// after 60 turns: 17 messages sent instead of 122, 50% of the window
}
