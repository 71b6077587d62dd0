package uplink

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// entryListener is a ReleaseListener that takes entries
// (EntryReleaseListener), decoding them during the call (their bytes are
// reused after it); Releasing must not be called.
type entryListener struct {
	mu   sync.Mutex
	recs []*tributary.Record
	t    *testing.T
}

func (l *entryListener) Releasing(string, int32, []*tributary.Record) error {
	l.t.Error("Releasing called on an EntryReleaseListener")
	return nil
}

func (l *entryListener) ReleasingEntries(_ string, _ int32, es []tributary.Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs, err := wal.Records(es)
	l.recs = append(l.recs, recs...)
	return err
}

// TestUplinkKafkaBatchesInPlace: a raw stream whose WAL holds Kafka batch
// entries between records is committed from the entries (batches encoded
// in place) over several passes: the table holds every record once with
// its key (null, empty, set), value and headers (none, several, null and
// empty values) and producer timestamp; an entry listener sees exactly
// the released records as entries, and a records listener the same
// records decoded.
func TestUplinkKafkaBatchesInPlace(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	seq := int32(0)
	for b := range 12 {
		if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: "a.kb", Partition: 0, Topic: "a.kb", Source: "mqtt",
			Value: []byte(fmt.Sprint("mqtt ", b)), Headers: []tributary.Header{{Key: "p", Value: []byte("q")}}}}}).Err; err != nil {
			t.Fatal(err)
		}
		var rs []kafkatest.Rec
		for i := range 50 {
			r := kafkatest.Rec{Value: bytes.Repeat([]byte{byte('a' + i%26)}, 100+i), TSDelta: int64(i)}
			switch i % 3 {
			case 1:
				r.Key, r.Headers = []byte{}, []tributary.Header{{Key: "h", Value: nil}, {Key: "", Value: []byte{}}, {Key: "x", Value: []byte("y")}}
			case 2:
				r.Key = []byte(fmt.Sprint("k", i))
			}
			rs = append(rs, r)
		}
		raw := kafkatest.Batch(kafkatest.BatchOpts{PID: 9, Epoch: 0, Seq: seq, FirstTS: 1_700_000_000_000}, rs...)
		seq += 50
		done := make(chan error, 1)
		e.wal.Submit(wal.Op{Kind: wal.OpAppend, Batch: &wal.Batch{Stream: "a.kb", Partition: 0, Topic: "a.kb", Source: "kafka",
			ClientID: "gw", Node: "n1", Principal: "alice", Records: raw}, Done: func(wr wal.Result) { done <- wr.Err }})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	want, err := e.wal.Read("a.kb", 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var released []*tributary.Record
	el := &entryListener{t: t}
	u := New(Config{MaxBatchBytes: 8 << 10, Node: "n1", Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	u.OnRelease(el)
	u.OnRelease(listenerFuncs{releasing: func(_ string, _ int32, recs []*tributary.Record) error {
		mu.Lock()
		defer mu.Unlock()
		released = append(released, recs...)
		return nil
	}})
	for i := 0; unreleased(e.wal) > 0; i++ {
		if i > 100 {
			t.Fatal("not drained after 100 passes")
		}
		if err := u.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c := u.Stats().Commits; c < 3 {
		t.Fatalf("%d commits: want several passes", c)
	}
	rows, err := e.cat.ScanSorted(ctx, "a.kb", tables.ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		w := want[i]
		if r.Offset != w.Offset || !reflect.DeepEqual(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) ||
			!sameHeaders(r.Headers, w.Headers) || r.ProducerTimestamp != w.ProducerTimestamp || r.Principal != w.Principal || r.Source != w.Source {
			t.Fatalf("row %d:\n got %+v\nwant %+v", i, r, w)
		}
	}
	if got := el.recs; !reflect.DeepEqual(got, want) || !reflect.DeepEqual(released, want) {
		t.Fatalf("listeners saw %d entries' records and %d records, want the %d records", len(el.recs), len(released), len(want))
	}
}

// sameHeaders compares headers as the table stores them: a null header
// value reads back null, an empty one empty.
func sameHeaders(a, b []tributary.Header) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || (a[i].Value == nil) != (b[i].Value == nil) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// TestTrimEntries: a committed range ending inside a batch hands the
// listeners the batch's records up to the range's end only.
func TestTrimEntries(t *testing.T) {
	v := &tributary.BatchView{Offset: 10, Count: 5, Skip: 2}
	es := []tributary.Entry{{Record: &tributary.Record{Offset: 9}}, {Batch: v}, {Record: &tributary.Record{Offset: 15}}}
	for to, want := range map[int64][]int{9: {}, 10: {1}, 12: {1, 2}, 15: {1, 5}, 16: {1, 5, 1}, 99: {1, 5, 1}} {
		got := trimEntries(append([]tributary.Entry(nil), es...), to)
		var lens []int
		for _, e := range got {
			lens = append(lens, e.Len())
		}
		if fmt.Sprint(lens) != fmt.Sprint(want) && !(len(lens) == 0 && len(want) == 0) {
			t.Errorf("to %d: lengths %v, want %v", to, lens, want)
		}
	}
	if v.Count != 5 {
		t.Fatal("trimming changed the view")
	}
}
