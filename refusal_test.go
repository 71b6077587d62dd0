package tributary

import (
	"errors"
	"fmt"
	"testing"
)

func TestReasonOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Reason
	}{
		{nil, ReasonNone},
		{errors.New("disk on fire"), ReasonNone},
		{fmt.Errorf("wal: append: %w", ErrBudget), ReasonBudget},
		{fmt.Errorf("replica: %w", ErrNotReplicated), ReasonReplication},
		{fmt.Errorf("a/1: %w", ErrFenced), ReasonFenced},
		{fmt.Errorf("acl: %w", ErrUnauthorized), ReasonUnauthorized},
		{fmt.Errorf("cloudwrite: not written: %w", ErrUnavailable), ReasonUnavailable},
	} {
		if got := ReasonOf(tc.err); got != tc.want {
			t.Errorf("ReasonOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	// A replication refusal is not a full disk: the two must never be
	// confused (MQTT 0x97 and the budget counters are for the budget only).
	if errors.Is(fmt.Errorf("x: %w", ErrNotReplicated), ErrBudget) {
		t.Fatal("replication refusal reads as budget")
	}
}

func TestParseStream(t *testing.T) {
	for _, s := range []string{"factory.telemetry", "a.b", "a_1.b-2"} {
		if _, _, err := ParseStream(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", "a", ".b", "a.", "a.b.c", "-a.b", "a b.c"} {
		if _, _, err := ParseStream(s); !errors.Is(err, ErrInvalidStream) {
			t.Errorf("%q: err %v, want ErrInvalidStream", s, err)
		}
	}
}
