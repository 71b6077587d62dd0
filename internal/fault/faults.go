package fault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// ErrInjected is the error of every injected failure (wrapped, for a
// failure after apply, as "reply lost").
var ErrInjected = errors.New("fault: injected failure")

// Faults scripts the failures of one kind of call (uploads, table loads,
// commits). The zero value injects nothing; it is safe for concurrent use.
// Scripted failures (FailNext, FailAfterApplyNext) come first, then a stall,
// then random ones (FailRandomly, DelayRandomly).
type Faults struct {
	mu                  sync.Mutex
	failNext, afterNext int
	stall               chan struct{} // non-nil: calls block until it is closed
	rnd                 *rand.Rand
	before, after       float64 // random failure rates
	delayRate           float64
	delay               time.Duration
	calls, failed, lost int64
}

// FailNext makes the next n calls fail without being applied.
func (f *Faults) FailNext(n int) {
	f.mu.Lock()
	f.failNext = n
	f.mu.Unlock()
}

// FailAfterApplyNext makes the next n calls be applied (the object is
// written, the commit happens) and then report ErrInjected to the caller.
func (f *Faults) FailAfterApplyNext(n int) {
	f.mu.Lock()
	f.afterNext = n
	f.mu.Unlock()
}

// Stall makes calls block, before being applied, until release is called
// or their context ends (then they fail with the context's error).
func (f *Faults) Stall() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.stall = ch
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.stall == ch {
				f.stall = nil
			}
			f.mu.Unlock()
			close(ch)
		})
	}
}

// FailRandomly makes a fraction before of calls fail without being applied
// and a fraction after fail after being applied, drawn from rnd.
func (f *Faults) FailRandomly(rnd *rand.Rand, before, after float64) {
	f.mu.Lock()
	f.rnd, f.before, f.after = rnd, before, after
	f.mu.Unlock()
}

// DelayRandomly makes a fraction rate of calls wait d (or until their
// context ends) before going on, drawn from rnd.
func (f *Faults) DelayRandomly(rnd *rand.Rand, rate float64, d time.Duration) {
	f.mu.Lock()
	f.rnd, f.delayRate, f.delay = rnd, rate, d
	f.mu.Unlock()
}

// Heal stops every fault: scripted counts are cleared, rates set to zero,
// a stall released.
func (f *Faults) Heal() {
	f.mu.Lock()
	f.failNext, f.afterNext, f.before, f.after, f.delayRate = 0, 0, 0, 0, 0
	ch := f.stall
	f.stall = nil
	f.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// Counts returns the calls seen, those failed before being applied, and
// those failed after being applied (lost replies).
func (f *Faults) Counts() (calls, failed, lost int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.failed, f.lost
}

type verdict int

const (
	pass verdict = iota
	failBefore
	failAfter
)

// decide picks the fate of one call; it may ask the caller to wait first.
func (f *Faults) decide() (v verdict, stall <-chan struct{}, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	switch {
	case f.failNext > 0:
		f.failNext--
		return failBefore, nil, 0
	case f.afterNext > 0:
		f.afterNext--
		return failAfter, nil, 0
	}
	if f.stall != nil {
		return pass, f.stall, 0
	}
	if f.rnd == nil {
		return pass, nil, 0
	}
	if f.delayRate > 0 && f.rnd.Float64() < f.delayRate {
		delay = f.delay
	}
	switch r := f.rnd.Float64(); {
	case r < f.before:
		return failBefore, nil, delay
	case r < f.before+f.after:
		return failAfter, nil, delay
	}
	return pass, nil, delay
}

// Do runs apply under the script: it may wait, fail without calling apply,
// or call apply and then fail anyway.
func (f *Faults) Do(ctx context.Context, apply func() error) error {
	v, stall, delay := f.decide()
	if stall != nil {
		select {
		case <-stall:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if v == failBefore {
		f.count(&f.failed)
		return ErrInjected
	}
	if err := apply(); err != nil {
		return err
	}
	if v == failAfter {
		f.count(&f.lost)
		return fmt.Errorf("reply lost: %w", ErrInjected)
	}
	return nil
}

func (f *Faults) count(n *int64) {
	f.mu.Lock()
	*n++
	f.mu.Unlock()
}
