package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// convCompactor returns the history as it is and records the conversation of each call.
type convCompactor struct {
	mu    sync.Mutex
	convs []string
}

func (c *convCompactor) Compact(_ context.Context, conv string, history []compaction.Message, _ int) ([]compaction.Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.convs = append(c.convs, conv)
	return history, nil
}

// TestHeldHistorySaysWhy: a Responses request that holds part of its history where compaction
// cannot reach it (items before a reference to a stored function call) is logged at info once
// per conversation, with how many items and what holds them; the conversation keeps its
// name as the held part grows; a request that holds nothing is not logged.
func TestHeldHistorySaysWhy(t *testing.T) {
	var log logLines
	c := &convCompactor{}
	p, err := New(Config{Upstream: echo(t), Compactor: c, Log: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	turn := func(k int) string {
		return `{"type":"item_reference","id":"fc_` + string(rune('0'+k)) + `"},` +
			`{"type":"function_call","call_id":"call_` + string(rune('0'+k)) + `","name":"read","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"call_` + string(rune('0'+k)) + `","output":"ok"}`
	}
	task := `{"role":"developer","content":"Check the logs."},{"role":"user","content":"Go."},`
	for _, body := range []string{
		`{"model":"gpt-4.1","input":[` + task + turn(1) + `]}`,
		`{"model":"gpt-4.1","input":[` + task + turn(1) + `,` + turn(2) + `]}`,
		`{"model":"gpt-4.1","input":[{"role":"user","content":"Another task."}]}`,
	} {
		// The compactor changed nothing: the upstream gets the agent's bytes.
		if code, got := post(t, srv.URL+"/v1/responses", body); code != http.StatusOK || got != body {
			t.Fatalf("upstream got %d %q, want the agent's body", code, got)
		}
	}
	c.mu.Lock()
	convs := append([]string(nil), c.convs...)
	c.mu.Unlock()
	if len(convs) != 3 || convs[0] != convs[1] || convs[1] == convs[2] {
		t.Errorf("conversations %q: want the first two named alike, the third apart", convs)
	}
	lines := log.get()
	var held []string
	for _, l := range lines {
		if strings.Contains(l, "history kept verbatim") {
			held = append(held, l)
		}
	}
	if len(held) != 1 || !strings.Contains(held[0], `"items"=3`) || !strings.Contains(held[0], `"item"="\"item_reference\" \"fc_1\""`) {
		t.Errorf("held-history lines %q, want one saying 3 items are held by the reference to fc_1; all lines:\n%s", held, strings.Join(lines, "\n"))
	}
}
