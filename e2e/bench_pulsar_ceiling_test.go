//go:build bench

package e2e

import (
	"bufio"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
	"github.com/tributary-io/tributary/pulsar/wire"
)

// pulsarCeiling is the Pulsar counterpart of kfake in the Kafka
// benchmarks: the fastest server pulsar-client-go can read from on this
// machine. It serves one topic (one partition) of n messages whose frames
// are all encoded before the clock starts, as tributary would send them
// (ledger 1, entry = offset, partition 0, broker entry metadata, the same
// metadata fields and 1 KiB payloads of benchRecord), answers FLOW with
// one write of the next frames from memory, and ignores acks. It is a
// yardstick for TestBenchPulsarConsume only: it checks nothing and
// stores nothing.
type pulsarCeiling struct {
	ln     net.Listener
	frames []byte // every message frame, consumer id 1
	ends   []int  // ends[i] = end of message i in frames
	wg     sync.WaitGroup
}

func newPulsarCeiling(t *testing.T, n int) *pulsarCeiling {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc := &pulsarCeiling{ln: ln, ends: make([]int, n)}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		r := benchRecord(int64(i), rng)
		off := uint64(i)
		publish := uint64(r.Timestamp / 1000)
		cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
			ConsumerId: proto.Uint64(1),
			MessageId:  &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(off), Partition: proto.Int32(0)},
		}}
		bem := &pb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(publish), Index: proto.Uint64(off)}
		md := &pb.MessageMetadata{ProducerName: proto.String(r.Node), SequenceId: proto.Uint64(off),
			PublishTime: proto.Uint64(publish), PartitionKey: proto.String(string(r.Key))}
		if pc.frames, err = wire.AppendPayloadCommand(pc.frames, cmd, bem, md, r.Value); err != nil {
			t.Fatal(err)
		}
		pc.ends[i] = len(pc.frames)
	}
	pc.wg.Add(1)
	go func() {
		defer pc.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			pc.wg.Add(1)
			go func() {
				defer pc.wg.Done()
				pc.serve(t, c)
			}()
		}
	}()
	return pc
}

func (pc *pulsarCeiling) Addr() string { return pc.ln.Addr().String() }

func (pc *pulsarCeiling) Close() {
	pc.ln.Close()
	pc.wg.Wait()
}

// serve answers one connection: the handshake and lookups a consumer
// makes, then FLOW permits with frames. Messages are written by a writer
// goroutine so that reading acks never waits for a large write.
func (pc *pulsarCeiling) serve(t *testing.T, c net.Conn) {
	defer c.Close()
	type out struct {
		cmd         *pb.BaseCommand
		permits     int
		unsupported string
	}
	q := make(chan out, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := bufio.NewWriterSize(c, 1<<20)
		next := 0
		var buf []byte
		for o := range q {
			if o.cmd != nil {
				var err error
				if buf, err = wire.AppendCommand(buf[:0], o.cmd); err != nil {
					t.Error(err)
					return
				}
				w.Write(buf)
			}
			if o.permits > 0 && next < len(pc.ends) {
				from := 0
				if next > 0 {
					from = pc.ends[next-1]
				}
				next = min(next+o.permits, len(pc.ends))
				w.Write(pc.frames[from:pc.ends[next-1]])
			}
			if len(q) == 0 {
				if w.Flush() != nil {
					return
				}
			}
		}
	}()
	defer func() { close(q); <-done }()
	var buf []byte
	for {
		var f wire.Frame
		var err error
		f, buf, err = wire.ReadFrame(c, 5<<20, buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && err.Error() != "EOF" {
				t.Logf("ceiling: %v", err)
			}
			return
		}
		cmd := f.Cmd
		success := func(id uint64) *pb.BaseCommand {
			return &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(id)}}
		}
		switch cmd.GetType() {
		case pb.BaseCommand_CONNECT:
			q <- out{cmd: &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
				ServerVersion: proto.String("ceiling"), ProtocolVersion: proto.Int32(cmd.GetConnect().GetProtocolVersion()),
				MaxMessageSize: proto.Int32(5 << 20)}}}
		case pb.BaseCommand_PING:
			q <- out{cmd: &pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}}}
		case pb.BaseCommand_PONG, pb.BaseCommand_ACK:
		case pb.BaseCommand_PARTITIONED_METADATA:
			q <- out{cmd: &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(),
				PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
					RequestId: proto.Uint64(cmd.GetPartitionMetadata().GetRequestId()), Partitions: proto.Uint32(1),
					Response: pb.CommandPartitionedTopicMetadataResponse_Success.Enum()}}}
		case pb.BaseCommand_LOOKUP:
			q <- out{cmd: &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
				RequestId: proto.Uint64(cmd.GetLookupTopic().GetRequestId()), BrokerServiceUrl: proto.String("pulsar://" + pc.Addr()),
				Response: pb.CommandLookupTopicResponse_Connect.Enum(), Authoritative: proto.Bool(true)}}}
		case pb.BaseCommand_SUBSCRIBE:
			if id := cmd.GetSubscribe().GetConsumerId(); id != 1 {
				t.Errorf("ceiling: consumer id %d; its frames are encoded for consumer 1", id)
				return
			}
			q <- out{cmd: success(cmd.GetSubscribe().GetRequestId())}
		case pb.BaseCommand_FLOW:
			q <- out{permits: int(cmd.GetFlow().GetMessagePermits())}
		case pb.BaseCommand_CLOSE_CONSUMER:
			q <- out{cmd: success(cmd.GetCloseConsumer().GetRequestId())}
		default:
			t.Logf("ceiling: %v not served", cmd.GetType())
		}
	}
}
