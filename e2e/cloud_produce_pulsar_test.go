package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/pulsar/pb"
	"github.com/tributary-io/tributary/pulsar/wire"
)

// cloudPulsarConfig is cloudProduceConfig with the Pulsar listener on.
func cloudPulsarConfig(t *testing.T, dir, name string) string {
	t.Helper()
	path := cloudProduceConfig(t, dir, "", name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "pulsar:\n  addr: \"\"", "pulsar:\n  addr: 127.0.0.1:0", 1)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCloudProducePulsar: pulsar-client-go producers, batched (lz4,
// zstd) and not, write one stream through two cloud servers sharing a
// SQLite state file and one warehouse, all at once. Every acknowledged
// message id (entry + batch index) is the offset of its record: a kgo
// consumer, iceberg-go and a Pulsar consumer read each value exactly once
// there, dense. A raw producer's resend of a sequence id to the other
// server lands once and gets the original message id; a SEND before
// PRODUCER_SUCCESS, a batch beyond the cap and a corrupt checksum are
// each refused with SEND_ERROR and store nothing.
func TestCloudProducePulsar(t *testing.T) {
	dir := t.TempDir()
	const stream, topic, per = "factory.cloudpulsar", "persistent://tributary/factory/cloudpulsar", 300
	a := startProc(t, dir, "cloud", "-config", cloudPulsarConfig(t, dir, "a"))
	b := startProc(t, dir, "cloud", "-config", cloudPulsarConfig(t, dir, "b"))
	acks := &cpAcks{m: map[string]int64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	produce := func(who string, addr string, opts pulsar.ProducerOptions) {
		defer wg.Done()
		cl := pulsarClient(t, addr)
		opts.Topic, opts.Name, opts.SendTimeout = topic, who, time.Minute
		p, err := cl.CreateProducer(opts)
		if err != nil {
			t.Errorf("%s: %v", who, err)
			return
		}
		defer p.Close()
		var sent sync.WaitGroup
		for i := 0; i < per; i++ {
			v := fmt.Sprintf("%s-%04d", who, i)
			sent.Add(1)
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(v), Key: fmt.Sprint("k", i%7),
				Properties: map[string]string{"i": fmt.Sprint(i)}}, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer sent.Done()
				if err != nil {
					t.Errorf("%s: %v", v, err)
					return
				}
				acks.add(t, v, id.EntryID()+int64(max(id.BatchIdx(), 0)))
			})
		}
		sent.Wait()
	}
	// The stream exists before the four start (auto_create on the first
	// lookup), so that all of them find its one partition.
	cl := pulsarClient(t, a.Pulsar)
	if parts, err := cl.TopicPartitions(topic); err != nil || len(parts) != 1 {
		t.Fatalf("partitions %v, %v", parts, err)
	}
	wg.Add(4)
	go produce("a-single", a.Pulsar, pulsar.ProducerOptions{DisableBatching: true})
	go produce("a-batched", a.Pulsar, pulsar.ProducerOptions{CompressionType: pulsar.LZ4, BatchingMaxPublishDelay: 20 * time.Millisecond})
	go produce("b-single", b.Pulsar, pulsar.ProducerOptions{DisableBatching: true})
	go produce("b-batched", b.Pulsar, pulsar.ProducerOptions{CompressionType: pulsar.ZSTD, BatchingMaxPublishDelay: 20 * time.Millisecond})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// A raw producer: a SEND on a, resent with the same sequence id under
	// the same name to b, which tells it the last sequence id first.
	ra := dialPulsarRaw(t, a.Pulsar)
	ra.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0)}},
		&pb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}, []byte("early"))
	if f := ra.recv(); f.Cmd.GetSendError().GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("SEND before PRODUCER_SUCCESS: %v", f.Cmd)
	}
	if last := ra.producer(1, topic, "raw"); last != -1 {
		t.Fatalf("new producer: last sequence id %d", last)
	}
	first := ra.sendValue(1, 0, "raw-0")
	corrupt := ra.frame(1, 1, &pb.MessageMetadata{}, []byte("corrupt"))
	corrupt[len(corrupt)-1] ^= 1
	ra.write(corrupt)
	if f := ra.recv(); f.Cmd.GetSendError().GetError() != pb.ServerError_ChecksumError {
		t.Fatalf("corrupt checksum: %v", f.Cmd)
	}
	var batch []byte
	for i := 0; i <= 10000; i++ { // one beyond the cap (DefaultMaxBatchMessages)
		batch, _ = wire.AppendBatchMessage(batch, &pb.SingleMessageMetadata{}, nil)
	}
	ra.write(ra.frame(1, 2, &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(10001)}, batch))
	if f := ra.recv(); f.Cmd.GetSendError().GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("oversized batch: %v", f.Cmd)
	}
	ra.nc.Close()
	rb := dialPulsarRaw(t, b.Pulsar)
	if last := rb.producer(1, topic, "raw"); last != 0 {
		t.Fatalf("resumed producer: last sequence id %d", last)
	}
	if again := rb.sendValue(1, 0, "raw-0"); again != first {
		t.Fatalf("resend at %d, first at %d", again, first)
	}
	acks.add(t, "raw-0", first)

	n := 4*per + 1
	read := func() []*tributary.Record { return readTable(t, dir, stream) }
	acked := acks.byOffset(t)
	checkCloudTable(t, b.CloudKafka, stream, n, acked, read)

	// A Pulsar consumer reads the same bytes at the same offsets.
	c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[int64]bool{}
	pulsarReceive(ctx, c, func() bool { return len(seen) == n }, func(m pulsar.Message) {
		off := m.ID().EntryID()
		if seen[off] || acked[off] != string(m.Payload()) {
			t.Fatalf("pulsar consumer: offset %d holds %q (seen %v), acknowledged for %q", off, m.Payload(), seen[off], acked[off])
		}
		if v := string(m.Payload()); !strings.HasPrefix(v, "raw") && (m.Key() == "" || m.Properties()["i"] == "") {
			t.Fatalf("pulsar consumer: %s without its key or properties: %q %v", v, m.Key(), m.Properties())
		}
		seen[off] = true
		c.Ack(m)
	})
	if len(seen) != n {
		t.Fatalf("pulsar consumer read %d of %d", len(seen), n)
	}
	a.stop()
	b.stop()
}

