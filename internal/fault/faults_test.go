package fault

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestFaults: each script decides whether apply runs and what the caller
// sees.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  func(f *Faults)
		applied []bool // per call: did apply run
		failed  []bool // per call: did the caller get an error
	}{
		{"nothing", func(*Faults) {}, []bool{true, true}, []bool{false, false}},
		{"fail next 2", func(f *Faults) { f.FailNext(2) }, []bool{false, false, true}, []bool{true, true, false}},
		{"fail after apply", func(f *Faults) { f.FailAfterApplyNext(1) }, []bool{true, true}, []bool{true, false}},
		{"healed", func(f *Faults) { f.FailNext(5); f.Heal() }, []bool{true}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f Faults
			tc.script(&f)
			for i := range tc.applied {
				ran := false
				err := f.Do(context.Background(), func() error { ran = true; return nil })
				if ran != tc.applied[i] || (err != nil) != tc.failed[i] {
					t.Fatalf("call %d: applied %v, err %v; want applied %v, failed %v", i, ran, err, tc.applied[i], tc.failed[i])
				}
				if err != nil && !errors.Is(err, ErrInjected) {
					t.Fatalf("call %d: %v is not ErrInjected", i, err)
				}
			}
		})
	}
}

func TestFaultsStall(t *testing.T) {
	var f Faults
	release := f.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.Do(ctx, func() error { t.Fatal("applied while stalled"); return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stalled call: %v", err)
	}
	done := make(chan error)
	go func() { done <- f.Do(context.Background(), func() error { return nil }) }()
	select {
	case err := <-done:
		t.Fatalf("returned before release: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	release() // twice is harmless
}
