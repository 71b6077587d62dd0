package pulsar

import (
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/pulsar/pb"
	"google.golang.org/protobuf/proto"
)

// TestListenerDefences: a socket that never sends CONNECT is closed after
// the handshake deadline; a connection whose command makes the handler
// panic is closed alone (counted), and the server keeps serving.
func TestListenerDefences(t *testing.T) {
	s, _ := testServer(t, 3, Config{Limits: listen.Config{HandshakeTimeout: 300 * time.Millisecond}})
	silent := dialRaw(t, s.Addr())
	silent.expectClosed()

	ok := dialRaw(t, s.Addr())
	ok.connect(19, false)
	time.Sleep(500 * time.Millisecond) // past the deadline: a connected client stays

	testPanicOn = pb.BaseCommand_GET_TOPICS_OF_NAMESPACE
	t.Cleanup(func() { testPanicOn = 0 })
	bad := dialRaw(t, s.Addr())
	bad.connect(19, false)
	bad.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(1), Namespace: proto.String("tributary/factory")}})
	bad.expectClosed()
	testkit.Eventually(t, 5*time.Second, "panic counted", func() bool { return s.ListenerStats().Panics == 1 })

	ok.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	ok.expect(pb.BaseCommand_PONG)
	if st := s.ListenerStats(); st.HandshakeTimeouts != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSubscribeCaps: consumers per connection and subscriptions per server
// are capped; a SUBSCRIBE beyond either gets TooManyRequests and changes
// nothing.
func TestSubscribeCaps(t *testing.T) {
	s, _ := testServer(t, 3, Config{MaxConsumersPerConn: 2, MaxSubscriptions: 3})
	c := dialRaw(t, s.Addr())
	c.connect(19, false)
	sub := func(consumer uint64, name string) *pb.CommandError {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String(testTopic + "-partition-0"), Subscription: proto.String(name), SubType: pb.CommandSubscribe_Shared.Enum(),
			ConsumerId: proto.Uint64(consumer), RequestId: proto.Uint64(consumer), InitialPosition: pb.CommandSubscribe_Earliest.Enum()}})
		for {
			f := c.recv()
			switch f.Cmd.GetType() {
			case pb.BaseCommand_SUCCESS:
				return nil
			case pb.BaseCommand_ERROR:
				return f.Cmd.Error
			}
		}
	}
	if e := sub(1, "a"); e != nil {
		t.Fatal(e)
	}
	if e := sub(2, "b"); e != nil {
		t.Fatal(e)
	}
	if e := sub(3, "c"); e == nil || e.GetError() != pb.ServerError_TooManyRequests {
		t.Fatalf("third consumer on one connection: %v", e)
	}
	c2 := dialRaw(t, s.Addr())
	c2.connect(19, false)
	c = c2
	if e := sub(4, "c"); e != nil {
		t.Fatal(e)
	}
	if e := sub(5, "d"); e == nil || e.GetError() != pb.ServerError_TooManyRequests {
		t.Fatalf("fourth subscription on the server: %v", e)
	}
	if e := sub(6, "a"); e != nil {
		t.Fatalf("joining an existing subscription: %v", e)
	}
}

// TestSubscriptionsListing: the console's view of subscriptions: type,
// consumers and backlog (messages not acknowledged up to the end).
func TestSubscriptionsListing(t *testing.T) {
	s, _ := testServer(t, 5, Config{})
	c := dialRaw(t, s.Addr())
	c.connect(19, false)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(testTopic + "-partition-0"), Subscription: proto.String("dash"), SubType: pb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), InitialPosition: pb.CommandSubscribe_Earliest.Enum()}})
	c.expect(pb.BaseCommand_SUCCESS)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)}})
	testkit.Eventually(t, 10*time.Second, "the backlog of 5", func() bool {
		subs := s.Subscriptions()
		return len(subs) == 1 && subs[0].Backlog == 5 && subs[0].Consumers == 1 && subs[0].Type == "Shared" && subs[0].Name == "dash"
	})
}
