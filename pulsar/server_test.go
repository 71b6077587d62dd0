package pulsar

// Wire-level tests of the server: a raw protocol client (frames built with
// this package's encoder) over loopback against a real server reading a
// real SQLite catalog. End-to-end behaviour with pulsar-client-go is in
// e2e/pulsar_test.go.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/tabletest"

	"github.com/tributary-io/tributary/pulsar/wire"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/pulsar/pb"
	"github.com/tributary-io/tributary/subscription"
	"github.com/tributary-io/tributary/tables"
)

const testTopic = "persistent://tributary/factory/telemetry"

// testServer starts a server over a catalog holding n rows in partition 0
// of factory.telemetry.
func testServer(t *testing.T, n int, cfg Config) (*Server, []*tributary.Record) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	uri := "sqlite://" + filepath.Join(dir, "catalog.db")
	cat, err := tables.Open(ctx, tables.Config{URI: uri, Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	const stream = "factory.telemetry"
	if _, err := cat.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	recs := make([]*tributary.Record, n)
	for i := range recs {
		recs[i] = &tributary.Record{Stream: stream, Offset: int64(i), Timestamp: time.Now().UnixMicro(), Topic: "factory/x",
			Value: []byte(fmt.Sprintf("value %d", i)), Source: "kafka", ClientID: "c", Node: "edge-1",
			Headers: []tributary.Header{{Key: "h", Value: []byte{byte(i)}}}}
		if i%2 == 0 {
			recs[i].Key = []byte(fmt.Sprintf("k%d", i%4))
		}
	}
	tabletest.Commit(t, cat, stream, recs)
	cfg.Addr, cfg.CursorsDB = "127.0.0.1:0", uri
	s, err := NewServer(cfg, tables.NewReader(cat, tables.ReaderConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, recs
}

// rawClient speaks the protocol with this package's framing.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawClient) send(cmd *pb.BaseCommand) {
	c.t.Helper()
	b, err := wire.AppendCommand(nil, cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) recvErr() (wire.Frame, error) {
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, _, err := wire.ReadFrame(c.br, wire.DefaultMaxFrameBytes+wire.FramePadding, nil)
	return f, err
}

// recv returns the next frame that is not a PING (answered).
func (c *rawClient) recv() wire.Frame {
	c.t.Helper()
	for {
		f, err := c.recvErr()
		if err != nil {
			c.t.Fatalf("recv: %v", err)
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			return f
		}
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	}
}

func (c *rawClient) expect(t pb.BaseCommand_Type) wire.Frame {
	c.t.Helper()
	f := c.recv()
	if f.Cmd.GetType() != t {
		c.t.Fatalf("got %v (%v), want %v", f.Cmd.GetType(), f.Cmd, t)
	}
	return f
}

func (c *rawClient) connect(version int32, brokerEntry bool) *pb.CommandConnected {
	c.t.Helper()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("raw"),
		ProtocolVersion: proto.Int32(version), FeatureFlags: &pb.FeatureFlags{SupportsBrokerEntryMetadata: proto.Bool(brokerEntry)}}})
	return c.expect(pb.BaseCommand_CONNECTED).Cmd.Connected
}

// expectClosed waits for the server to close the connection.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	for {
		f, err := c.recvErr()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatal("connection still open")
		}
		if err != nil {
			return
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			c.t.Fatalf("got %v while waiting for the close", f.Cmd.GetType())
		}
	}
}

