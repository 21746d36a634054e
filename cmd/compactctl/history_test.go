package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// historyServer answers the history routes from an archive of 5 messages (indices 1 to 5),
// as the compaction API does: a page of at most limit (default 100) from from, search by
// substring. It records each request's URI.
func historyServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	const n = 5
	var mu sync.Mutex
	var uris []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		uris = append(uris, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		q := r.URL.Query()
		if strings.HasSuffix(r.URL.Path, "/reset") {
			_ = json.NewEncoder(w).Encode(compactclient.ResetResponse{Record: &compaction.CompactionRecord{ID: "r1", SessionID: "uid", Reset: true, WatermarkBefore: 12}})
			return
		}
		from, _ := strconv.Atoi(q.Get("from"))
		limit, _ := strconv.Atoi(q.Get("limit"))
		if limit == 0 {
			limit = compactclient.DefaultHistoryLimit
		}
		resp := compactclient.HistoryResponse{Next: n + 1, Messages: []compactclient.HistoryMessage{}}
		for i := max(from, 1); i <= n; i++ {
			content := fmt.Sprintf("message %d", i)
			if s := q.Get("q"); s != "" && !strings.Contains(content, s) {
				continue
			}
			if len(resp.Messages) == limit {
				resp.Next, resp.Truncated = i, true
				break
			}
			resp.Messages = append(resp.Messages, compactclient.HistoryMessage{Index: i, Role: compaction.RoleUser, Archive: fmt.Sprintf("1-%d", n+1),
				Message: compaction.Message{Role: compaction.RoleUser, Content: content}})
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), uris...)
	}
}

// TestHistoryCommand: history sends the range, limit, search and conversation as the API's
// parameters, prints one JSON object a line (or text), says where to go on when a page is
// cut short, and follows the pages with --all.
func TestHistoryCommand(t *testing.T) {
	srv, uris := historyServer(t)
	base := []string{"history", "--server", srv.URL, "--token", "t"}
	r := runCLI(t, "", append(base, "default/agent", "--from", "2", "--to", "9", "--limit", "2", "--conversation", "sub-2")...)
	if r.code != 0 {
		t.Fatalf("history: %s", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(r.stderr, "--from 4") {
		t.Errorf("a page of 2 from 2: want two lines and where to go on\n%s", r)
	}
	var m compactclient.HistoryMessage
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil || m.Index != 2 || m.Message.Content != "message 2" || m.Archive != "1-6" {
		t.Errorf("first line %q: %+v, %v", lines[0], m, err)
	}
	r = runCLI(t, "", append(base, "default/agent", "--limit", "2", "--all")...)
	if got := strings.Count(r.stdout, "\n"); r.code != 0 || got != 5 || r.stderr != "" {
		t.Errorf("--all: %d lines, want the 5 messages and nothing on stderr\n%s", got, r)
	}
	r = runCLI(t, "", append(base, "default/agent", "--search", "message 3", "--regex", "--format", "text")...)
	if r.code != 0 || r.stdout != "[3] user:\n  message 3\n\n" {
		t.Errorf("search as text: %s", r)
	}
	want := []string{
		"GET /v1/namespaces/default/sessions/agent/history?conversation=sub-2&from=2&limit=2&to=9",
		"GET /v1/namespaces/default/sessions/agent/history?limit=2",
		"GET /v1/namespaces/default/sessions/agent/history?from=3&limit=2",
		"GET /v1/namespaces/default/sessions/agent/history?from=5&limit=2",
		"GET /v1/namespaces/default/sessions/agent/history/search?q=message+3&regex=1",
	}
	if got := uris(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestHistoryCommandUsage: bad flags are usage errors (exit 2) and send nothing.
func TestHistoryCommandUsage(t *testing.T) {
	srv, uris := historyServer(t)
	for _, args := range [][]string{
		{"default/agent", "--from", "-1"},
		{"default/agent", "--from", "5", "--to", "5"},
		{"default/agent", "--limit", "1001"},
		{"default/agent", "--regex"},
		{"default/agent", "--format", "xml"},
		{"agent"},
		{},
	} {
		r := runCLI(t, "", append([]string{"history", "--server", srv.URL, "--token", "t"}, args...)...)
		if r.code != exitUsage {
			t.Errorf("history %q: exit %d, want %d\n%s", args, r.code, exitUsage, r)
		}
	}
	if got := uris(); len(got) != 0 {
		t.Errorf("usage errors sent %q", got)
	}
}

// TestResetCommand: reset posts to .../reset with the conversation and prints the Reset
// record as one JSON line.
func TestResetCommand(t *testing.T) {
	srv, uris := historyServer(t)
	r := runCLI(t, "", "reset", "--server", srv.URL, "--token", "t", "--conversation", "sub-2", "default/agent")
	if r.code != 0 {
		t.Fatalf("reset: %s", r)
	}
	var rec compaction.CompactionRecord
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || !rec.Reset || rec.WatermarkBefore != 12 || !strings.Contains(r.stderr, "watermark 12 -> 0") {
		t.Errorf("reset printed %+v, %v\n%s", rec, err, r)
	}
	if got := uris(); len(got) != 1 || got[0] != "POST /v1/namespaces/default/sessions/agent/reset?conversation=sub-2" {
		t.Errorf("requests %q", got)
	}
	if r := runCLI(t, "", "reset", "--server", srv.URL, "--token", "t", "default/agent", "extra"); r.code != exitUsage {
		t.Errorf("reset with two arguments: %s", r)
	}
}
