package compactclient

import (
	"encoding/json"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

func TestCompactResponseUsageMembers(t *testing.T) {
	var r CompactResponse
	body := `{"messages":[],"record":null,"watermark":3,"usage":0.44,"nextTier":"Soft","tokensToNextTier":1234}`
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if r.Usage != 0.44 || r.NextTier != compaction.TierSoft || r.TokensToNextTier != 1234 {
		t.Errorf("decoded usage %v next %s in %d, want 0.44 Soft 1234", r.Usage, r.NextTier, r.TokensToNextTier)
	}
	// A view in Emergency: no nextTier.
	r = CompactResponse{}
	if err := json.Unmarshal([]byte(`{"messages":[],"usage":0.96,"tokensToNextTier":0}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.NextTier != compaction.TierNone || r.Usage != 0.96 {
		t.Errorf("decoded usage %v next %s, want 0.96 and TierNone", r.Usage, r.NextTier)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		t.Fatal(err)
	}
	if _, ok := members["nextTier"]; ok {
		t.Errorf("%s: nextTier sent without a next tier", data)
	}
	if string(members["usage"]) != "0.96" || string(members["tokensToNextTier"]) != "0" {
		t.Errorf("%s: usage and tokensToNextTier must always be sent", data)
	}
}