func TestServerTopics(t *testing.T) {
	s, _ := testServer(t, 3, Config{})
	c := dialRaw(t, s.Addr())
	if got := c.connect(25, false); got.GetProtocolVersion() != protocolVersion || got.GetMaxMessageSize() != wire.DefaultMaxFrameBytes {
		t.Fatalf("connected %v", got)
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	c.expect(pb.BaseCommand_PONG)

	for _, tc := range []struct {
		topic string
		n     uint32
		code  pb.ServerError
	}{
		{testTopic, 1, 0},
		{testTopic + "-partition-0", 0, 0},
		{testTopic + "-partition-1", 0, pb.ServerError_TopicNotFound},
		{"persistent://tributary/factory/none", 0, pb.ServerError_TopicNotFound},
		{"persistent://public/default/telemetry", 0, pb.ServerError_InvalidTopicName},
		{"non-persistent://tributary/factory/telemetry", 0, pb.ServerError_InvalidTopicName},
		{"persistent://tributary/fact ory/telemetry", 0, pb.ServerError_InvalidTopicName},
	} {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
			Topic: proto.String(tc.topic), RequestId: proto.Uint64(1)}})
		r := c.expect(pb.BaseCommand_PARTITIONED_METADATA_RESPONSE).Cmd.PartitionMetadataResponse
		if tc.code != 0 {
			if r.GetResponse() != pb.CommandPartitionedTopicMetadataResponse_Failed || r.GetError() != tc.code {
				t.Errorf("%s: %v, want error %v", tc.topic, r, tc.code)
			}
			continue
		}
		if r.GetResponse() != pb.CommandPartitionedTopicMetadataResponse_Success || r.GetPartitions() != tc.n {
			t.Errorf("%s: %v, want %d partitions", tc.topic, r, tc.n)
		}
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(tc.topic), RequestId: proto.Uint64(2)}})
		l := c.expect(pb.BaseCommand_LOOKUP_RESPONSE).Cmd.LookupTopicResponse
		if l.GetResponse() != pb.CommandLookupTopicResponse_Connect || l.GetBrokerServiceUrl() != "pulsar://"+s.Addr() || !l.GetAuthoritative() {
			t.Errorf("lookup %s: %v", tc.topic, l)
		}
	}

	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
		RequestId: proto.Uint64(3), Namespace: proto.String("tributary/factory")}})
	if got := c.expect(pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE).Cmd.GetTopicsOfNamespaceResponse.GetTopics(); len(got) != 1 || got[0] != testTopic+"-partition-0" {
		t.Errorf("topics of namespace: %v", got)
	}

	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(testTopic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(4)}})
	if e := c.expect(pb.BaseCommand_ERROR).Cmd.Error; e.GetError() != pb.ServerError_NotAllowedError || e.GetRequestId() != 4 {
		t.Errorf("producer: %v", e)
	}
}

