package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// historyStub is a toolStub whose session keeps an archive: its Compact opens the view with
// a compaction message as the engine writes it, and the history routes answer from archived.
type historyStub struct {
	*toolStub
	archived []compactclient.HistoryMessage
	err      error

	mu       sync.Mutex
	searches []compactclient.HistorySearch
	ranges   []compactclient.HistoryRange
	convs    []string
}

const stubCompaction = compaction.CompactionHeader + "\nEarlier messages were summarized.\n\n## Summary\nthe task\n\n" + compaction.HistoryReadBack + "\n"

func (s *historyStub) Compact(_ context.Context, _ string, history []compaction.Message, _ int) ([]compaction.Message, error) {
	return append([]compaction.Message{{Role: compaction.RoleUser, Content: stubCompaction}}, history[len(history)-1:]...), nil
}

func (s *historyStub) History(_ context.Context, conv string, r compactclient.HistoryRange) (*compactclient.HistoryResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ranges, s.convs = append(s.ranges, r), append(s.convs, conv)
	if s.err != nil {
		return nil, s.err
	}
	var out compactclient.HistoryResponse
	for _, m := range s.archived {
		if m.Index >= r.From && (r.To == 0 || m.Index < r.To) {
			out.Messages = append(out.Messages, m)
		}
	}
	return &out, nil
}

func (s *historyStub) SearchHistory(_ context.Context, conv string, q compactclient.HistorySearch) (*compactclient.HistoryResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.searches, s.convs = append(s.searches, q), append(s.convs, conv)
	if s.err != nil {
		return nil, s.err
	}
	var out compactclient.HistoryResponse
	for _, m := range s.archived {
		if strings.Contains(strings.ToLower(m.Message.Content), strings.ToLower(q.Text)) {
			out.Messages = append(out.Messages, m)
		}
	}
	return &out, nil
}

func newHistoryStub() *historyStub {
	return &historyStub{toolStub: newToolStub(10000), archived: []compactclient.HistoryMessage{
		{Index: 3, Role: compaction.RoleUser, Archive: "1-9", Message: compaction.Message{Role: compaction.RoleUser, Content: "never touch vendor/, the pinned lib is v1.4.2"}},
		{Index: 4, Role: compaction.RoleAssistant, Archive: "1-9", Message: compaction.Message{Role: compaction.RoleAssistant, Content: "Understood."}},
	}}
}

// The compaction message the upstream sees ends with the commands that search and read the
// archive through the proxy, and those commands answer with the archived messages.
func TestHistoryRoute(t *testing.T) {
	stub := newHistoryStub()
	srv, m := newToolProxy(t, stub)
	_, got := post(t, srv.URL+"/v1/chat/completions", toolTurn(map[string]string{"call_1": "ok"}, "call_1"))
	var req struct {
		Messages []chatMsg `json:"messages"`
	}
	if err := json.Unmarshal([]byte(got), &req); err != nil || len(req.Messages) == 0 {
		t.Fatalf("upstream body %q: %v", got, err)
	}
	first := req.Messages[0].Content
	search := srv.URL + HistorySearchPath + "?conversation="
	if strings.Contains(first, compaction.HistoryReadBack) || !strings.Contains(first, "curl -s '"+search) {
		t.Fatalf("the compaction message upstream does not end with the search command:\n%s", first)
	}
	// The command as the model would run it, with its words.
	i := strings.Index(first, search)
	conv := first[i+len(search):]
	conv = conv[:strings.IndexByte(conv, '&')]
	code, ctype, body := get(t, search+conv+"&q=VENDOR")
	var resp compactclient.HistoryResponse
	if code != http.StatusOK || ctype != "application/json" || json.Unmarshal([]byte(body), &resp) != nil ||
		len(resp.Messages) != 1 || resp.Messages[0].Index != 3 || !strings.Contains(resp.Messages[0].Message.Content, "v1.4.2") {
		t.Fatalf("search: %d %s %q", code, ctype, body)
	}
	code, _, body = get(t, srv.URL+HistoryPath+"?conversation="+conv+"&from=4&to=5&limit=10")
	if code != http.StatusOK || json.Unmarshal([]byte(body), &resp) != nil || len(resp.Messages) != 1 || resp.Messages[0].Index != 4 {
		t.Fatalf("range: %d %q", code, body)
	}
	if r := stub.ranges[0]; r != (compactclient.HistoryRange{From: 4, To: 5, Limit: 10}) || stub.convs[0] != conv || stub.convs[1] != conv {
		t.Errorf("the API was asked %+v in %v", r, stub.convs)
	}
	if _, _, _ = get(t, search+conv+"&q=a%2Bb&regex=1"); !stub.searches[1].Regex || stub.searches[1].Text != "a+b" {
		t.Errorf("regex search passed as %+v", stub.searches[1])
	}
	if n := value(m.HistoryReads.WithLabelValues("search", "ok")) + value(m.HistoryReads.WithLabelValues("history", "ok")); n != 3 {
		t.Errorf("%v history reads counted ok, want 3", n)
	}
}

