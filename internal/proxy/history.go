package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// History is what a Compactor offers when the session keeps an archive of what its summaries
// replaced: the proxy serves it on its own listener (HistoryPath, HistorySearchPath), so a
// model whose agent can run a shell or fetch a URL recalls a detail the summary dropped.
type History interface {
	History(ctx context.Context, conversation string, r compactclient.HistoryRange) (*compactclient.HistoryResponse, error)
	SearchHistory(ctx context.Context, conversation string, s compactclient.HistorySearch) (*compactclient.HistoryResponse, error)
}

// Paths of the loopback history routes: GET HistoryPath?conversation=...&from=N&to=M and
// GET HistorySearchPath?conversation=...&q=TEXT[&regex=1]. Both answer the compaction API's
// JSON (compactclient.HistoryResponse).
const (
	HistoryPath       = "/compaction/v1/history"
	HistorySearchPath = "/compaction/v1/history/search"
)

// historyCommand is the last line of a compaction message the proxy forwards, in place of
// compaction.HistoryReadBack: the command that searches the conversation's archive.
func historyCommand(base, conv string) string {
	return fmt.Sprintf("[the messages summarized here are archived: search them with: curl -s '%s%s?conversation=%s&q=WORDS' "+
		"(WORDS URL-encoded, case-insensitive; &regex=1 for a pattern), or read a range with: curl -s '%s%s?conversation=%s&from=N&to=M']",
		base, HistorySearchPath, url.QueryEscape(conv), base, HistoryPath, url.QueryEscape(conv))
}

// withHistory returns view with the compaction message's last line replaced by the commands
// that reach the archive through the proxy. It depends only on the conversation and
// Config.ReadBackURL, so the bytes are the same on every turn. view itself is returned when
// nothing changes.
func (p *Proxy) withHistory(conv string, view []compaction.Message) []compaction.Message {
	if p.cfg.ReadBackURL == "" {
		return view
	}
	if _, ok := p.cfg.Compactor.(History); !ok {
		return view
	}
	const tail = "\n" + compaction.HistoryReadBack + "\n"
	for i := range view {
		m := &view[i]
		if m.Role != compaction.RoleUser || !strings.HasPrefix(m.Content, compaction.CompactionHeader) || !strings.HasSuffix(m.Content, tail) {
			continue
		}
		out := make([]compaction.Message, len(view))
		copy(out, view)
		out[i] = m.Clone()
		out[i].Content = strings.TrimSuffix(m.Content, tail) + "\n" + historyCommand(p.cfg.ReadBackURL, conv) + "\n"
		return out // a view opens with one compaction message at most
	}
	return view
}

// history serves the loopback history routes.
func (p *Proxy) history(w http.ResponseWriter, r *http.Request) {
	route := "history"
	if r.URL.Path == HistorySearchPath {
		route = "search"
	}
	fail := func(code int, result, msg string) {
		p.cfg.Metrics.historyRead(route, result)
		http.Error(w, "compaction-proxy: "+msg, code)
	}
	h, ok := p.cfg.Compactor.(History)
	if !ok {
		fail(http.StatusNotFound, "not_found", "no archive: this proxy compacts without the compaction API")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		fail(http.StatusMethodNotAllowed, "bad_request", "method not allowed")
		return
	}
	q := r.URL.Query()
	conv := q.Get(compactclient.ConversationParam)
	if !validConversation(conv) {
		fail(http.StatusBadRequest, "bad_request", "the conversation parameter must be 1 to 64 letters, digits, '-', '_' or '.'")
		return
	}
	var bounds [3]int
	for i, name := range []string{"from", "to", "limit"} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fail(http.StatusBadRequest, "bad_request", fmt.Sprintf("%s must be a whole number of at least 0, not %q", name, v))
			return
		}
		bounds[i] = n
	}
	var (
		resp *compactclient.HistoryResponse
		err  error
	)
	if route == "search" {
		text := q.Get("q")
		if strings.TrimSpace(text) == "" {
			fail(http.StatusBadRequest, "bad_request", "q, the text to search for, is required")
			return
		}
		resp, err = h.SearchHistory(r.Context(), conv, compactclient.HistorySearch{
			Text: text, Regex: q.Get("regex") == "1", From: bounds[0], To: bounds[1], Limit: bounds[2],
		})
	} else {
		resp, err = h.History(r.Context(), conv, compactclient.HistoryRange{From: bounds[0], To: bounds[1], Limit: bounds[2]})
	}
	if err != nil {
		var ae *compactclient.APIError
		switch {
		case errors.As(err, &ae) && (ae.Code == http.StatusBadRequest || ae.Code == http.StatusNotFound):
			fail(ae.Code, map[int]string{http.StatusBadRequest: "bad_request", http.StatusNotFound: "not_found"}[ae.Code], ae.Message)
		default:
			fail(http.StatusBadGateway, "failed", "history: "+err.Error())
		}
		return
	}
	body, err := json.Marshal(resp)
	if err != nil {
		fail(http.StatusInternalServerError, "failed", "encode: "+err.Error())
		return
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	p.cfg.Metrics.historyRead(route, "ok")
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
