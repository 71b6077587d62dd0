package subscription

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
)

// fakeSource is one partition's rows in memory.
type fakeSource struct {
	mu      sync.Mutex
	entries []Entry // offsets base, base+1, ...
	base    int64
	reads   int
}

func (f *fakeSource) add(keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		off := f.base + int64(len(f.entries))
		var key []byte
		if k != "" {
			key = []byte(k)
		}
		f.entries = append(f.entries, Entry{Offset: off, Record: &tributary.Record{
			Offset: off, Key: key, Value: []byte{byte(off)}, Timestamp: 1_000_000 * (off + 1)}})
	}
}

func (f *fakeSource) Read(ctx context.Context, from int64, max int) ([]Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	i := int(from - f.base)
	if i < 0 {
		i = 0
	}
	if i >= len(f.entries) {
		return nil, nil
	}
	return slices.Clone(f.entries[i:min(len(f.entries), i+max)]), nil
}

func (f *fakeSource) End(ctx context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.base + int64(len(f.entries)), nil
}

func (f *fakeSource) OffsetForTime(ctx context.Context, t time.Time) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.entries {
		if e.Record.Timestamp >= t.UnixMicro() {
			return e.Offset, nil
		}
	}
	return f.base + int64(len(f.entries)), nil
}

// fakeConsumer records what it is given.
type fakeConsumer struct {
	name string
	prio int32

	mu     sync.Mutex
	got    []Delivery
	active []bool
}

func (c *fakeConsumer) Name() string    { return c.name }
func (c *fakeConsumer) Priority() int32 { return c.prio }
func (c *fakeConsumer) Deliver(ds []Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, ds...)
}
func (c *fakeConsumer) ActiveChanged(active bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active = append(c.active, active)
}

// offsets returns the offsets delivered so far, in order.
func (c *fakeConsumer) offsets() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int64, len(c.got))
	for i, d := range c.got {
		out[i] = d.Offset
	}
	return out
}

func (c *fakeConsumer) deliveries() []Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func (c *fakeConsumer) states() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.active)
}

// take returns and forgets the offsets delivered so far.
func (c *fakeConsumer) take() []int64 {
	ds := c.takeDeliveries()
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Offset
	}
	return out
}

// takeDeliveries returns and forgets what was delivered so far.
func (c *fakeConsumer) takeDeliveries() []Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.got
	c.got = nil
	return out
}

// waitCount waits until c has been delivered n messages in all.
func waitCount(t *testing.T, c *fakeConsumer, n int) []int64 {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, c.name+" deliveries", func() bool { return len(c.offsets()) >= n })
	got := c.offsets()
	if len(got) != n {
		t.Fatalf("%s got %d deliveries %v, want %d", c.name, len(got), got, n)
	}
	return got
}

// settle waits until the subscription's dispatch loop has nothing left to
// do with what it knows: every pass since the last change found no work.
// It checks that nothing more is delivered by observing quiescence of the
// loop's state, not by sleeping.
func settle(t *testing.T, s *Subscription) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "dispatch idle", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.outbox) == 0 && len(s.wake) == 0 && s.idle
	})

}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func newTestManager(t *testing.T, store CursorStore) *Manager {
	t.Helper()
	m := NewManager(store, nil)
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

func subscribe(t *testing.T, m *Manager, src Source, o SubscribeOptions, c Consumer) *Subscription {
	t.Helper()
	if o.Topic == "" {
		o.Topic = "persistent://tributary/factory/telemetry"
	}
	if o.Subscription == "" {
		o.Subscription = "sub"
	}
	s, err := m.Subscribe(context.Background(), src, o, c)
	if err != nil {
		t.Fatalf("subscribe %s: %v", c.Name(), err)
	}
	return s
}
