package subscription

import (
	"context"
	"time"
)

// The dispatch loop of one subscription.
//
// Invariants: only this goroutine reads the Source for the subscription and
// calls Consumer callbacks; it never holds s.mu while doing either. A read
// begun before a Seek (s.epoch changed meanwhile) is thrown away. Entries go
// out only against permits: a consumer never holds more undelivered grants
// than it asked for.
//
// Each pass first (re)delivers the replay set in offset order, then reads
// new entries from readPos, at most min(permits, readBatch) of them. When
// the subscription has caught up, End is polled at most every pollInterval
// while some consumer has permits; without permits the loop sleeps until
// Flow, Ack, Redeliver, Seek or a consumer change wakes it.
const (
	readBatch      = 500                   // entries per Source.Read
	roundRobinTurn = 20                    // Shared: entries per consumer turn (the broker's dispatcherMaxRoundRobinBatchSize)
	maxReplay      = 10000                 // no new reads while this many offsets wait for redelivery
	pollInterval   = 50 * time.Millisecond // tailing: how often End is asked while idle
	retryBackoff   = 200 * time.Millisecond
)

func (s *Subscription) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.flushOutbox()
		progress, wait, err := s.pass(ctx)
		s.flushOutbox()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.m.log.Warn("pulsar: dispatch", "topic", s.key.topic, "subscription", s.key.sub, "err", err)
			wait = retryBackoff
		} else if progress {
			continue
		}
		s.mu.Lock()
		s.idle = len(s.wake) == 0 && len(s.outbox) == 0
		s.mu.Unlock()
		var tc <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tc:
		}
		if tc != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// flushOutbox makes the queued callbacks.
func (s *Subscription) flushOutbox() {
	s.mu.Lock()
	out := s.outbox
	s.outbox = nil
	s.mu.Unlock()
	for _, n := range out {
		if n.ds != nil {
			n.c.Deliver(n.ds)
		} else {
			n.c.ActiveChanged(n.active)
		}
	}
}

// pass does one round of dispatch. progress: something was delivered or
// read, go again at once; otherwise wait (0 = until woken) before the next.
func (s *Subscription) pass(ctx context.Context) (progress bool, wait time.Duration, err error) {
	s.mu.Lock()
	if s.closed || !s.hasPermits() {
		s.mu.Unlock()
		return false, 0, nil
	}
	epoch := s.epoch

	// Replay set first, in offset order.
	if s.replay.Len() > 0 {
		offs := make([]int64, 0, min(s.replay.Len(), readBatch))
		for off := range s.replay.All() { // in offset order
			if len(offs) == readBatch {
				break
			}
			offs = append(offs, off)
		}
		var missing []int64
		for _, off := range offs {
			if !s.held.Has(off) {
				missing = append(missing, off)
			}
		}
		s.mu.Unlock()
		got, err := s.readOffsets(ctx, missing)
		s.mu.Lock()
		if err != nil || s.epoch != epoch || s.closed {
			s.mu.Unlock()
			return false, 0, err
		}
		entries := make([]Entry, 0, len(offs))
		for _, off := range offs {
			if !s.replay.Has(off) {
				continue
			}
			e, ok := s.held.Get(off)
			if !ok {
				if e, ok = got[off]; !ok {
					// Not in the source (any more): nothing to deliver.
					s.replay.Delete(off)
					s.redeliveries.Delete(off)
					continue
				}
			}
			entries = append(entries, e)
		}
		if s.assign(entries, map[int32]bool{}) > 0 {
			s.mu.Unlock()
			return true, 0, nil
		}
		if s.replay.Len() >= maxReplay || !s.hasPermits() {
			s.mu.Unlock()
			return false, 0, nil
		}
	}

	// New entries.
	if s.readPos >= s.knownEnd {
		if since := time.Since(s.lastEnd); since < pollInterval {
			s.mu.Unlock()
			return false, pollInterval - since, nil
		}
		s.mu.Unlock()
		end, err := s.src.End(ctx)
		s.mu.Lock()
		s.lastEnd = time.Now()
		if err != nil || s.epoch != epoch {
			s.mu.Unlock()
			return false, 0, err
		}
		s.knownEnd = end
		if s.readPos >= end {
			s.mu.Unlock()
			return false, pollInterval, nil
		}
	}
	from, n := s.readPos, int(min(s.permits(), readBatch))
	s.mu.Unlock()
	entries, err := s.src.Read(ctx, from, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || s.epoch != epoch || s.closed || s.readPos != from {
		return false, 0, err
	}
	if len(entries) == 0 {
		// End promised more than Read has: ask End again later.
		s.knownEnd = from
		return false, pollInterval, nil
	}
	s.readPos = entries[len(entries)-1].Offset + 1
	s.knownEnd = max(s.knownEnd, s.readPos)
	fresh := entries[:0:0]
	for _, e := range entries {
		if !s.cur.acked(e.Offset) {
			fresh = append(fresh, e)
		}
	}
	// Every offset still waiting for redelivery is older than these: its
	// slot blocks them (Key_Shared order).
	blocked := map[int32]bool{}
	if s.typ == KeyShared {
		for _, slot := range s.replay.All() {
			blocked[slot] = true
		}
	}
	s.assign(fresh, blocked)
	return true, 0, nil
}

// readOffsets reads the given sorted offsets, one Read per contiguous run.
func (s *Subscription) readOffsets(ctx context.Context, offs []int64) (map[int64]Entry, error) {
	got := map[int64]Entry{}
	for i := 0; i < len(offs); {
		j := i + 1
		for j < len(offs) && offs[j] == offs[j-1]+1 {
			j++
		}
		es, err := s.src.Read(ctx, offs[i], j-i)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if e.Offset <= offs[j-1] {
				got[e.Offset] = e
			}
		}
		i = j
	}
	return got, nil
}

