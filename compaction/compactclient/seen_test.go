package compactclient

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// A Session sends a seen delta after an answer that gave a seen history, and puts the view
// back together from its own history; it sends the full history instead when its history no
// longer holds the seen one (the last seen message changed, a pin mark added before it),
// when the server refuses the seen delta (409), and for good once a server older than the
// field refuses it (400). An answer that claims more seen messages than were sent is an
// error and teaches the Session nothing.
func TestSessionSeenDelta(t *testing.T) {
	var got []CompactRequest
	mode := "current" // "old": refuses seen; "stale": 409 on seen; "bogus": claims 99 seen
	s := sessionOn(t, func(w http.ResponseWriter, r *http.Request) {
		var raw map[string]json.RawMessage
		var req CompactRequest
		if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
			t.Error(err)
		}
		data, _ := json.Marshal(raw)
		if err := json.Unmarshal(data, &req); err != nil {
			t.Error(err)
		}
		got = append(got, req)
		w.Header().Set("Content-Type", "application/json")
		_, seen := raw["seen"]
		switch {
		case seen && mode == "old":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":400,"reason":"BadRequest","message":"malformed JSON body: json: unknown field \"seen\""}`))
			return
		case seen && mode == "stale":
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"code":409,"reason":"StaleWatermark","message":"stale watermark: the turn enters Warn"}`))
			return
		}
		// The view is what was sent, all echoed; the seen history grows by what was sent
		// after the system message.
		total := len(req.Messages)
		if req.Seen > 0 {
			total = req.Seen + len(req.Messages) - 1
		}
		if mode == "bogus" {
			total = 99
		}
		_, _ = w.Write([]byte(`{"messages":[],"echoed":` + strconv.Itoa(len(req.Messages)-min(req.Seen, 1)) +
			`,"record":{},"watermark":0,"seen":` + strconv.Itoa(total) + `,"seenHash":"h` + strconv.Itoa(total) + `"}`))
	})
	ctx := context.Background()
	history := []compaction.Message{{Role: compaction.RoleSystem, Content: "s"}, {Role: compaction.RoleUser, Content: "task"}}
	turn := func(want string) {
		t.Helper()
		history = append(history, compaction.Message{Role: compaction.RoleAssistant, Content: "step " + strconv.Itoa(len(history))})
		n := len(got)
		resp, err := s.Compact(ctx, history, 0)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if !compaction.EqualMessages(resp.Messages, history) {
			t.Fatalf("%s: view of %d messages, want the history's %d", want, len(resp.Messages), len(history))
		}
		last := got[len(got)-1]
		switch want {
		case "seen":
			if len(got) != n+1 || last.Seen != len(history)-1 || last.PrefixHash != "h"+strconv.Itoa(len(history)-1) || len(last.Messages) != 2 {
				t.Fatalf("want one seen delta of the system message and the new one, got %d requests, the last %+v", len(got)-n, last)
			}
		case "full":
			if last.Seen != 0 || len(last.Messages) != len(history) {
				t.Fatalf("want the full history last, got seen %d and %d messages", last.Seen, len(last.Messages))
			}
		}
	}
	turn("full")
	turn("seen")
	turn("seen")
	history[len(history)-1].Content = "rewritten" // the last seen message changed
	turn("full")
	turn("seen")
	history[1].Pinned = true // a pin mark the server would take off
	turn("full")
	history[1].Pinned = false
	turn("seen")
	mode = "stale"
	turn("full") // the seen delta, refused, then the full history
	if len(got) < 2 || got[len(got)-2].Seen == 0 {
		t.Fatalf("a refused seen delta was not sent first")
	}
	mode = "old"
	turn("full")
	mode = "current"
	turn("full") // an older server refused the field: never again
	if s.noSeen != true {
		t.Fatal("a refusal of seen did not stop the Session sending it")
	}

	s = &Session{Client: s.Client, Namespace: "ns", Name: "agent"}
	mode = "bogus"
	if _, err := s.Compact(ctx, history, 0); err == nil || s.seen != 0 {
		t.Fatalf("an answer that saw 99 of %d messages: %v, seen %d; want an error and nothing learnt", len(history), err, s.seen)
	}
}
