package e2e

// Subscription semantics through pulsar-client-go beyond the basic
// consumption of pulsar_test.go: Key_Shared consumers joining while keys
// are in flight, a Shared consumer leaving with unacknowledged messages,
// Failover on a partition (active consumer by name, handover on close),
// and Unsubscribe deleting the durable cursor.

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func TestPulsarSubscriptions(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const total = 300
	rows := pulsarRows(t, p, dir, 0, 100, 200)
	cl := pulsarClient(t, p.Pulsar)

	// A Key_Shared consumer holds 30 messages unacknowledged; two more
	// join. No key may then be received by one consumer while another
	// still holds an unacknowledged message of it, and each key's
	// messages arrive in offset order (the broker's recently-joined rule
	// plus our per-key hold).
	t.Run("key_shared_join_in_flight", func(t *testing.T) {
		o := pulsar.ConsumerOptions{SubscriptionName: "ks-join", Type: pulsar.KeyShared, ReceiverQueueSize: 10}
		first := pulsarSubscribe(t, cl, o)
		defer first.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		var mu sync.Mutex
		outstanding := map[string]map[int]int{} // key → consumer → unacked
		lastOff := map[string]int64{}
		acked := map[int64]bool{}
		var held [3][]pulsar.Message
		var count [3]int
		receive := func(i int, m pulsar.Message) {
			off := checkPulsarMessage(t, "key_shared_join", rows, m)
			mu.Lock()
			defer mu.Unlock()
			k := m.Key()
			for j, n := range outstanding[k] {
				if j != i && n > 0 {
					t.Errorf("key %q: offset %d to consumer %d while consumer %d holds %d unacked", k, off, i, j, n)
				}
			}
			if last, ok := lastOff[k]; ok && off <= last {
				t.Errorf("key %q: offset %d after %d", k, off, last)
			}
			lastOff[k] = off
			if outstanding[k] == nil {
				outstanding[k] = map[int]int{}
			}
			outstanding[k][i]++
			held[i] = append(held[i], m)
			count[i]++
		}
		// ack acknowledges consumer i's held messages but the newest keep.
		ack := func(i int, c pulsar.Consumer, keep int) {
			mu.Lock()
			n := max(len(held[i])-keep, 0)
			done := held[i][:n]
			held[i] = held[i][n:]
			for _, m := range done {
				outstanding[m.Key()][i]-- // before the server can know
				acked[int64(m.ID().EntryID())] = true
			}
			mu.Unlock()
			for _, m := range done {
				if err := c.Ack(m); err != nil {
					t.Errorf("ack: %v", err)
				}
			}
		}
		for range 30 {
			m, err := first.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			receive(0, m)
		}
		cs := []pulsar.Consumer{first, pulsarSubscribe(t, cl, o), pulsarSubscribe(t, cl, o)}
		defer cs[1].Close()
		defer cs[2].Close()
		doneAll := func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) == total
		}
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !doneAll() && ctx.Err() == nil {
					rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
					m, err := c.Receive(rctx)
					rcancel()
					if err != nil {
						ack(i, c, 0) // idle: let go of everything
						continue
					}
					receive(i, m)
					ack(i, c, 3) // keep a few in flight
				}
			}()
		}
		wg.Wait()
		if !doneAll() {
			t.Fatalf("acked %d of %d", len(acked), total)
		}
		if count[1] == 0 || count[2] == 0 {
			t.Fatalf("the joining consumers got nothing: %v", count)
		}
		t.Logf("received per consumer: %v", count)
	})

	// A Shared consumer receives 25 messages and closes without acking:
	// the other consumers get them, counted as redelivered, and everything
	// is acknowledged exactly once.
	t.Run("shared_leave_unacked", func(t *testing.T) {
		o := pulsar.ConsumerOptions{SubscriptionName: "sh-leave", Type: pulsar.Shared, ReceiverQueueSize: 10, AckWithResponse: true}
		cs := []pulsar.Consumer{pulsarSubscribe(t, cl, o), pulsarSubscribe(t, cl, o), pulsarSubscribe(t, cl, o)}
		defer cs[1].Close()
		defer cs[2].Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		dropped := map[int64]bool{}
		for len(dropped) < 25 {
			m, err := cs[0].Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			dropped[checkPulsarMessage(t, "shared_leave", rows, m)] = true
		}
		cs[0].Close()
		var mu sync.Mutex
		got := map[int64]int{}
		var wg sync.WaitGroup
		for _, c := range cs[1:] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				done := func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(got) == total
				}
				pulsarReceive(ctx, c, done, func(m pulsar.Message) {
					off := checkPulsarMessage(t, "shared_leave", rows, m)
					if dropped[off] && m.RedeliveryCount() < 1 {
						t.Errorf("offset %d of the closed consumer has redelivery count %d", off, m.RedeliveryCount())
					}
					if err := c.Ack(m); err != nil {
						t.Errorf("ack %d: %v", off, err)
					}
					mu.Lock()
					got[off]++
					mu.Unlock()
				})
			}()
		}
		wg.Wait()
		for off := range int64(total) {
			if got[off] != 1 {
				t.Fatalf("offset %d received %d times by the remaining consumers", off, got[off])
			}
		}
	})

	// Unsubscribe deletes the durable cursor: resubscribing starts over,
	// while merely closing resumes after the acknowledged prefix.
	t.Run("unsubscribe", func(t *testing.T) {
		o := pulsar.ConsumerOptions{SubscriptionName: "unsub", Type: pulsar.Exclusive, AckWithResponse: true}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		next := func(c pulsar.Consumer) int64 {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			off := checkPulsarMessage(t, "unsubscribe", rows, m)
			if err := c.Ack(m); err != nil {
				t.Fatal(err)
			}
			return off
		}
		c := pulsarSubscribe(t, cl, o)
		for range 50 {
			next(c)
		}
		c.Close()
		c = pulsarSubscribe(t, cl, o)
		if off := next(c); off != 50 {
			t.Fatalf("reopened subscription resumed at %d, want 50", off)
		}
		if err := c.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
		c.Close()
		c = pulsarSubscribe(t, cl, o)
		defer c.Close()
		if off := next(c); off != 0 {
			t.Fatalf("after unsubscribe the subscription started at %d, want 0", off)
		}
	})

	// Failover on a partition picks the active consumer by name order
	// (partition index modulo the consumers sorted by priority and name),
	// whatever the subscription order; closing it hands over without loss.
	// Both join before their rows are written, so nothing is rewound.
	t.Run("failover_partition", func(t *testing.T) {
		active := make(chan int, 8)
		o := func(name string, i int) pulsar.ConsumerOptions {
			return pulsar.ConsumerOptions{Topic: pulsarTopic + "-partition-0", SubscriptionName: "fo-part", Type: pulsar.Failover,
				Name: name, AckWithResponse: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest,
				EventListener: &failoverListener{i: i, ch: active}}
		}
		b := mustSubscribe(t, cl, o("fo-b", 0))
		defer b.Close()
		a := mustSubscribe(t, cl, o("fo-a", 1))
		defer a.Close()
		waitFor(t, 10*time.Second, "fo-a active", func() bool {
			for {
				select {
				case i := <-active:
					if i == 1 {
						return true
					}
				default:
					return false
				}
			}
		})
		const more = 120
		rows := pulsarRows(t, p, dir, total, 40, more-40)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var fromA []int64
		for range more / 2 {
			m, err := a.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			off := checkPulsarMessage(t, "failover_partition", rows, m)
			if err := a.Ack(m); err != nil {
				t.Fatal(err)
			}
			fromA = append(fromA, off)
		}
		if want := seqInt64(total, total+more/2); !slices.Equal(fromA, want) {
			t.Fatalf("active consumer got %v, want %v", fromA, want)
		}
		a.Close()
		got := pulsarConsumeAll(t, "failover_partition", rows, []pulsar.Consumer{b}, more/2)
		if want := seqInt64(total+more/2, total+more); !slices.Equal(got[0], want) {
			t.Fatalf("after handover the standby got %v, want %v", got[0], want)
		}
	})
}

func seqInt64(from, to int) []int64 {
	out := make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, int64(i))
	}
	return out
}
