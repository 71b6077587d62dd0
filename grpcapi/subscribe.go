package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/subscription"
)

// Defaults and caps of a Subscribe call's flow control.
const (
	DefaultMaxOutstanding      = 1000
	DefaultMaxOutstandingBytes = 16 << 20
	DefaultAckDeadline         = 30 * time.Second
	MinAckDeadline             = 100 * time.Millisecond
	MaxAckDeadline             = 10 * time.Minute
)

// Subscribe serves one consumer of a subscription of the cloud's
// subscription manager, the one the Pulsar server dispatches from: a
// subscription of a given name is one, read over Pulsar or gRPC, with the
// same durable cursor.
//
// Flow control: the consumer is given permits for max_outstanding
// messages; each acknowledged (or returned) message gives one back,
// except while the delivered, unacknowledged bytes are at
// max_outstanding_bytes. A message not acknowledged within the ack
// deadline is handed back to the subscription (Redeliver), which delivers
// it again (delivery_attempt counts up) to this or another consumer. When
// the call ends, its unacknowledged messages go back to the subscription.
func (rd *Reader) Subscribe(ctx context.Context, st *connect.BidiStream[pb.SubscribeRequest, pb.SubscribeResponse]) error {
	id, err := guard(ctx)
	if err != nil {
		return err
	}
	if rd.cfg.Subscriptions == nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("this server has no subscription manager"))
	}
	first, err := st.Receive()
	if err != nil {
		return err
	}
	o, cfg, err := rd.subscribeOptions(first)
	if err != nil {
		return err
	}
	if err := authorizeGroup(rd.cfg.Auth, id, first.Stream, first.Subscription); err != nil {
		return err
	}
	if _, err := rd.tables.Partition(ctx, first.Stream, first.Partition); err != nil {
		return tableError(first.Stream, err)
	}
	if err := rd.calls.acquire(); err != nil {
		return err
	}
	defer rd.calls.release()
	c := &consumer{name: first.ConsumerName, wake: make(chan struct{}, 1), cfg: cfg, out: map[int64]outstanding{}}
	if c.name == "" {
		c.name = fmt.Sprintf("grpc-%s", id.remote)
	}
	sub, err := rd.cfg.Subscriptions.Subscribe(ctx, subscription.NewTableSource(rd.tables, first.Stream, first.Partition), o, c)
	switch {
	case errors.Is(err, subscription.ErrConsumerBusy):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, subscription.ErrTooMany):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case err != nil:
		return connect.NewError(connect.CodeUnavailable, err)
	}
	defer sub.Remove(c)
	c.sub, c.typ = sub, o.Type
	if err := st.Send(&pb.SubscribeResponse{Active: c.isActive()}); err != nil {
		return err
	}
	sub.Flow(c, uint32(cfg.maxMessages))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recvErr := make(chan error, 1)
	go func() {
		defer cancel()
		recvErr <- c.receive(ctx, st, first)
	}()
	tick := time.NewTicker(max(cfg.deadline/4, 25*time.Millisecond))
	defer tick.Stop()
	lastActive := c.isActive()
	for {
		select {
		case <-ctx.Done():
			if err := expired(ctx); err != nil {
				return err
			}
			select {
			case err := <-recvErr:
				return err
			default:
				return nil
			}
		case <-tick.C:
			c.expire()
		case <-c.wake:
		}
		ds := c.take()
		active := c.isActive()
		if len(ds) == 0 && active == lastActive {
			continue
		}
		lastActive = active
		resp := &pb.SubscribeResponse{Active: active}
		for _, d := range ds {
			resp.Records = append(resp.Records, &pb.ReceivedRecord{Record: record(first.Stream, d.Record), DeliveryAttempt: d.RedeliveryCount + 1})
		}
		if err := st.Send(resp); err != nil {
			return err
		}
		rd.stats.Records.Add(int64(len(ds)))
	}
}

// subscribeCfg is a call's flow control.
type subscribeCfg struct {
	maxMessages int
	maxBytes    int64
	deadline    time.Duration
}

func (rd *Reader) subscribeOptions(r *pb.SubscribeRequest) (subscription.SubscribeOptions, subscribeCfg, error) {
	bad := func(format string, args ...any) error {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
	}
	var o subscription.SubscribeOptions
	cfg := subscribeCfg{maxMessages: int(r.MaxOutstandingMessages), maxBytes: r.MaxOutstandingBytes, deadline: time.Duration(r.AckDeadlineMs) * time.Millisecond}
	ns, name, err := tributary.ParseStream(r.Stream)
	switch {
	case err != nil:
		return o, cfg, bad("stream: %v", err)
	case r.Partition < 0:
		return o, cfg, bad("partition: %d, want >= 0", r.Partition)
	case r.Subscription == "" || len(r.Subscription) > 255:
		return o, cfg, bad("subscription: want a name of 1 to 255 bytes")
	case r.Type < 0 || r.Type > 3:
		return o, cfg, bad("type: %d", r.Type)
	case cfg.maxMessages < 0 || cfg.maxMessages > subscription.DefaultMaxUnackedPerConsumer:
		return o, cfg, bad("max_outstanding_messages: %d, want 0 (%d) to %d", cfg.maxMessages, DefaultMaxOutstanding, subscription.DefaultMaxUnackedPerConsumer)
	case cfg.maxBytes < 0:
		return o, cfg, bad("max_outstanding_bytes: %d, want >= 0", cfg.maxBytes)
	case r.AckDeadlineMs != 0 && (cfg.deadline < MinAckDeadline || cfg.deadline > MaxAckDeadline):
		return o, cfg, bad("ack_deadline_ms: %d, want %d to %d", r.AckDeadlineMs, MinAckDeadline.Milliseconds(), MaxAckDeadline.Milliseconds())
	}
	if cfg.maxMessages == 0 {
		cfg.maxMessages = DefaultMaxOutstanding
	}
	if cfg.maxBytes == 0 {
		cfg.maxBytes = DefaultMaxOutstandingBytes
	}
	if cfg.deadline == 0 {
		cfg.deadline = DefaultAckDeadline
	}
	o = subscription.SubscribeOptions{
		// The topic name Pulsar consumers subscribe to: the same subscription.
		Topic:        fmt.Sprintf("persistent://%s/%s/%s-partition-%d", rd.cfg.Catalog, ns, name, r.Partition),
		Subscription: r.Subscription, Type: subscription.SubType(r.Type), Durable: true,
		Initial: subscription.InitialPosition(r.InitialPosition), KeySharedAutoSplit: true,
	}
	return o, cfg, nil
}

