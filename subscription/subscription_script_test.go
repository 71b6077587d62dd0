package subscription

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

// TestRandomScripts runs seeded random scripts of joins, leaves, flows,
// acks, nacks and new rows against every subscription type, checking the
// state invariants after every step, and at the end that everything is
// consumed: no offset lost, nothing stuck, Key_Shared keys in order on
// first delivery.
func TestRandomScripts(t *testing.T) {
	for _, typ := range []SubType{Exclusive, Failover, Shared, KeyShared} {
		seeds := []uint64{1, 2, 3, 4, 5, 6}
		if s, ok := testkit.EnvSeed(t); ok {
			seeds = []uint64{s}
		}
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/%d", typ, seed), func(t *testing.T) { runScript(t, typ, seed) })
		}
	}
}

type scriptConsumer struct {
	*fakeConsumer
	unacked []int64
}

func runScript(t *testing.T, typ SubType, seed uint64) {
	rng := testkit.Rand(t, seed, uint64(typ))
	m := newTestManager(t, nil)
	src := &fakeSource{}
	opts := SubscribeOptions{Topic: "persistent://t/n/s-partition-1", Type: typ, Initial: Earliest, KeySharedAutoSplit: true}
	var live []*scriptConsumer
	var s *Subscription
	names := 0
	lastFirst := map[string]int64{} // key → last first-time-delivered offset
	collect := func(c *scriptConsumer) {
		for _, d := range c.takeDeliveries() {
			c.unacked = append(c.unacked, d.Offset)
			if typ == KeyShared && d.RedeliveryCount == 0 {
				k := string(d.Record.Key)
				if last, ok := lastFirst[k]; ok && d.Offset < last {
					t.Fatalf("key %s: offset %d first delivered after %d", k, d.Offset, last)
				}
				lastFirst[k] = d.Offset
			}
		}
	}
	join := func() {
		names++
		c := &scriptConsumer{fakeConsumer: &fakeConsumer{name: fmt.Sprintf("c%d", names), prio: int32(rng.IntN(2))}}
		got, err := m.Subscribe(context.Background(), src, opts, c)
		if err != nil {
			if typ == Exclusive && errors.Is(err, ErrConsumerBusy) {
				return
			}
			t.Fatal(err)
		}
		s = got
		live = append(live, c)
	}
	join()
	total := 0
	for step := 0; step < 200; step++ {
		c := live[rng.IntN(len(live))]
		switch op := rng.IntN(10); {
		case op == 0 && len(live) < 4:
			join()
		case op == 1 && len(live) > 1:
			collect(c)
			s.Remove(c)
			for i, o := range live {
				if o == c {
					live = append(live[:i], live[i+1:]...)
					break
				}
			}
		case op <= 3:
			s.Flow(c, uint32(1+rng.IntN(15)))
		case op <= 5:
			collect(c)
			var acks, keep []int64
			for _, off := range c.unacked {
				if rng.IntN(3) > 0 {
					acks = append(acks, off)
				} else {
					keep = append(keep, off)
				}
			}
			c.unacked = keep
			if (typ == Exclusive || typ == Failover) && rng.IntN(2) == 0 && len(acks) > 0 {
				if err := s.Ack(context.Background(), c, acks[len(acks)-1:], true); err != nil {
					t.Fatal(err)
				}
			} else if err := s.Ack(context.Background(), c, acks, false); err != nil {
				t.Fatal(err)
			}
		case op == 6:
			collect(c)
			if len(c.unacked) > 0 {
				n := rng.IntN(len(c.unacked))
				s.Redeliver(c, c.unacked[n:n+1])
			}
		default:
			for n := rng.IntN(8); n > 0; n-- {
				src.add(fmt.Sprintf("key-%d", rng.IntN(12)))
				total++
			}
		}
		settle(t, s)
		checkInvariants(t, s)
	}
	// Drain: everyone gets permits and acks whatever arrives.
	if total == 0 {
		return
	}
	defer func() {
		if t.Failed() {
			s.mu.Lock()
			t.Logf("typ %s total %d readPos %d knownEnd %d cursor %+v replay %v active %v", s.typ, total, s.readPos, s.knownEnd, s.cur.cursor(), &s.replay, s.active != nil)
			for _, cs := range s.consumers {
				t.Logf("consumer %s prio %d permits %d pending %v join %d", cs.c.Name(), cs.c.Priority(), cs.permits, &cs.pending, cs.joinPoint)
			}
			s.mu.Unlock()
		}
	}()
	testkit.Eventually(t, 5*time.Second, "everything consumed", func() bool {
		for _, c := range live {
			s.Flow(c, 50)
			collect(c)
			s.Ack(context.Background(), c, c.unacked, false)
			c.unacked = nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cur.markDelete == int64(total)-1
	})

	checkInvariants(t, s)
}