// hasPermits reports whether any consumer that may receive has permits.
func (s *Subscription) hasPermits() bool { return s.permits() > 0 }

// permits is the total that the type's eligible consumers may receive.
func (s *Subscription) permits() int64 {
	switch s.typ {
	case Exclusive, Failover:
		if s.active == nil {
			return 0
		}
		return s.active.room(s.m)
	}
	var n int64
	for _, cs := range s.consumers {
		n += cs.room(s.m)
	}
	return n
}

// assign hands entries (in offset order) to consumers by the type's rule;
// what cannot go out now joins the replay set. Key_Shared: entries of a
// blocked slot are held, and a held entry blocks its slot for the rest.
// It returns how many went out.
func (s *Subscription) assign(entries []Entry, blocked map[int32]bool) int {
	if len(entries) == 0 {
		return 0
	}
	batches := map[*consumerState][]Delivery{}
	var order []*consumerState
	give := func(cs *consumerState, e Entry, slot int32) {
		if _, ok := batches[cs]; !ok {
			order = append(order, cs)
		}
		n, _ := s.redeliveries.Get(e.Offset)
		batches[cs] = append(batches[cs], Delivery{Entry: e, RedeliveryCount: n})
		cs.permits--
		cs.pending.Put(e.Offset, slot)
		s.owner.Put(e.Offset, cs)
		s.replay.Delete(e.Offset)
		s.unhold(e.Offset)
	}
	hold := func(e Entry, slot int32) {
		s.replay.Put(e.Offset, slot)
		s.hold(e)
	}
	sent := 0
	switch s.typ {
	case Exclusive, Failover:
		for _, e := range entries {
			if cs := s.active; cs != nil && cs.room(s.m) > 0 {
				give(cs, e, 0)
				sent++
			} else {
				hold(e, 0)
			}
		}
	case Shared:
		var cur *consumerState
		turn := 0
		for _, e := range entries {
			if cur == nil || cur.room(s.m) <= 0 || turn >= roundRobinTurn {
				cur, turn = s.nextShared(), 0
			}
			if cur == nil {
				hold(e, 0)
				continue
			}
			give(cur, e, 0)
			turn++
			sent++
		}
	case KeyShared:
		for _, e := range entries {
			slot := keySlot(e.Record.Key)
			if blocked[slot] {
				hold(e, slot)
				continue
			}
			cs := s.sel.pick(slot)
			h := s.slotHolder[slot]
			if cs == nil || cs.room(s.m) <= 0 || (cs.joinPoint >= 0 && e.Offset >= cs.joinPoint) || (h != nil && h.cs != cs) {
				hold(e, slot)
				blocked[slot] = true
				continue
			}
			give(cs, e, slot)
			if h == nil {
				h = &slotHold{cs: cs}
				s.slotHolder[slot] = h
			}
			h.n++
			sent++
		}
	}
	for _, cs := range order {
		s.outbox = append(s.outbox, note{c: cs.c, ds: batches[cs]})
	}
	return sent
}

// nextShared picks the Shared consumer for the next turn: among consumers
// with permits those of the best (lowest) priority level, round-robin in
// join order.
func (s *Subscription) nextShared() *consumerState {
	n := len(s.consumers)
	var best *consumerState
	at := 0
	for k := 0; k < n; k++ {
		i := (s.rr + k) % n
		cs := s.consumers[i]
		if cs.room(s.m) > 0 && (best == nil || cs.c.Priority() < best.c.Priority()) {
			best, at = cs, i
		}
	}
	if best != nil {
		s.rr = at + 1
	}
	return best
}
