package tables

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/wal"
)

// entriesWAL is a WAL whose partition 3 of "ns.kafka" holds, in this
// order: 2 records, then nBatches Kafka batches of per records each
// (keys null / empty / set, headers null / many with null, empty and set
// values; one producer, sequences running on), then 2 records, then a
// last batch, all at accept time ts. It returns the WAL and the offsets'
// end.
func entriesWAL(t *testing.T, nBatches, per int, ts int64) (*wal.WAL, int64) {
	t.Helper()
	w, err := wal.Open(wal.Options{Path: filepath.Join(t.TempDir(), "wal.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	rec := func(i int) *tributary.Record {
		r := &tributary.Record{Stream: "ns.kafka", Partition: 3, Epoch: 2, Timestamp: ts, Topic: "ns.kafka",
			Value: []byte(fmt.Sprint("record ", i)), Source: "kafka", ClientID: "c", Node: "n1", ProducerID: -1, ProducerEpoch: -1, Sequence: -1}
		switch i % 3 {
		case 0:
			r.Key, r.Headers = []byte("k"), []tributary.Header{{Key: "a", Value: nil}}
		case 1:
			r.Key, r.Headers, r.Principal, r.ProducerTimestamp = []byte{}, []tributary.Header{}, "bob", 1234
		}
		return r
	}
	seq := int32(0)
	batch := func(b int) {
		var rs []kafkatest.Rec
		for i := range per {
			r := kafkatest.Rec{Value: bytes.Repeat([]byte{byte(b), byte(i)}, 1+i%40), TSDelta: int64(i * 3)}
			switch i % 4 {
			case 0: // null key, no headers (null)
			case 1:
				r.Key, r.Value = []byte{}, []byte{}
			case 2:
				r.Key = []byte(fmt.Sprint("key-", b, "-", i))
				r.Headers = []tributary.Header{{Key: "h1", Value: []byte("v")}, {Key: "h2", Value: nil}, {Key: "", Value: []byte{}}, {Key: "h4", Value: []byte("four")}}
			case 3:
				r.Key, r.Value = []byte("k"), nil
				r.Headers = []tributary.Header{{Key: "only", Value: []byte{}}}
			}
			rs = append(rs, r)
		}
		raw := kafkatest.Batch(kafkatest.BatchOpts{PID: 77, Epoch: 1, Seq: seq, FirstTS: 1_700_000_000_000 + int64(b)}, rs...)
		seq += int32(per)
		done := make(chan error, 1)
		w.Submit(wal.Op{Kind: wal.OpAppend, Batch: &wal.Batch{Stream: "ns.kafka", Partition: 3, Epoch: 2, Topic: "ns.kafka", Source: "kafka",
			ClientID: "gw", Node: "n1", Principal: map[bool]string{true: "alice"}[b%2 == 0], Records: raw, Timestamp: ts}, Done: func(wr wal.Result) { done <- wr.Err }})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := w.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{rec(0), rec(1)}}).Err; err != nil {
		t.Fatal(err)
	}
	for b := range nBatches {
		batch(b)
	}
	if err := w.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{rec(2), rec(3)}}).Err; err != nil {
		t.Fatal(err)
	}
	batch(nBatches)
	st, _ := w.Partition("ns.kafka", 3)
	return w, st.Next
}

