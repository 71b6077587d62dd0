package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
)

// subCall is one Subscribe call.
type subCall struct {
	t  *testing.T
	st *connect.BidiStreamForClient[pb.SubscribeRequest, pb.SubscribeResponse]
	// pending is the receive recvWithin gave up waiting for: still in
	// Receive, so the next recvWithin or close takes its result rather
	// than calling Receive alongside it (a stream's Receive is not safe
	// for concurrent use).
	pending chan recvResult
}

type recvResult struct {
	recs []*pb.ReceivedRecord
	err  error
}

// openSub opens a Subscribe call of c and waits for its confirmation.
func openSub(t *testing.T, ctx context.Context, c pbconnect.ReadServiceClient, req *pb.SubscribeRequest) *subCall {
	t.Helper()
	st := c.Subscribe(ctx)
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(); err != nil {
		t.Fatalf("subscribe %s: %v", req.Subscription, err)
	}
	return &subCall{t: t, st: st}
}

// next returns the next deliveries.
func (s *subCall) next() ([]*pb.ReceivedRecord, error) {
	for {
		r, err := s.st.Receive()
		if err != nil {
			return nil, err
		}
		if len(r.Records) > 0 {
			return r.Records, nil
		}
	}
}

// recv is next, taking a receive recvWithin left pending first.
func (s *subCall) recv() ([]*pb.ReceivedRecord, error) {
	if s.pending != nil {
		r := <-s.pending
		s.pending = nil
		return r.recs, r.err
	}
	return s.next()
}

func (s *subCall) ack(offs ...int64) error {
	return s.st.Send(&pb.SubscribeRequest{AckOffsets: offs})
}

// close ends the call gracefully: the client's side first, then the
// server's answers until it ends the call (after it has taken every
// acknowledgement sent).
func (s *subCall) close() {
	s.st.CloseRequest()
	for {
		if _, err := s.recv(); err != nil {
			break
		}
	}
	s.st.CloseResponse()
}

