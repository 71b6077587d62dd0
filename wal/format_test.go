package wal

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tributary-io/tributary"
)

// The on-disk format 2 fixture: testdata/format2.db.gz is a WAL written
// by this package's format 2 (chunks of EncodeRecord records, versions 1
// and 2) before any later change of the format, by
//
//	TRIBUTARY_WRITE_WAL_FIXTURE=1 go test -run TestFormat2Fixture ./wal/
//
// Every later version must open it and read exactly fixtureRecords from
// it: data directories of nodes that ran this format stay readable.
const fixturePath = "testdata/format2.db.gz"

// fixtureRecords are the records of the fixture, by partition, with
// their offsets; the first fixtureReleased of each are released.
func fixtureRecords() map[pkey][]*tributary.Record {
	out := map[pkey][]*tributary.Record{}
	mq := pkey{"factory.mqtt", 0}
	for i := range 300 {
		out[mq] = append(out[mq], &tributary.Record{Stream: mq.stream, Partition: 0, Offset: int64(i), Epoch: 1,
			Timestamp: 1_700_000_000_000_000 + int64(i), Topic: fmt.Sprintf("site/line%d/temp", i%7),
			Value: bytes.Repeat([]byte{byte(i)}, i%97), Source: "mqtt", ClientID: "dev-" + fmt.Sprint(i%5), Node: "edge-1",
			ProducerID: -1, ProducerEpoch: -1, Sequence: -1})
	}
	kf := pkey{"factory.kafka", 3}
	for i := range 200 {
		r := &tributary.Record{Stream: kf.stream, Partition: 3, Offset: 40 + int64(i), Epoch: 2,
			Timestamp: 1_700_000_100_000_000 + int64(i), Topic: kf.stream, Key: []byte(fmt.Sprint("k", i)),
			Value: []byte(fmt.Sprint("value ", i)), Source: "kafka", ClientID: "gw", Node: "edge-1",
			ProducerID: 77, ProducerEpoch: 0, Sequence: int32(i), ProducerTimestamp: 1_700_000_000_000 + int64(i)}
		switch i % 4 {
		case 0:
			r.Key = nil
		case 1:
			r.Key, r.Value = []byte{}, []byte{}
		case 2:
			r.Headers = []tributary.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}, {Key: "", Value: []byte{}}}
		}
		if i%3 == 0 {
			r.Principal = "gateway-" + fmt.Sprint(i%2) // record format 2
		}
		out[kf] = append(out[kf], r)
	}
	return out
}

// fixtureReleased is how many leading records of each partition the
// fixture released (the mqtt one inside a chunk, so a partly released
// chunk is in it).
var fixtureReleased = map[pkey]int{{"factory.mqtt", 0}: 120, {"factory.kafka", 3}: 0}

func writeFixture(t *testing.T, path string) {
	w, err := Open(Options{Path: path, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for pk, recs := range fixtureRecords() {
		if err := w.Apply(context.Background(), Op{Kind: OpEnsure, Stream: pk.stream, Partition: pk.partition, Offset: recs[0].Offset}).Err; err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(recs); i += 50 { // a chunk per 50 records
			var batch []*tributary.Record
			for _, r := range recs[i:min(i+50, len(recs))] {
				c := *r
				batch = append(batch, &c)
			}
			if err := w.Apply(ctx, Op{Kind: OpAppend, Records: batch}).Err; err != nil {
				t.Fatal(err)
			}
		}
		if n := fixtureReleased[pk]; n > 0 {
			if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: pk.stream, Partition: pk.partition, Offset: recs[n].Offset}).Err; err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The WAL's file is sized for its budget; a compacted copy (the same
	// keys and values) keeps the fixture small.
	src, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := bolt.Open(path+".compact", 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.Compact(dst, src, 0); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".compact", path); err != nil {
		t.Fatal(err)
	}
}

// TestFormat2Fixture: a WAL written by format 2 opens, reads exactly what
// was written (from its start, from inside a chunk and inside the partly
// released chunk), keeps its byte count, and takes appends and releases.
func TestFormat2Fixture(t *testing.T) {
	if os.Getenv("TRIBUTARY_WRITE_WAL_FIXTURE") != "" {
		raw := filepath.Join(t.TempDir(), "wal.db")
		writeFixture(t, raw)
		b, err := os.ReadFile(raw)
		if err != nil {
			t.Fatal(err)
		}
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		if err := os.WriteFile(fixturePath, z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d bytes (%d uncompressed)", fixturePath, z.Len(), len(b))
	}
	f, err := os.Open(fixturePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "wal.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	w := openTest(t, Options{Path: path, NoSync: true})
	var wantBytes int64
	for pk, recs := range fixtureRecords() {
		n := fixtureReleased[pk]
		st, ok := w.Partition(pk.stream, pk.partition)
		if !ok || st.Released != recs[n].Offset || st.Next != recs[len(recs)-1].Offset+1 || st.Epoch != recs[0].Epoch {
			t.Fatalf("%v: state %+v", pk, st)
		}
		for _, r := range recs[n:] {
			wantBytes += int64(len(EncodeRecord(nil, r)))
		}
		if st.OldestTimestamp != recs[n].Timestamp {
			t.Fatalf("%v: oldest timestamp %d, want %d", pk, st.OldestTimestamp, recs[n].Timestamp)
		}
		for _, from := range []int{0, n, n + 7, len(recs) - 1} {
			got, err := w.Read(pk.stream, pk.partition, recs[from].Offset, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := recs[max(from, n):]
			if len(got) != len(want) {
				t.Fatalf("%v from %d: %d records, want %d", pk, from, len(got), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("%v offset %d:\n got %+v\nwant %+v", pk, want[i].Offset, got[i], want[i])
				}
			}
		}
	}
	if st := w.Stats(); st.Bytes != wantBytes || st.Records != 180+200 {
		t.Fatalf("stats %+v, want %d bytes, 380 records", st, wantBytes)
	}
	// It goes on as any WAL: an append continues the offsets, a release
	// frees exactly the released records' bytes.
	r := rec("factory.mqtt", 0, "after")
	if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil || r.Offset != 300 {
		t.Fatalf("append: %v at %d", err, r.Offset)
	}
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "factory.mqtt", Partition: 0, Offset: 301}).Err; err != nil {
		t.Fatal(err)
	}
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "factory.kafka", Partition: 3, Offset: 240}).Err; err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Bytes != 0 || st.Records != 0 {
		t.Fatalf("after releasing everything: %+v", st)
	}
}
