package pulsar

// consumer: the server side of one CommandSubscribe, the Consumer the
// subscription dispatches to.
//
// Invariant: once detach returns, the consumer queues nothing more on its
// connection (Deliver and ActiveChanged check closed under the same lock),
// so a CLOSE_CONSUMER queued after detach is the consumer's last frame.

import (
	"math"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

// ledgerID is the ledger id of every message id: the partition's
// generation. Never -1 or MaxInt64 (earliest and latest to clients).
const ledgerID = 1

type consumer struct {
	c        *conn
	id       uint64
	name     string
	priority int32
	topic    topicName
	full     string // full partition topic name
	subName  string
	sub      *Subscription // set once subscribed, on the read goroutine

	mu     sync.Mutex
	closed bool
}

func (k *consumer) Name() string     { return k.name }
func (k *consumer) Priority() int32  { return k.priority }
func (k *consumer) partition() int32 { return k.topic.partition }

// Deliver queues one MESSAGE frame per delivery, the messages' tails
// from the server's message cache (msgcache.go).
func (k *consumer) Deliver(ds []Delivery) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || len(ds) == 0 {
		return
	}
	bem := k.c.brokerEntry.Load()
	mc := k.c.s.msgs
	k.c.enqueue(func(b []byte) ([]byte, error) {
		return mc.appendMessages(b, k.full, k.id, k.partition(), ds, bem), nil
	})
}

// Backlogged is its connection's: see conn.Backlogged.
func (k *consumer) Backlogged() bool { return k.c.Backlogged() }

// ActiveChanged queues ACTIVE_CONSUMER_CHANGE.
func (k *consumer) ActiveChanged(active bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return
	}
	k.c.send(&pb.BaseCommand{Type: pb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(),
		ActiveConsumerChange: &pb.CommandActiveConsumerChange{ConsumerId: proto.Uint64(k.id), IsActive: proto.Bool(active)}})
}

// detach stops deliveries to k and removes it from its subscription,
// which hands its unacknowledged messages back.
func (k *consumer) detach() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
	if k.sub != nil {
		k.sub.Remove(k)
	}
}

// closeFromServer detaches k and tells its client with CLOSE_CONSUMER
// (the client reconnects it), unless it is already gone.
func (k *consumer) closeFromServer() {
	if k.c.dropConsumer(k.id) == nil {
		return
	}
	k.detach()
	k.c.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
		ConsumerId: proto.Uint64(k.id), RequestId: proto.Uint64(0)}})
}

// messageID is the message id of offset off in partition p.
func messageID(off int64, p int32) *pb.MessageIdData {
	return &pb.MessageIdData{LedgerId: proto.Uint64(ledgerID), EntryId: proto.Uint64(uint64(off)), Partition: proto.Int32(p)}
}

// Special message ids clients send.
const (
	earliestID = math.MaxUint64 // ledger and entry -1
	latestID   = math.MaxInt64
)

// offsetOf is the offset a client's message id names; ok is false for ids
// this server never hands out.
func offsetOf(id *pb.MessageIdData) (int64, bool) {
	if id.GetLedgerId() != ledgerID || id.GetEntryId() > math.MaxInt64 {
		return 0, false
	}
	return int64(id.GetEntryId()), true
}

// offsetsOf converts message ids, skipping unknown ones.
func offsetsOf(ids []*pb.MessageIdData) []int64 {
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		if off, ok := offsetOf(id); ok {
			out = append(out, off)
		}
	}
	return out
}
