package pulsar

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tributary-io/tributary"
)

func testDeliveries(from, n int, valueSize int) []Delivery {
	ds := make([]Delivery, n)
	for i := range ds {
		off := int64(from + i)
		r := &tributary.Record{Offset: off, Timestamp: 1700000000123456 + off, Node: "edge-1", Value: bytes.Repeat([]byte{byte(off)}, valueSize)}
		if off%2 == 0 {
			r.Key = []byte(fmt.Sprintf("k%d", off))
			r.Headers = []tributary.Header{{Key: "h", Value: []byte("v")}}
		}
		ds[i] = Delivery{Entry: Entry{Offset: off, Record: r}, RedeliveryCount: uint32(off % 3)}
	}
	return ds
}

// framesOf is what appendMessage encodes for ds, one frame after another.
func framesOf(id uint64, partition int32, ds []Delivery, bem bool) []byte {
	var b []byte
	for _, d := range ds {
		b = appendMessage(b, id, partition, d, bem)
	}
	return b
}

// Frames from the cache are byte for byte those appendMessage encodes
// (which TestAppendMessageMatchesProtobuf holds to protobuf's encoding):
// at the first dispatch (encoded straight into the frame), the second
// (tail kept) and later ones (tail from the cache), for another consumer
// too, across blocks.
func TestMessageCacheFramesMatch(t *testing.T) {
	mc := newMsgCache(DefaultMessageCacheBytes)
	ds := testDeliveries(blockOffsets-10, 600, 100)
	want := framesOf(7, 3, ds, true)
	for pass := range 3 {
		got := mc.appendMessages([]byte("x"), "persistent://t/n/s-partition-3", 7, 3, ds, true)
		if !bytes.Equal(got[1:], want) {
			t.Fatalf("pass %d: cached frames differ from appendMessage's", pass)
		}
		v, _ := mc.blocks.Get(msgKey{"persistent://t/n/s-partition-3", ds[20].Offset / blockOffsets})
		if cached := v.(*msgBlock).tails[ds[20].Offset%blockOffsets] != nil; cached != (pass > 0) {
			t.Fatalf("pass %d: tail cached = %v", pass, cached)
		}
	}
	// Same records, another consumer without broker entry metadata.
	if got := mc.appendMessages(nil, "persistent://t/n/s-partition-3", 9, 3, ds, false); !bytes.Equal(got, framesOf(9, 3, ds, false)) {
		t.Fatal("frames for a second consumer differ")
	}
}

// A tail is used only for the record object it was encoded from: the
// same offset from another record (the table recreated, or its row group
// decoded again) is encoded anew.
func TestMessageCacheNeverServesAnotherRecord(t *testing.T) {
	mc := newMsgCache(DefaultMessageCacheBytes)
	old := testDeliveries(0, 5, 10)
	mc.appendMessages(nil, "topic", 1, 0, old, false)
	mc.appendMessages(nil, "topic", 1, 0, old, false) // tails kept
	fresh := testDeliveries(0, 5, 10)
	for i := range fresh {
		fresh[i].Record.Value = []byte(fmt.Sprintf("new value %d", i))
	}
	if got := mc.appendMessages(nil, "topic", 1, 0, fresh, false); !bytes.Equal(got, framesOf(1, 0, fresh, false)) {
		t.Fatal("a cached tail of another record was served")
	}
}

// Under a small cap the cache evicts whole blocks and stays bounded.
func TestMessageCacheBounded(t *testing.T) {
	const capBytes = 256 << 10
	mc := newMsgCache(capBytes)
	for from := 0; from < 20*blockOffsets; from += blockOffsets {
		ds := testDeliveries(from, blockOffsets, 1000)
		mc.appendMessages(nil, "topic", 1, 0, ds, false)
		mc.appendMessages(nil, "topic", 1, 0, ds, false) // tails kept
	}
	// One block of 256 × ~1 KiB tails and records may exceed the cap
	// alone (the newest is always kept); never more than that beyond it.
	if size := mc.blocks.Size(); size > capBytes+blockOffsets*2400+blockOverhead {
		t.Fatalf("cache holds %d bytes under a %d cap", size, capBytes)
	}
	if n := mc.blocks.Len(); n >= 20 {
		t.Fatalf("%d blocks kept: nothing evicted", n)
	}
}