// TestServerConsume drives one consumer by hand: messages with their
// metadata and broker entry index, redelivery of everything unacked (the
// ack-timeout path, which pulsar-client-go does not use), last message id,
// a refused second Exclusive consumer, seek and close.
func TestServerConsume(t *testing.T) {
	s, recs := testServer(t, 10, Config{})
	c := dialRaw(t, s.Addr())
	c.connect(19, true)
	sub := func(consumerID, req uint64) {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String(testTopic + "-partition-0"), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
			ConsumerId: proto.Uint64(consumerID), RequestId: proto.Uint64(req), InitialPosition: pb.CommandSubscribe_Earliest.Enum()}})
	}
	// reply returns the next frame that is not ACTIVE_CONSUMER_CHANGE.
	reply := func(want pb.BaseCommand_Type) wire.Frame {
		for {
			f := c.recv()
			if f.Cmd.GetType() == want {
				return f
			}
			if f.Cmd.GetType() != pb.BaseCommand_ACTIVE_CONSUMER_CHANGE {
				t.Fatalf("got %v, want %v", f.Cmd.GetType(), want)
			}
		}
	}
	sub(1, 1)
	reply(pb.BaseCommand_SUCCESS)
	flow := func(n uint32) {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(n)}})
	}
	msg := func() wire.Frame { return reply(pb.BaseCommand_MESSAGE) }
	flow(4)
	for off := range int64(4) {
		f := msg()
		r := recs[off]
		id := f.Cmd.Message.GetMessageId()
		if id.GetLedgerId() != 1 || id.GetEntryId() != uint64(off) || id.GetPartition() != 0 || f.BrokerEntry.GetIndex() != uint64(off) {
			t.Fatalf("offset %d: id %v, broker entry %v", off, id, f.BrokerEntry)
		}
		md := f.Metadata
		if !bytes.Equal(f.Payload, r.Value) || md.GetProducerName() != "edge-1" || md.GetSequenceId() != uint64(off) ||
			md.GetPublishTime() != uint64(r.Timestamp/1000) || (r.Key != nil) != (md.PartitionKey != nil) || md.GetPartitionKey() != string(r.Key) ||
			len(md.Properties) != 1 || md.Properties[0].GetValue() != string(r.Headers[0].Value) || md.NumMessagesInBatch != nil {
			t.Fatalf("offset %d: metadata %v payload %q", off, md, f.Payload)
		}
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{ConsumerId: proto.Uint64(1),
		AckType: pb.CommandAck_Individual.Enum(), MessageId: []*pb.MessageIdData{messageID(0, 0), messageID(2, 0)}, RequestId: proto.Uint64(5)}})
	if r := c.expect(pb.BaseCommand_ACK_RESPONSE).Cmd.AckResponse; r.Error != nil || r.GetRequestId() != 5 {
		t.Fatalf("ack response %v", r)
	}
	// Redeliver everything unacked: 1 and 3 come again, counted.
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(),
		RedeliverUnacknowledgedMessages: &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(1)}})
	flow(2)
	for _, want := range []uint64{1, 3} {
		f := msg()
		if f.Cmd.Message.GetMessageId().GetEntryId() != want || f.Cmd.Message.GetRedeliveryCount() != 1 {
			t.Fatalf("redelivered %v, want offset %d with count 1", f.Cmd.Message, want)
		}
	}

	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID.Enum(), GetLastMessageId: &pb.CommandGetLastMessageId{
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(6)}})
	if id := c.expect(pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE).Cmd.GetLastMessageIdResponse.GetLastMessageId(); id.GetEntryId() != 9 || id.GetLedgerId() != 1 {
		t.Fatalf("last message id %v", id)
	}

	c2 := dialRaw(t, s.Addr())
	c2.connect(19, false)
	c2.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(testTopic + "-partition-0"), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1)}})
	if e := c2.expect(pb.BaseCommand_ERROR).Cmd.Error; e.GetError() != pb.ServerError_ConsumerBusy {
		t.Fatalf("second exclusive consumer: %v", e)
	}

	// Seek: CLOSE_CONSUMER, then SUCCESS; resubscribed, offset 5 is next.
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_SEEK.Enum(), Seek: &pb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(7),
		MessageId: messageID(5, 0)}})
	for {
		f := c.recv()
		if f.Cmd.GetType() == pb.BaseCommand_CLOSE_CONSUMER {
			break
		}
		if f.Cmd.GetType() != pb.BaseCommand_MESSAGE && f.Cmd.GetType() != pb.BaseCommand_ACTIVE_CONSUMER_CHANGE {
			t.Fatalf("got %v before CLOSE_CONSUMER", f.Cmd.GetType())
		}
	}
	if r := reply(pb.BaseCommand_SUCCESS).Cmd.Success; r.GetRequestId() != 7 {
		t.Fatalf("seek reply %v", r)
	}
	sub(1, 8)
	reply(pb.BaseCommand_SUCCESS)
	flow(1)
	if f := msg(); f.Cmd.Message.GetMessageId().GetEntryId() != 5 {
		t.Fatalf("after seek to 5: %v", f.Cmd.Message.GetMessageId())
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(9)}})
	for {
		if f := c.recv(); f.Cmd.GetType() == pb.BaseCommand_SUCCESS {
			break
		}
	}
}

// TestServerClosesBadConnections: a command before CONNECT, a frame over
// the limit and a second CONNECT each close their connection only.
func TestServerClosesBadConnections(t *testing.T) {
	s, _ := testServer(t, 1, Config{MaxFrameBytes: 1 << 10})
	c := dialRaw(t, s.Addr())
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	c.expectClosed()

	c = dialRaw(t, s.Addr())
	c.connect(19, false)
	c.nc.Write([]byte{0, 1, 0, 0})
	c.expectClosed()

	c = dialRaw(t, s.Addr())
	c.connect(19, false)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("again")}})
	c.expectClosed()

	c = dialRaw(t, s.Addr())
	c.connect(19, false)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	c.expect(pb.BaseCommand_PONG)
}

