package compactapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
)

// TestCompactResponseUsageFromRecord: usage, nextTier and tokensToNextTier are the record's
// UsageAfter, NextTier and TokensToNextTier, under those JSON names.
func TestCompactResponseUsageFromRecord(t *testing.T) {
	cfg := compaction.DefaultConfig(100000)
	for _, tc := range []struct {
		name string
		rec  compaction.CompactionRecord
		want string // the three members as JSON
	}{
		{"calibrated", compaction.CompactionRecord{Tier: compaction.TierFull, TokensBefore: 81000, TokensAfter: 40000,
			Calibration: 1.1, UsageBefore: 0.891, UsageAfter: 0.44, NextTier: compaction.TierWarn, TokensToNextTier: 16000},
			`"usage":0.44,"nextTier":"Warn","tokensToNextTier":16000`},
		{"none", compaction.CompactionRecord{Tier: compaction.TierNone, TokensBefore: 65000, TokensAfter: 65000,
			Calibration: 1, UsageBefore: 0.65, UsageAfter: 0.65, NextTier: compaction.TierSoft, TokensToNextTier: 5000},
			`"usage":0.65,"nextTier":"Soft","tokensToNextTier":5000`},
		// In Emergency there is no next tier: nextTier is left out.
		{"emergency", compaction.CompactionRecord{Tier: compaction.TierEmergency, TokensBefore: 99000, TokensAfter: 96000,
			Calibration: 1, UsageBefore: 0.99, UsageAfter: 0.96},
			`"usage":0.96,"tokensToNextTier":0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			resp := compactResponse(cfg, nil, &rec)
			if resp.Usage != rec.UsageAfter || resp.NextTier != rec.NextTier || resp.TokensToNextTier != rec.TokensToNextTier {
				t.Errorf("response usage %v next %s in %d, want the record's %v %s %d",
					resp.Usage, resp.NextTier, resp.TokensToNextTier, rec.UsageAfter, rec.NextTier, rec.TokensToNextTier)
			}
			data, err := json.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tc.want) {
				t.Errorf("response JSON %s lacks %s", data, tc.want)
			}
			if tc.rec.NextTier == compaction.TierNone && strings.Contains(string(data), `"nextTier"`) {
				t.Errorf("response JSON %s has a nextTier in Emergency", data)
			}
		})
	}
}

// TestCompactResponseUsageWithoutEngineFields: a record without calibration fields (an
// engine that does not fill them) gets them from its token estimates, uncalibrated.
func TestCompactResponseUsageWithoutEngineFields(t *testing.T) {
	cfg := compaction.DefaultConfig(100000)
	rec := &compaction.CompactionRecord{Tier: compaction.TierSoft, TokensBefore: 72000, TokensAfter: 45000}
	resp := compactResponse(cfg, nil, rec)
	if resp.Usage != 0.45 || resp.NextTier != compaction.TierWarn || resp.TokensToNextTier != 15000 {
		t.Errorf("usage %v next %s in %d, want 0.45 Warn 15000", resp.Usage, resp.NextTier, resp.TokensToNextTier)
	}
	if u := usageOf(cfg, rec); u.before != 0.72 {
		t.Errorf("usage before %v, want 0.72", u.before)
	}
	rec = &compaction.CompactionRecord{Tier: compaction.TierEmergency, TokensBefore: 99000, TokensAfter: 97000}
	if resp := compactResponse(cfg, nil, rec); resp.NextTier != compaction.TierNone || resp.TokensToNextTier != 0 || resp.Usage != 0.97 {
		t.Errorf("emergency view: usage %v next %s in %d, want 0.97, none, 0", resp.Usage, resp.NextTier, resp.TokensToNextTier)
	}
}

// TestCompactResponseUsage runs compactions through the handler (on MinIO) and reads the
// new members from the wire. Until the engine fills the record's calibration fields the
// values are the uncalibrated ones computed from the record's estimates; after, they must
// be the record's.
func TestCompactResponseUsage(t *testing.T) {
	spec := builder.DefaultedSpec(128000)
	spec.ContextWindow = 4096
	s, sess := pinTestServer(t, spec)
	for _, tc := range []struct {
		name  string
		turns int
		force bool
	}{
		{"small-history", 1, false},
		{"large-history", 16, false},
		{"forced", 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := *sess
			other.id = "uid-" + tc.name
			history := toolHistory(tc.turns)
			w, err := postCompact(t, s, &other, map[string]any{"messages": history, "force": tc.force})
			if err != nil || w.Code != http.StatusOK {
				t.Fatalf("compact: %v %d %s", err, w.Code, w.Body)
			}
			var members map[string]json.RawMessage
			if err := json.Unmarshal(w.Body.Bytes(), &members); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"usage", "tokensToNextTier"} {
				if _, ok := members[k]; !ok {
					t.Errorf("response has no %q member", k)
				}
			}
			var resp compactclient.CompactResponse
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			rec := resp.Record
			t.Logf("tier %s tokens %d->%d usage %v next %s in %d (calibration %v)", rec.Tier, rec.TokensBefore, rec.TokensAfter,
				resp.Usage, resp.NextTier, resp.TokensToNextTier, rec.Calibration)
			if rec.Calibration != 0 { // the engine fills the record's fields
				if resp.Usage != rec.UsageAfter || resp.NextTier != rec.NextTier || resp.TokensToNextTier != rec.TokensToNextTier {
					t.Errorf("response usage %v next %s in %d, want the record's %v %s %d",
						resp.Usage, resp.NextTier, resp.TokensToNextTier, rec.UsageAfter, rec.NextTier, rec.TokensToNextTier)
				}
			} else {
				next, toNext := sess.cfg.NextTier(rec.TokensAfter)
				if want := sess.cfg.Usage(rec.TokensAfter); math.Abs(resp.Usage-want) > 1e-9 || resp.NextTier != next || resp.TokensToNextTier != toNext {
					t.Errorf("response usage %v next %s in %d, want %v %s %d from the record's %d tokens",
						resp.Usage, resp.NextTier, resp.TokensToNextTier, want, next, toNext, rec.TokensAfter)
				}
			}
			if resp.Usage <= 0 {
				t.Errorf("usage %v, want a positive ratio", resp.Usage)
			}
			if resp.NextTier != compaction.TierNone && resp.TokensToNextTier <= 0 {
				t.Errorf("next tier %s in %d tokens, want a positive headroom", resp.NextTier, resp.TokensToNextTier)
			}
		})
	}
}

// toolHistory: system, a task, then turns of a tool call and its result.
func toolHistory(turns int) []map[string]any {
	msgs := make([]map[string]any, 0, 2+2*turns)
	msgs = append(msgs,
		map[string]any{"role": "system", "content": "You are a coding agent."},
		map[string]any{"role": "user", "content": "Fix the failing test in pkg/parse."},
	)
	for i := range turns {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": fmt.Sprintf("Step %d: reading a file.", i), "tool_calls": []map[string]any{
				{"id": id, "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"cmd": "cat f.go"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": strings.Repeat(fmt.Sprintf("line %d of the output\n", i), 40)},
		)
	}
	return msgs
}

// TestCompactResponseHookThreshold: the answer says the policy's hook threshold, so a client
// (compaction-proxy) sends the toolresults route only the results it would offload.
func TestCompactResponseHookThreshold(t *testing.T) {
	cfg := compaction.DefaultConfig(100000)
	cfg.HookThreshold = 12345
	data, err := json.Marshal(compactResponse(cfg, nil, &compaction.CompactionRecord{Tier: compaction.TierNone}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"hookThreshold":12345`) {
		t.Errorf("response JSON %s lacks the hook threshold", data)
	}
}

// TestCompactResponseOmitEcho: with omitEcho, the answer leaves out the messages at the end
// of the view that end the request, and says how many (echoed); the messages it has followed
// by those are the view a request without omitEcho gets. A turn before the first summary
// echoes the whole history, a delta turn after one what followed the watermark; a message
// the view changed (a pin mark stripped, a result offloaded) ends the echo.
func TestCompactResponseOmitEcho(t *testing.T) {
	spec := builder.DefaultedSpec(128000)
	spec.ContextWindow = 4096
	spec.Pins = compactionv1alpha1.PinsSpec{Rule: compactionv1alpha1.PinMarked, BudgetPercent: 5}
	s, sess := pinTestServer(t, spec)
	pinned := toolHistory(1)
	pinned[1]["pinned"] = true
	// compact sends body to a fresh conversation, with omitEcho or not, and returns the
	// answer and the view it stands for.
	compact := func(t *testing.T, id string, body map[string]any, omit bool) (compactclient.CompactResponse, []compaction.Message) {
		t.Helper()
		other := *sess
		other.id = id
		body["omitEcho"] = omit
		w, err := postCompact(t, s, &other, body)
		if err != nil || w.Code != http.StatusOK {
			t.Fatalf("compact: %v %d %s", err, w.Code, w.Body)
		}
		var resp compactclient.CompactResponse
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		if !omit && strings.Contains(w.Body.String(), `"echoed"`) {
			t.Errorf("an answer without omitEcho has an echoed member: %s", w.Body)
		}
		data, err := json.Marshal(body["messages"])
		if err != nil {
			t.Fatal(err)
		}
		var sent []compaction.Message
		if err := json.Unmarshal(data, &sent); err != nil {
			t.Fatal(err)
		}
		return resp, append(resp.Messages, sent[len(sent)-resp.Echoed:]...)
	}
	for _, tc := range []struct {
		name      string
		history   []map[string]any
		force     bool
		allEchoed bool
	}{
		{"small", toolHistory(1), false, true},
		{"pinned", pinned, false, false},
		{"large", toolHistory(16), false, false},
		{"forced", toolHistory(10), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := func() map[string]any { return map[string]any{"messages": tc.history, "force": tc.force} }
			plain, want := compact(t, "uid-plain-"+tc.name, body(), false)
			resp, got := compact(t, "uid-echo-"+tc.name, body(), true)
			if !compaction.EqualMessages(got, want) {
				t.Fatalf("view with omitEcho (%d messages and %d echoed) differs from the view without (%d)", len(resp.Messages), resp.Echoed, len(want))
			}
			t.Logf("tier %s: %d messages, %d echoed", plain.Record.Tier, len(resp.Messages), resp.Echoed)
			if tc.allEchoed && (len(resp.Messages) != 0 || resp.Echoed != len(tc.history)) {
				t.Errorf("%d messages and %d echoed, want none and all %d", len(resp.Messages), resp.Echoed, len(tc.history))
			}
			if !tc.allEchoed && len(resp.Messages) == 0 {
				t.Errorf("a view that differs from the request was all echoed")
			}
		})
	}
	t.Run("delta", func(t *testing.T) {
		history := toolHistory(16)
		first, _ := compact(t, "uid-delta", map[string]any{"messages": history}, true)
		if first.Watermark == 0 {
			t.Fatalf("no watermark after %s", first.Record.Tier)
		}
		next := append(append([]map[string]any{history[0]}, history[first.Watermark:]...),
			map[string]any{"role": "user", "content": "Go on."}, map[string]any{"role": "assistant", "content": "On it."})
		body := func() map[string]any {
			return map[string]any{"messages": next, "watermark": first.Watermark, "prefixHash": first.PrefixHash}
		}
		resp, got := compact(t, "uid-delta", body(), true)
		if resp.Record.Tier != compaction.TierNone || resp.Echoed != len(next)-1 {
			t.Fatalf("delta turn: tier %s, %d echoed; want None and all %d after the system message", resp.Record.Tier, resp.Echoed, len(next)-1)
		}
		_, want := compact(t, "uid-delta", body(), false)
		if !compaction.EqualMessages(got, want) {
			t.Fatal("the delta view with omitEcho differs from the view without")
		}
	})
}
