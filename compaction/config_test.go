package compaction

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestDetermineTierBoundaries(t *testing.T) {
	c := DefaultConfig(1000)
	cases := []struct {
		tokens int
		want   Tier
	}{{0, TierNone}, {599, TierNone}, {600, TierWarn}, {699, TierWarn}, {700, TierSoft}, {799, TierSoft}, {800, TierFull}, {949, TierFull}, {950, TierEmergency}, {5000, TierEmergency}}
	for _, tc := range cases {
		if got := c.DetermineTier(tc.tokens); got != tc.want {
			t.Errorf("DetermineTier(%d) = %s, want %s", tc.tokens, got, tc.want)
		}
	}
	if DefaultConfig(0).DetermineTier(1e9) != TierNone {
		t.Error("a zero window must disable compaction")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig(100).Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig(100)
	c.SoftThreshold = 0.5 // below warn
	c.EmergencyThreshold = 1.5
	c.MinTailMessages = -1
	err := c.Validate()
	for _, want := range []string{"soft threshold 0.50 must be above warn", "emergency threshold 1.50 must be in (0, 1]", "min tail messages"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	if _, err := NewProgressiveCompactor(c); err == nil {
		t.Error("NewProgressiveCompactor accepted an invalid config")
	}
}

// Every problem Validate reports names the Config field at fault, so a caller can name its
// own setting for it (the CLI its flag) without repeating the rule.
func TestConfigValidateNamesTheField(t *testing.T) {
	c := DefaultConfig(100)
	c.SoftThreshold = 0.5 // below warn
	c.EmergencyThreshold = 1.5
	c.MinTailMessages = -1
	c.PinRule = "Everything"
	joined, ok := c.Validate().(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Validate returned %T, want an errors.Join", c.Validate())
	}
	errs := joined.Unwrap()
	fields := make([]string, 0, len(errs))
	for _, err := range errs {
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("%v is a %T, want a *FieldError", err, err)
		}
		fields = append(fields, fe.Field)
	}
	if want := []string{"SoftThreshold", "EmergencyThreshold", "MinTailMessages", "PinRule"}; !slices.Equal(fields, want) {
		t.Errorf("fields %v, want %v", fields, want)
	}
}

func TestTierText(t *testing.T) {
	for tier := TierNone; tier <= TierEmergency; tier++ {
		b, err := tier.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Tier
		if err := back.UnmarshalText(b); err != nil || back != tier {
			t.Fatalf("%s: round trip gave %s, %v", tier, back, err)
		}
	}
	if _, err := parseTier("Huge"); err == nil {
		t.Error("unknown tier accepted")
	}
}
