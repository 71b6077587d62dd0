package pulsar

// The message cache: each message's encoded tail (checksum, metadata and
// payload: appendMessageTail), kept so that a message dispatched again —
// to another subscription of the topic, or redelivered — is not encoded
// again; only its head (consumer id, message id, redelivery count, broker
// entry metadata) is.
//
// Invariants: a cached tail is used only for the very record object it was
// encoded from (the table reader hands out the same *tributary.Record
// for an offset as long as its row group stays decoded, and records are
// never modified), so a stream deleted and created again, or a row group
// decoded anew, can never be served an old tail; the cache is an LRU of
// blocks of blockOffsets offsets of one topic partition, bounded by
// MessageCacheBytes of tails (the records they were encoded from are
// held too, and are at most as large).

import (
	"sync"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/lru"
)

// DefaultMessageCacheBytes is Config.MessageCacheBytes' default.
const DefaultMessageCacheBytes = 64 << 20

const (
	blockOffsets  = 256
	blockOverhead = blockOffsets * (8 + 24) // the arrays of an empty block
)

type msgKey struct {
	topic string // full partition topic name
	block int64  // offset / blockOffsets
}

type msgBlock struct {
	mu    sync.Mutex
	recs  [blockOffsets]*tributary.Record
	tails [blockOffsets][]byte
	size  int64
}

type msgCache struct{ blocks *lru.Cache }

func newMsgCache(maxBytes int64) *msgCache { return &msgCache{blocks: lru.New(maxBytes)} }

// appendMessages appends the MESSAGE frames of ds for consumer id of the
// partition topic, encoding the tails of messages not cached yet.
func (mc *msgCache) appendMessages(b []byte, topic string, id uint64, partition int32, ds []Delivery, bem bool) []byte {
	var blk *msgBlock
	key := msgKey{topic, -1}
	var grew int64
	flush := func() {
		if blk != nil && grew > 0 {
			blk.mu.Lock()
			size := blk.size
			blk.mu.Unlock()
			mc.blocks.Add(key, blk, size+blockOverhead) // the block's size changed
		}
		grew = 0
	}
	for _, d := range ds {
		if d.Offset < 0 || d.Record == nil {
			b = appendMessage(b, id, partition, d, bem)
			continue
		}
		if n := d.Offset / blockOffsets; n != key.block || blk == nil {
			flush()
			key.block = n
			if v, ok := mc.blocks.Get(key); ok {
				blk = v.(*msgBlock)
			} else {
				blk = &msgBlock{}
				mc.blocks.Add(key, blk, blockOverhead)
			}
		}
		i := d.Offset % blockOffsets
		blk.mu.Lock()
		tail := blk.tails[i]
		if blk.recs[i] != d.Record {
			tail = appendMessageTail(nil, d.Record, d.Offset)
			blk.size += int64(len(tail) - len(blk.tails[i]))
			grew += int64(len(tail))
			blk.recs[i], blk.tails[i] = d.Record, tail
		}
		blk.mu.Unlock()
		b = appendCachedMessage(b, id, partition, d, bem, tail)
	}
	flush()
	return b
}
