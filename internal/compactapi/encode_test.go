package compactapi

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// TestWriteCompactResponseAsWriteJSON: the answer of a compaction is byte for byte what
// writeJSON writes for it, headers included.
func TestWriteCompactResponseAsWriteJSON(t *testing.T) {
	odd := "<b> & \u2028 \"q\" \\ \n\t\x01 \xff é"
	var parts compaction.Message
	if err := json.Unmarshal([]byte(`{"role":"user","content":[ {"type":"text","text":"<i>"} ],"x-extra" : { "a" : [1, 2] }}`), &parts); err != nil {
		t.Fatal(err)
	}
	rec := &compaction.CompactionRecord{ID: "r1", SessionID: "s", Tier: compaction.TierFull, SummaryText: odd,
		Anchors: []compaction.Anchor{{Type: compaction.AnchorUserIntent, Content: odd}}, WatermarkAfter: 3, PrefixHash: "h"}
	for _, resp := range []compactclient.CompactResponse{
		{},
		{Messages: []compaction.Message{}, Record: rec},
		{Messages: []compaction.Message{
			{Role: compaction.RoleSystem, Content: odd},
			parts,
			{Role: compaction.RoleAssistant, ToolCalls: []compaction.ToolCall{{ID: "c1", Function: compaction.FunctionCall{Name: "bash", Arguments: `{"cmd":"a && b"}`}}}},
			{Role: compaction.RoleTool, ToolCallID: "c1", Content: "out", Extra: map[string]json.RawMessage{"role": json.RawMessage(`"x"`), "z": json.RawMessage(` null `)}},
		}, Record: rec, Watermark: 3, PrefixHash: "h", Usage: 0.42, NextTier: compaction.TierSoft, TokensToNextTier: 120},
	} {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSON(want, 200, resp)
		writeCompactResponse(got, resp)
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) || got.Code != want.Code {
			t.Fatalf("got %d %s\nwant %d %s", got.Code, got.Body, want.Code, want.Body)
		}
		for k := range want.Header() {
			if got.Header().Get(k) != want.Header().Get(k) {
				t.Errorf("header %s: %q, want %q", k, got.Header().Get(k), want.Header().Get(k))
			}
		}
		if _, ok := encodeCompactResponse(resp); !ok {
			t.Errorf("response with %d messages not encoded directly", len(resp.Messages))
		}
	}
}