// TestServerKeepAlive: a silent client is pinged after KeepAlive and
// disconnected after twice that; one that answers stays.
func TestServerKeepAlive(t *testing.T) {
	// A client has ka between the PING and the close to answer: long
	// enough for a loaded machine running the race detector.
	const ka = 400 * time.Millisecond
	s, _ := testServer(t, 1, Config{KeepAlive: ka})
	silent := dialRaw(t, s.Addr())
	silent.connect(19, false)
	if f, err := silent.recvErr(); err != nil || f.Cmd.GetType() != pb.BaseCommand_PING {
		t.Fatalf("no PING to a silent client: %v %v", f.Cmd, err)
	}
	silent.expectClosed()

	alive := dialRaw(t, s.Addr())
	alive.connect(19, false)
	deadline := time.Now().Add(5 * ka)
	for time.Now().Before(deadline) {
		alive.nc.SetReadDeadline(time.Now().Add(ka))
		f, _, err := wire.ReadFrame(alive.br, wire.DefaultMaxFrameBytes, nil)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
		case err != nil:
			t.Fatalf("answering client closed: %v", err)
		case f.Cmd.GetType() == pb.BaseCommand_PING:
			alive.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
		}
	}
}

// TestLookupOwners: with peers, LOOKUP names one owner per topic
// partition, the same from every server, spread over the peers.
func TestLookupOwners(t *testing.T) {
	peers := []string{"10.0.0.1:6650", "10.0.0.2:6650", "10.0.0.3:6650"}
	servers := make([]*Server, len(peers))
	for i, p := range peers {
		servers[i] = &Server{cfg: Config{Peers: peers}, self: p}
	}
	owners := map[string]int{}
	for n := range 60 {
		topic := fmt.Sprintf("%s-partition-%d", testTopic, n)
		o := servers[0].owner(topic)
		for _, s := range servers[1:] {
			if got := s.owner(topic); got != o {
				t.Fatalf("%s: owner %s from one server, %s from another", topic, o, got)
			}
		}
		owners[o]++
	}
	if len(owners) != len(peers) {
		t.Fatalf("60 partitions over %d of %d peers: %v", len(owners), len(peers), owners)
	}
	alone := &Server{self: "127.0.0.1:6650"}
	if o := alone.owner(testTopic); o != "127.0.0.1:6650" {
		t.Fatalf("a server alone names %s", o)
	}
}

// TestServerSlowConsumerBacklog: a consumer with a million permits that
// stops reading is given nothing more once its connection has
// DefaultMaxConnectionBacklog queued or being written (it held up to maxQueuedBytes,
// 256 MiB, before); a consumer of another connection on the same Shared
// subscription receives everything else meanwhile.
func TestServerSlowConsumerBacklog(t *testing.T) {
	const n = 200000 // ~20 MiB of MESSAGE frames: far more than DefaultMaxConnectionBacklog
	s, _ := testServer(t, n, Config{})
	subscribe := func(c *rawClient, id uint64, permits uint32) {
		c.connect(19, false)
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String(testTopic + "-partition-0"), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(),
			ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(1), InitialPosition: pb.CommandSubscribe_Earliest.Enum()}})
		c.expect(pb.BaseCommand_SUCCESS)
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(id), MessagePermits: proto.Uint32(permits)}})
	}
	slow := dialRaw(t, s.Addr())
	slow.nc.(*net.TCPConn).SetReadBuffer(4 << 10)
	subscribe(slow, 1, 1_000_000) // and never read again
	queued := func() (most int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for c := range s.conns {
			c.wmu.Lock()
			most = max(most, len(c.out)+c.writing)
			c.wmu.Unlock()
		}
		return most
	}
	peak := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		peak = max(peak, queued())
		time.Sleep(5 * time.Millisecond)
	}
	if peak > DefaultMaxConnectionBacklog+1<<20 {
		t.Fatalf("%d bytes queued for a consumer that does not read (backlog bound %d)", peak, DefaultMaxConnectionBacklog)
	}
	fast := dialRaw(t, s.Addr())
	subscribe(fast, 2, 1_000_000)
	got := 0
	// Of what the slow one (and the sockets' buffers) did not take, up to
	// the unacknowledged cap of a consumer (it acknowledges nothing).
	for got < min(n/3, subscription.DefaultMaxUnackedPerConsumer) {
		f, err := fast.recvErr()
		if err != nil {
			t.Fatalf("fast consumer after %d messages: %v", got, err)
		}
		switch f.Cmd.GetType() {
		case pb.BaseCommand_MESSAGE:
			got++
		case pb.BaseCommand_PING:
			fast.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
		}
	}
	t.Logf("peak %d bytes queued for the slow consumer; the fast one received %d", peak, got)
}
