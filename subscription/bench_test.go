package subscription

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// benchConsumer acks what it is given from the dispatch goroutine (as a
// connection's reader would, without the socket) and grants as many
// permits again.
type benchConsumer struct {
	name  string
	mode  string // "ack": every offset at once; "every-other": even at once, odd ones benchLag offsets later; "first-unacked": all but offset 0
	s     atomic.Pointer[Subscription]
	late  []int64
	total *atomic.Int64
	want  int64
	done  chan struct{}
	once  *sync.Once
}

const benchLag = 4000

func (c *benchConsumer) Name() string       { return c.name }
func (c *benchConsumer) Priority() int32    { return 0 }
func (c *benchConsumer) ActiveChanged(bool) {}
func (c *benchConsumer) Deliver(ds []Delivery) {
	s := c.s.Load()
	acks := make([]int64, 0, len(ds))
	for _, d := range ds {
		switch {
		case c.mode == "first-unacked" && d.Offset == 0:
		case c.mode == "every-other" && d.Offset%2 == 1:
			c.late = append(c.late, d.Offset)
		default:
			acks = append(acks, d.Offset)
		}
	}
	if len(ds) > 0 {
		last := ds[len(ds)-1].Offset
		i := 0
		for i < len(c.late) && c.late[i]+benchLag <= last {
			i++
		}
		acks = append(acks, c.late[:i]...)
		c.late = c.late[i:]
	}
	if err := s.Ack(context.Background(), c, acks, false); err != nil {
		panic(err)
	}
	s.Flow(c, uint32(len(ds)))
	if c.total.Add(int64(len(ds))) >= c.want {
		c.once.Do(func() { close(c.done) })
	}
}

// BenchmarkDispatchAck: one op is one message read from the source,
// dispatched to one of k Shared consumers and acknowledged by it.
func BenchmarkDispatchAck(b *testing.B) {
	for _, mode := range []string{"ack", "every-other", "first-unacked"} {
		for _, k := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/consumers=%d", mode, k), func(b *testing.B) {
				src := &fakeSource{}
				keys := make([]string, b.N)
				src.add(keys...)
				m := NewManager(nil, nil)
				defer m.Close(context.Background())
				var total atomic.Int64
				done := make(chan struct{})
				once := &sync.Once{}
				cs := make([]*benchConsumer, k)
				b.ResetTimer()
				for i := range cs {
					cs[i] = &benchConsumer{name: fmt.Sprint("c", i), mode: mode, total: &total, want: int64(b.N), done: done, once: once}
					s, err := m.Subscribe(context.Background(), src, SubscribeOptions{Topic: "persistent://tributary/bench/t",
						Subscription: "sub", Type: Shared, Initial: Earliest}, cs[i])
					if err != nil {
						b.Fatal(err)
					}
					cs[i].s.Store(s)
				}
				for _, c := range cs {
					c.s.Load().Flow(c, 1000)
				}
				<-done
				b.StopTimer()
			})
		}
	}
}