// TestGRPCSubscribe: gRPC Subscribe over the subscriptions Pulsar serves.
// A shared subscription across a gRPC client (h2c) and a Connect JSON
// client delivers each message once; a client that does not acknowledge
// gets the messages again after its ack deadline (delivery_attempt 2);
// a subscription acknowledged over gRPC is resumed by a Pulsar consumer
// from its cursor; after kill -9 of the server mid-subscription, a new
// gRPC consumer resumes from the durable cursor with no gap.
func TestGRPCSubscribe(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const stream, n = "sub.events", 300
	produceHTTP(t, p, stream, "m", n)
	waitRows(t, dir, stream, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := []pbconnect.ReadServiceClient{
		pbconnect.NewReadServiceClient(h2c(), "http://"+p.CloudHTTP, connect.WithGRPC()),
		pbconnect.NewReadServiceClient(h2c(), "http://"+p.CloudHTTP, connect.WithProtoJSON()),
	}
	base := func(sub string, typ pb.SubscriptionType) *pb.SubscribeRequest {
		return &pb.SubscribeRequest{Stream: stream, Subscription: sub, Type: typ, InitialPosition: pb.InitialPosition_INITIAL_POSITION_EARLIEST,
			MaxOutstandingMessages: 20}
	}

	// Shared across two clients: each message once.
	var mu sync.Mutex
	seen := map[int64]int{}
	per := make([]int, 2)
	var wg sync.WaitGroup
	var calls []*subCall
	for i, c := range clients {
		s := openSub(t, ctx, c, base("workers", pb.SubscriptionType_SUBSCRIPTION_TYPE_SHARED))
		calls = append(calls, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(seen) >= n
				mu.Unlock()
				if done {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
				recs, err := recvWithin(rctx, s)
				rcancel()
				if err != nil {
					if ctx.Err() == nil && rctx.Err() == nil {
						t.Errorf("shared consumer %d: %v", i, err)
						return
					}
					continue
				}
				var offs []int64
				mu.Lock()
				for _, r := range recs {
					if seen[r.Record.Offset] > 0 || r.DeliveryAttempt != 1 {
						t.Logf("consumer %d: offset %d again, attempt %d", i, r.Record.Offset, r.DeliveryAttempt)
					}
					seen[r.Record.Offset]++
					per[i]++
					offs = append(offs, r.Record.Offset)
				}
				mu.Unlock()
				if err := s.ack(offs...); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, s := range calls {
		s.close() // after both are done: a call that ends hands its unacknowledged messages to the other
	}
	for off := range int64(n) {
		if seen[off] != 1 {
			t.Fatalf("shared: offset %d delivered %d times", off, seen[off])
		}
	}
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("shared: one consumer got everything: %v", per)
	}
	t.Logf("shared subscription: %d and %d messages", per[0], per[1])

	// No acknowledgement: redelivered after the deadline.
	lazyReq := base("lazy", pb.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	lazyReq.MaxOutstandingMessages, lazyReq.AckDeadlineMs = 5, 300
	lazy := openSub(t, ctx, clients[0], lazyReq)
	firstRecs := collect(t, lazy, 5)
	again := collect(t, lazy, 5)
	for i, r := range again {
		if r.Record.Offset != firstRecs[i].Record.Offset || r.DeliveryAttempt != 2 || firstRecs[i].DeliveryAttempt != 1 {
			t.Fatalf("redelivery %d: offset %d attempt %d, first %d attempt %d", i, r.Record.Offset, r.DeliveryAttempt, firstRecs[i].Record.Offset, firstRecs[i].DeliveryAttempt)
		}
	}
	lazy.close()

	// Acknowledged over gRPC, resumed over Pulsar.
	mixed := openSub(t, ctx, clients[0], base("mixed", pb.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE))
	ackUpTo(t, mixed, 100)
	mixed.close()
	time.Sleep(500 * time.Millisecond) // the last consumer left: the cursor is saved
	pc := pulsarClient(t, p.Pulsar)
	cons := pulsarSubscribe(t, pc, pulsar.ConsumerOptions{Topic: "persistent://tributary/sub/events", SubscriptionName: "mixed", Type: pulsar.Exclusive})
	pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
	m, err := cons.Receive(pctx)
	pcancel()
	if err != nil || m.ID().EntryID() != 100 || string(m.Payload()) != "m-100" {
		t.Fatalf("pulsar on the gRPC-acknowledged subscription: %v %v", err, m)
	}
	cons.Close()

	// kill -9 mid-subscription: the durable cursor.
	dur := openSub(t, ctx, clients[0], base("durable", pb.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER))
	ackUpTo(t, dur, 150)
	time.Sleep(500 * time.Millisecond) // cursors are saved at most every 100 ms
	p.kill()
	p2 := startDev(t, dir)
	c2 := pbconnect.NewReadServiceClient(h2c(), "http://"+p2.CloudHTTP, connect.WithGRPC())
	resumed := openSub(t, ctx, c2, base("durable", pb.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER))
	next := int64(150)
	for next < n {
		recs := collect(t, resumed, 1)
		for _, r := range recs {
			if r.Record.Offset != next || string(r.Record.Value) != fmt.Sprint("m-", next) {
				t.Fatalf("after kill -9: offset %d, want %d", r.Record.Offset, next)
			}
			resumed.ack(r.Record.Offset)
			next++
		}
	}
	resumed.close()
}

// recvWithin is next bounded by ctx.
func recvWithin(ctx context.Context, s *subCall) ([]*pb.ReceivedRecord, error) {
	if s.pending == nil {
		ch := make(chan recvResult, 1)
		go func() {
			r, err := s.next()
			ch <- recvResult{r, err}
		}()
		s.pending = ch
	}
	select {
	case r := <-s.pending:
		s.pending = nil
		return r.recs, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// collect receives at least n deliveries.
func collect(t *testing.T, s *subCall, n int) []*pb.ReceivedRecord {
	t.Helper()
	var out []*pb.ReceivedRecord
	for len(out) < n {
		recs, err := s.recv()
		if err != nil {
			t.Fatalf("subscribe: %v after %d", err, len(out))
		}
		out = append(out, recs...)
	}
	return out
}

// ackUpTo receives and acknowledges offsets 0..n-1 in order.
func ackUpTo(t *testing.T, s *subCall, n int64) {
	t.Helper()
	next := int64(0)
	for next < n {
		recs, err := s.recv()
		if err != nil {
			t.Fatal(err)
		}
		var offs []int64
		for _, r := range recs {
			if r.Record.Offset >= n {
				break
			}
			if r.Record.Offset != next {
				t.Fatalf("offset %d, want %d", r.Record.Offset, next)
			}
			offs = append(offs, r.Record.Offset)
			next++
		}
		if err := s.ack(offs...); err != nil {
			t.Fatal(err)
		}
	}
}
