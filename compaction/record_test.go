package compaction

import "testing"

func TestChangedView(t *testing.T) {
	for _, tc := range []struct {
		rec  CompactionRecord
		want bool
	}{
		{CompactionRecord{Tier: TierNone, TokensBefore: 10, TokensAfter: 10, MsgsBefore: 3, MsgsAfter: 3}, false},
		{CompactionRecord{Tier: TierWarn, TokensBefore: 10, TokensAfter: 10, MsgsBefore: 3, MsgsAfter: 3}, false},
		{CompactionRecord{Tier: TierWarn, TokensBefore: 10, TokensAfter: 6, MsgsBefore: 3, MsgsAfter: 3, Offloaded: []OffloadEntry{{ToolCallID: "c"}}}, true},
		{CompactionRecord{Tier: TierSoft, TokensBefore: 10, TokensAfter: 10, MsgsBefore: 3, MsgsAfter: 3, Summarized: 2}, true},
		{CompactionRecord{Tier: TierEmergency, TokensBefore: 10, TokensAfter: 9, MsgsBefore: 3, MsgsAfter: 3}, true},
		{CompactionRecord{Tier: TierFull, TokensBefore: 10, TokensAfter: 10, MsgsBefore: 3, MsgsAfter: 2}, true},
	} {
		if got := tc.rec.ChangedView(); got != tc.want {
			t.Errorf("%s %+v: changed %v, want %v", tc.rec.Tier, tc.rec, got, tc.want)
		}
	}
}
