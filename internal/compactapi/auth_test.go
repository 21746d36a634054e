package compactapi

import (
	"testing"
	"time"
)

func TestHoldDenial(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name             string
		prevOK           bool
		prevExpires      time.Time
		prevDeniedSince  time.Time
		hold             bool
		wantSinceIsNow   bool
		wantSinceIsPrior bool
	}{
		{name: "no earlier yes", prevOK: false, prevExpires: now, hold: false},
		{name: "first no after a yes", prevOK: true, prevExpires: now.Add(-time.Second), hold: true, wantSinceIsNow: true},
		{name: "no for a while, under the window", prevOK: true, prevExpires: now, prevDeniedSince: now.Add(-confirmDenial / 2), hold: true, wantSinceIsPrior: true},
		{name: "no for the whole window", prevOK: true, prevExpires: now, prevDeniedSince: now.Add(-confirmDenial), hold: false, wantSinceIsPrior: true},
		{name: "the yes is too old", prevOK: true, prevExpires: now.Add(-staleGrace - time.Second), hold: false},
	}
	for _, tc := range cases {
		hold, since := holdDenial(tc.prevOK, tc.prevExpires, tc.prevDeniedSince, now)
		if hold != tc.hold {
			t.Errorf("%s: hold = %v, want %v", tc.name, hold, tc.hold)
		}
		if tc.wantSinceIsNow && !since.Equal(now) {
			t.Errorf("%s: denials since %v, want now", tc.name, since)
		}
		if tc.wantSinceIsPrior && !since.Equal(tc.prevDeniedSince) {
			t.Errorf("%s: denials since %v, want the earlier %v", tc.name, since, tc.prevDeniedSince)
		}
	}
}