// TestParquetEntriesMatchRecords: a file written from WAL entries, the
// Kafka batches read in place (WriteParquetEntries), is byte for byte the
// file WriteParquet writes from the records Read decodes, with the same
// stats: from the start, from inside a batch, ending inside a batch, and
// across row groups and fill chunks that split batches.
func TestParquetEntriesMatchRecords(t *testing.T) {
	w, end := entriesWAL(t, 12, 1500, 1_700_000_000_000_000) // 18,000+ rows: two row groups
	cases := []struct {
		name       string
		from       int64
		maxRecords int
	}{
		{"whole", 0, 0},
		{"first record only", 0, 1},
		{"from inside a batch", 2 + 700, 0},
		{"ends inside a batch", 1, 3000},
		{"inside one batch", 2 + 1500 + 10, 20},
		{"last batch and the records before it", end - 1500 - 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			recs, err := w.Read("ns.kafka", 3, c.from, c.maxRecords, 0)
			if err != nil {
				t.Fatal(err)
			}
			ents, _, err := w.ReadEntriesInto(nil, "ns.kafka", 3, c.from, c.maxRecords, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range ents {
				n += e.Len()
			}
			if n != len(recs) || ents[0].First() != recs[0].Offset {
				t.Fatalf("entries cover %d records from %d, Read gave %d from %d", n, ents[0].First(), len(recs), recs[0].Offset)
			}
			for _, o := range []ParquetOptions{{}, {ZstdLevel: 7}} {
				var a, b bytes.Buffer
				sa, err := o.WriteParquet(&a, recs)
				if err != nil {
					t.Fatal(err)
				}
				sb, err := o.WriteParquetEntries(&b, ents)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a.Bytes(), b.Bytes()) {
					t.Fatalf("level %d: the files differ (%d and %d bytes)", o.ZstdLevel, a.Len(), b.Len())
				}
				if sa != sb {
					t.Fatalf("stats differ:\nrecords %+v\nentries %+v", sa, sb)
				}
			}
			if c.name == "whole" {
				if recs[0].Key == nil || recs[2].Key != nil || recs[2].Headers != nil || recs[3].Key == nil || len(recs[3].Key) != 0 ||
					len(recs[4].Headers) != 4 || recs[4].Headers[1].Value != nil || recs[5].Value != nil {
					t.Fatal("the fixture lost its null/empty keys or headers")
				}
			}
		})
	}
}

// TestParquetEntriesRejectBad: entries that are not consecutive, of two
// partitions, or a view past its batch's records, or a batch whose record
// bytes are broken, are refused with an error, never a panic.
func TestParquetEntriesRejectBad(t *testing.T) {
	w, _ := entriesWAL(t, 2, 10, 1_700_000_000_000_000)
	ents, _, err := w.ReadEntriesInto(nil, "ns.kafka", 3, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]func([]tributary.Entry) []tributary.Entry{
		"gap": func(es []tributary.Entry) []tributary.Entry { return append(es[:1:1], es[3:]...) },
		"other partition": func(es []tributary.Entry) []tributary.Entry {
			v := *es[2].Batch
			v.Partition = 4
			es[2] = tributary.Entry{Batch: &v}
			return es
		},
		"view past the batch": func(es []tributary.Entry) []tributary.Entry {
			v := *es[2].Batch
			v.Count++
			es[2] = tributary.Entry{Batch: &v}
			return es[:3]
		},
		"broken record bytes": func(es []tributary.Entry) []tributary.Entry {
			v := *es[2].Batch
			v.Records = bytes.Clone(v.Records)
			v.Records[61] = 0x7f // the first record's length: far past the end
			es[2] = tributary.Entry{Batch: &v}
			return es
		},
		"truncated batch": func(es []tributary.Entry) []tributary.Entry {
			v := *es[2].Batch
			v.Records = v.Records[:len(v.Records)-3]
			es[2] = tributary.Entry{Batch: &v}
			return es
		},
		"none": func([]tributary.Entry) []tributary.Entry { return nil },
	}
	for name, f := range bad {
		es := f(append([]tributary.Entry(nil), ents...))
		if _, err := WriteParquetEntries(&bytes.Buffer{}, es); err == nil {
			t.Errorf("%s: written", name)
		}
	}
}

// BenchmarkWriteParquetEntries compares the two paths on 1 KiB Kafka
// records stored as batches of 100: records (Read, then WriteParquet)
// against entries (ReadEntries, then WriteParquetEntries).
func BenchmarkWriteParquetEntries(b *testing.B) {
	w, err := wal.Open(wal.Options{Path: filepath.Join(b.TempDir(), "wal.db"), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	for bi := range 100 {
		var rs []kafkatest.Rec
		for i := range 100 {
			rs = append(rs, kafkatest.Rec{Value: bytes.Repeat([]byte{byte(bi), byte(i)}, 512), TSDelta: int64(i)})
		}
		done := make(chan error, 1)
		w.Submit(wal.Op{Kind: wal.OpAppend, Batch: &wal.Batch{Stream: "ns.kafka", Partition: 0, Topic: "ns.kafka", Source: "kafka",
			ClientID: "gw", Node: "n1", Records: kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, FirstTS: 1}, rs...)}, Done: func(wr wal.Result) { done <- wr.Err }})
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.Run("records", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			recs, err := w.Read("ns.kafka", 0, 0, 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := WriteParquet(&bytes.Buffer{}, recs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("entries", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			ents, _, err := w.ReadEntriesInto(nil, "ns.kafka", 0, 0, 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := WriteParquetEntries(&bytes.Buffer{}, ents); err != nil {
				b.Fatal(err)
			}
		}
	})
}
