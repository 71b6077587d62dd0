package pulsar

// The message cache: each message's encoded tail (checksum, metadata and
// payload: appendMessageTail), kept from its second dispatch on — to
// another subscription of the topic, or a redelivery — so that it is not
// encoded again; only its head (consumer id, message id, redelivery
// count, broker entry metadata) is. A message dispatched once (one
// subscription reading the topic once, the common case) is encoded
// straight into its frame, as without the cache: copying its tail into
// the cache would cost more than encoding it.
//
// Invariants: a cached tail is used only for the very record object it was
// encoded from (the table reader hands out the same *tributary.Record
// for an offset as long as its row group stays decoded, and records are
// never modified), so a stream deleted and created again, or a row group
// decoded anew, can never be served an old tail; the cache is an LRU of
// blocks of blockOffsets offsets of one topic partition, bounded by
// MessageCacheBytes of tails and of the records they remember (which the
// blocks keep alive).

import (
	"bytes"
	"encoding/binary"
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

// recordBytes is what a remembered record holds alive, roughly.
func recordBytes(r *tributary.Record) int64 {
	n := int64(160 + len(r.Key) + len(r.Value) + len(r.Topic) + len(r.Node) + len(r.ClientID))
	for _, h := range r.Headers {
		n += int64(32 + len(h.Key) + len(h.Value))
	}
	return n
}

func newMsgCache(maxBytes int64) *msgCache { return &msgCache{blocks: lru.New(maxBytes)} }

// appendMessages appends the MESSAGE frames of ds for consumer id of the
// partition topic, encoding the tails of messages not cached yet.
func (mc *msgCache) appendMessages(b []byte, topic string, id uint64, partition int32, ds []Delivery, bem bool) []byte {
	var blk *msgBlock
	key := msgKey{topic, -1}
	grew := 0 // entries of blk changed since its size was given to the LRU
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
		switch {
		case blk.recs[i] == d.Record && blk.tails[i] != nil:
			b = appendCachedMessage(b, id, partition, d, bem, blk.tails[i])
		case blk.recs[i] == d.Record:
			// Dispatched a second time: encode it once more, and keep
			// the tail for the next times.
			start := len(b)
			b = appendMessageHead(b, id, partition, d, bem)
			at := len(b)
			b = appendMessageTail(b, d.Record, d.Offset)
			binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
			blk.tails[i] = bytes.Clone(b[at:])
			blk.size += int64(len(blk.tails[i]))
			grew++
		default:
			// First dispatch (of this record object): encoded straight
			// into the frame; only the record is remembered (and
			// counted: the block keeps it alive).
			if old := blk.recs[i]; old != nil {
				blk.size -= recordBytes(old) + int64(len(blk.tails[i]))
			}
			blk.recs[i], blk.tails[i] = d.Record, nil
			blk.size += recordBytes(d.Record)
			grew++
			b = appendMessage(b, id, partition, d, bem)
		}
		blk.mu.Unlock()
	}
	flush()
	return b
}