// authorizeGroup checks consume on the stream and the subscription.
func authorizeGroup(a *auth.Authority, id identity, stream, sub string) error {
	if a.Open() {
		return nil
	}
	if err := a.Authorize(auth.Request{Client: auth.Client{Protocol: protocol, Remote: id.remote}, Principal: id.p, Action: auth.Consume,
		Stream: stream, Group: sub}); err != nil {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may not consume stream %s in subscription %s", id.p, stream, sub))
	}
	return nil
}

// outstanding is a delivered, unacknowledged message.
type outstanding struct {
	due  time.Time // redelivered after this
	size int64
}

// consumer is one Subscribe call as a subscription.Consumer: Deliver
// queues (within the permits it was given), the call's loop sends.
type consumer struct {
	name string
	cfg  subscribeCfg
	wake chan struct{}
	sub  *subscription.Subscription
	typ  subscription.SubType

	mu       sync.Mutex
	queue    []subscription.Delivery
	out      map[int64]outstanding // delivered (queued or sent), not acknowledged
	outBytes int64
	owed     uint32 // permits held back while outBytes is at the cap
	active   bool
}

func (c *consumer) Name() string    { return c.name }
func (c *consumer) Priority() int32 { return 0 }

func (c *consumer) Deliver(ds []subscription.Delivery) {
	c.mu.Lock()
	due := time.Now().Add(c.cfg.deadline)
	for _, d := range ds {
		size := int64(len(d.Record.Value) + len(d.Record.Key))
		if o, ok := c.out[d.Offset]; ok {
			c.outBytes -= o.size
		}
		c.out[d.Offset] = outstanding{due: due, size: size}
		c.outBytes += size
	}
	c.queue = append(c.queue, ds...)
	c.mu.Unlock()
	c.poke()
}

func (c *consumer) ActiveChanged(active bool) {
	c.mu.Lock()
	c.active = active
	c.mu.Unlock()
	c.poke()
}

func (c *consumer) isActive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.active || c.typ == subscription.Shared || c.typ == subscription.KeyShared
}

func (c *consumer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take returns the queued deliveries.
func (c *consumer) take() []subscription.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	ds := c.queue
	c.queue = nil
	return ds
}

// settle forgets offs (acknowledged or handed back) and returns the
// permits to grant for them now; c.mu held.
func (c *consumer) settle(offs []int64) uint32 {
	n := uint32(0)
	for _, off := range offs {
		if o, ok := c.out[off]; ok {
			delete(c.out, off)
			c.outBytes -= o.size
			n++
		}
	}
	c.owed += n
	if c.outBytes >= c.cfg.maxBytes {
		return 0 // held back until acknowledgements free bytes
	}
	n, c.owed = c.owed, 0
	return n
}

// expire hands back what was not acknowledged in time.
func (c *consumer) expire() {
	now := time.Now()
	c.mu.Lock()
	var late []int64
	for off, o := range c.out {
		if now.After(o.due) {
			late = append(late, off)
		}
	}
	if len(late) == 0 {
		c.mu.Unlock()
		return
	}
	if c.typ == subscription.Exclusive || c.typ == subscription.Failover {
		// The subscription rewinds everything unacknowledged (order).
		late = late[:0]
		for off := range c.out {
			late = append(late, off)
		}
	}
	n := c.settle(late)
	c.mu.Unlock()
	c.sub.Redeliver(c, late)
	if n > 0 {
		c.sub.Flow(c, n)
	}
}

// receive takes acknowledgements from the call until it ends.
func (c *consumer) receive(ctx context.Context, st *connect.BidiStream[pb.SubscribeRequest, pb.SubscribeResponse], first *pb.SubscribeRequest) error {
	req := first
	for {
		if len(req.AckOffsets) > 0 {
			if err := c.sub.Ack(ctx, c, req.AckOffsets, false); err != nil && !errors.Is(err, subscription.ErrTooMany) {
				return connect.NewError(connect.CodeUnavailable, err)
			}
			// A refused ack (too many ranges) leaves the message
			// unacknowledged: it comes again after the deadline.
			c.mu.Lock()
			n := c.settle(req.AckOffsets)
			c.mu.Unlock()
			if n > 0 {
				c.sub.Flow(c, n)
			}
		}
		if len(req.NackOffsets) > 0 {
			c.mu.Lock()
			n := c.settle(req.NackOffsets)
			c.mu.Unlock()
			c.sub.Redeliver(c, req.NackOffsets)
			if n > 0 {
				c.sub.Flow(c, n)
			}
		}
		var err error
		if req, err = st.Receive(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