// Bad requests are refused before the API is asked; the API's own 400 and 404 are passed on
// with their message, anything else is a 502.
func TestHistoryRouteErrors(t *testing.T) {
	stub := newHistoryStub()
	srv, m := newToolProxy(t, stub)
	for _, tc := range []struct {
		path string
		code int
	}{
		{HistorySearchPath + "?q=x", http.StatusBadRequest},
		{HistorySearchPath + "?conversation=../x&q=x", http.StatusBadRequest},
		{HistorySearchPath + "?conversation=c1", http.StatusBadRequest},
		{HistorySearchPath + "?conversation=c1&q=%20", http.StatusBadRequest},
		{HistoryPath + "?conversation=c1&from=-1", http.StatusBadRequest},
		{HistoryPath + "?conversation=c1&to=x", http.StatusBadRequest},
		{HistoryPath + "?conversation=c1&limit=1e3", http.StatusBadRequest},
	} {
		if code, _, body := get(t, srv.URL+tc.path); code != tc.code {
			t.Errorf("GET %s: %d %q, want %d", tc.path, code, body, tc.code)
		}
	}
	if len(stub.searches)+len(stub.ranges) != 0 {
		t.Errorf("the API was asked for bad requests: %v %v", stub.searches, stub.ranges)
	}
	if resp, err := http.Post(srv.URL+HistoryPath+"?conversation=c1", "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	for _, tc := range []struct {
		err  error
		code int
		text string
	}{
		{&compactclient.APIError{ErrorResponse: compactclient.ErrorResponse{Code: 400, Reason: "BadRequest", Message: "error parsing regexp: missing closing )"}}, http.StatusBadRequest, "missing closing )"},
		{&compactclient.APIError{ErrorResponse: compactclient.ErrorResponse{Code: 404, Reason: "NotFound", Message: "no session"}}, http.StatusNotFound, "no session"},
		{&compactclient.APIError{ErrorResponse: compactclient.ErrorResponse{Code: 500, Message: "boom"}}, http.StatusBadGateway, "boom"},
	} {
		stub.err = tc.err
		if code, _, body := get(t, srv.URL+HistorySearchPath+"?conversation=c1&q=(x&regex=1"); code != tc.code || !strings.Contains(body, tc.text) {
			t.Errorf("API error %v: %d %q, want %d naming %q", tc.err, code, body, tc.code, tc.text)
		}
	}
	if n := value(m.HistoryReads.WithLabelValues("search", "failed")); n != 1 {
		t.Errorf("%v failed searches counted, want 1", n)
	}
}

// Without the compaction API (a Compactor with no archive) the route is a 404 and the
// compaction message goes upstream as the engine wrote it; the rewrite is deterministic.
func TestHistoryRewrite(t *testing.T) {
	stub := newHistoryStub()
	p, err := New(Config{Upstream: echo(t), Compactor: stub, ReadBackURL: "http://127.0.0.1:4141/"})
	if err != nil {
		t.Fatal(err)
	}
	view := []compaction.Message{{Role: compaction.RoleUser, Content: stubCompaction}, {Role: compaction.RoleUser, Content: "u"}}
	a, b := p.withHistory("conv1", view), p.withHistory("conv1", view)
	want := strings.TrimSuffix(stubCompaction, compaction.HistoryReadBack+"\n") +
		"[the messages summarized here are archived: search them with: curl -s 'http://127.0.0.1:4141/compaction/v1/history/search?conversation=conv1&q=WORDS' " +
		"(WORDS URL-encoded, case-insensitive; &regex=1 for a pattern), or read a range with: curl -s 'http://127.0.0.1:4141/compaction/v1/history?conversation=conv1&from=N&to=M']\n"
	if a[0].Content != want || b[0].Content != a[0].Content {
		t.Errorf("rewritten compaction message\n%s\nwant\n%s", a[0].Content, want)
	}
	if view[0].Content != stubCompaction {
		t.Error("the rewrite changed its input")
	}
	// A user message that merely quotes the line is not the engine's.
	quoted := []compaction.Message{{Role: compaction.RoleUser, Content: "see " + compaction.HistoryReadBack + "\n"}}
	if out := p.withHistory("conv1", quoted); &out[0] != &quoted[0] {
		t.Error("a message that is not a compaction message was rewritten")
	}
	plain, err := New(Config{Upstream: echo(t), Compactor: stub.toolStub, ReadBackURL: "http://127.0.0.1:4141"})
	if err != nil {
		t.Fatal(err)
	}
	if out := plain.withHistory("conv1", view); &out[0] != &view[0] {
		t.Error("rewritten for a compactor without an archive")
	}
	srv, _ := newToolProxy(t, stub.toolStub)
	if code, _, body := get(t, srv.URL+HistorySearchPath+"?conversation=c1&q=x"); code != http.StatusNotFound || !strings.Contains(body, "no archive") {
		t.Errorf("without an archive: %d %q", code, body)
	}
}