// pulsarRaw is a Pulsar client speaking frames by hand.
type pulsarRaw struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialPulsarRaw(t *testing.T, addr string) *pulsarRaw {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &pulsarRaw{t: t, nc: nc, br: bufio.NewReader(nc)}
	c.cmd(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("raw"),
		ProtocolVersion: proto.Int32(19)}})
	if f := c.recv(); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("connect: %v", f.Cmd)
	}
	return c
}

func (c *pulsarRaw) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *pulsarRaw) cmd(cmd *pb.BaseCommand) {
	c.t.Helper()
	b, err := wire.AppendCommand(nil, cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(b)
}

func (c *pulsarRaw) send(cmd *pb.BaseCommand, md *pb.MessageMetadata, payload []byte) {
	c.t.Helper()
	b, err := wire.AppendPayloadCommand(nil, cmd, nil, md, payload)
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(b)
}

// frame is a SEND of producer id with sequence id seq.
func (c *pulsarRaw) frame(id, seq uint64, md *pb.MessageMetadata, payload []byte) []byte {
	c.t.Helper()
	md.ProducerName, md.SequenceId, md.PublishTime = proto.String("raw"), proto.Uint64(seq), proto.Uint64(1)
	b, err := wire.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(id), SequenceId: proto.Uint64(seq), NumMessages: md.NumMessagesInBatch}}, nil, md, payload)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// recv returns the next frame that is not a PING (answered).
func (c *pulsarRaw) recv() wire.Frame {
	c.t.Helper()
	for {
		c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		f, _, err := wire.ReadFrame(c.br, wire.DefaultMaxFrameBytes+wire.FramePadding, nil)
		if err != nil {
			c.t.Fatalf("recv: %v", err)
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			return f
		}
		c.cmd(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	}
}

// producer creates producer id named name on topic's partition 0 and
// returns its last sequence id.
func (c *pulsarRaw) producer(id uint64, topic, name string) int64 {
	c.t.Helper()
	c.cmd(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{Topic: proto.String(topic + "-partition-0"),
		ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id), ProducerName: proto.String(name)}})
	f := c.recv()
	if f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		c.t.Fatalf("producer %s: %v", name, f.Cmd)
	}
	return f.Cmd.ProducerSuccess.GetLastSequenceId()
}

// sendValue sends v with sequence id seq and returns its offset.
func (c *pulsarRaw) sendValue(id, seq uint64, v string) int64 {
	c.t.Helper()
	c.write(c.frame(id, seq, &pb.MessageMetadata{}, []byte(v)))
	f := c.recv()
	r := f.Cmd.GetSendReceipt()
	if f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT || r.GetSequenceId() != seq || r.GetMessageId().GetLedgerId() != 1 {
		c.t.Fatalf("send %s: %v", v, f.Cmd)
	}
	return int64(r.GetMessageId().GetEntryId())
}

// TestCloudProducePulsarACL: a producer without the ACL's produce right
// (anonymous may only consume here) is refused with AuthorizationError,
// by pulsar-client-go and on the raw wire, and nothing is created.
func TestCloudProducePulsarACL(t *testing.T) {
	dir := t.TempDir()
	path := cloudPulsarConfig(t, dir, "a")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, "security:\n  allow_anonymous: true\n  acl:\n    - principal: anonymous\n      allow: [consume]\n      streams: [\"factory.*\"]\n")
	f.Close()
	a := startProc(t, dir, "cloud", "-config", path)
	const topic = "persistent://tributary/factory/cloudacl"
	if _, err := pulsarClient(t, a.Pulsar).CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
		t.Fatal("a producer without produce rights was created")
	}
	c := dialPulsarRaw(t, a.Pulsar)
	c.cmd(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{Topic: proto.String(topic + "-partition-0"),
		ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}})
	if f := c.recv(); f.Cmd.GetError().GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("producer without produce rights: %v", f.Cmd)
	}
	c.cmd(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String(topic), RequestId: proto.Uint64(2)}})
	if f := c.recv(); f.Cmd.GetPartitionMetadataResponse().GetError() != pb.ServerError_TopicNotFound {
		t.Fatalf("the refused producer created the stream: %v", f.Cmd)
	}
	a.stop()
}
