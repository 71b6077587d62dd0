package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// testBatch is an uncompressed record batch of n records of producer pid
// (-1: not idempotent) from sequence seq, and the records Read must give
// for it at offset first with accept time ts.
func testBatch(stream string, part int32, n int, pid int64, seq int32, first, ts int64) (*Batch, []*tributary.Record) {
	var rs []kafkatest.Rec
	var want []*tributary.Record
	epoch := int16(-1)
	if pid >= 0 {
		epoch = 3
	}
	for i := range n {
		r := kafkatest.Rec{Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("value ", i)), TSDelta: int64(i)}
		switch i % 3 {
		case 0:
			r.Key = nil
		case 1:
			r.Key, r.Value = []byte{}, []byte{}
			r.Headers = []tributary.Header{{Key: "h", Value: []byte("1")}, {Key: "h", Value: nil}, {Key: "", Value: []byte{}}}
		}
		rs = append(rs, r)
		sq := int32(-1)
		if pid >= 0 {
			sq = seq + int32(i)
		}
		want = append(want, &tributary.Record{Stream: stream, Partition: part, Offset: first + int64(i), Epoch: 7, Timestamp: ts,
			Topic: stream, Key: r.Key, Value: r.Value, Headers: r.Headers, Source: "kafka", ClientID: "gw", Node: "edge-1",
			Principal: "alice", ProducerID: pid, ProducerEpoch: epoch, Sequence: sq, ProducerTimestamp: 1_700_000_000_000 + int64(i)})
	}
	raw := kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: epoch, Seq: seq, FirstTS: 1_700_000_000_000}, rs...)
	return &Batch{Stream: stream, Partition: part, Epoch: 7, Topic: stream, Source: "kafka", ClientID: "gw", Node: "edge-1",
		Principal: "alice", Records: raw, Timestamp: ts}, want
}

func appendBatch(t *testing.T, w *WAL, b *Batch) error {
	t.Helper()
	done := make(chan error, 1)
	w.Submit(Op{Kind: OpAppend, Batch: b, Done: func(wr Result) { done <- wr.Err }})
	return <-done
}

// readAll is Read; it also checks that ReadEntries covers the same
// records (decoded after its transaction ended: the views own their bytes).
func readAll(t *testing.T, w *WAL, stream string, part int32, from int64, maxRecords int, maxBytes int64) []*tributary.Record {
	t.Helper()
	got, err := w.Read(stream, part, from, maxRecords, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	ents, _, err := w.ReadEntriesInto(nil, stream, part, from, maxRecords, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	fromEnts, err := Records(ents)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, fmt.Sprintf("ReadEntries from %d, max %d records, %d bytes", from, maxRecords, maxBytes), fromEnts, got)
	return got
}

func sameRecords(t *testing.T, where string, got, want []*tributary.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", where, len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%s: record %d:\n got %+v\nwant %+v", where, i, got[i], want[i])
		}
	}
}

// TestBatchEntries: Kafka batches stored as one entry each, between
// MQTT records, read back as the records they hold — from the start,
// from inside a batch, cut by maxRecords inside one — survive a reopen,
// and are released by offset: a release inside a batch hides its records
// below it and frees its bytes only once it passes the batch's end.
func TestBatchEntries(t *testing.T) {
	path := t.TempDir() + "/wal.db"
	w := openTest(t, Options{Path: path, NoSync: true})
	ctx := context.Background()
	const s = "factory.kafka"
	m0 := rec(s, 0, "mqtt-0")
	if err := w.Apply(ctx, Op{Kind: OpAppend, Records: []*tributary.Record{m0}}).Err; err != nil {
		t.Fatal(err)
	}
	b1, want1 := testBatch(s, 0, 5, 42, 100, 1, 5000)
	if err := appendBatch(t, w, b1); err != nil {
		t.Fatal(err)
	}
	b2, want2 := testBatch(s, 0, 3, -1, -1, 6, 6000)
	if err := appendBatch(t, w, b2); err != nil {
		t.Fatal(err)
	}
	m9 := rec(s, 0, "mqtt-9")
	if err := w.Apply(ctx, Op{Kind: OpAppend, Records: []*tributary.Record{m9}}).Err; err != nil {
		t.Fatal(err)
	}
	if b1.Offset != 1 || b2.Offset != 6 || m9.Offset != 9 {
		t.Fatalf("offsets %d, %d, %d; want 1, 6, 9", b1.Offset, b2.Offset, m9.Offset)
	}
	all := append(append(append([]*tributary.Record{m0}, want1...), want2...), m9)
	check := func(where string) {
		sameRecords(t, where+": from 0", readAll(t, w, s, 0, 0, 0, 0), all)
		sameRecords(t, where+": from inside a batch", readAll(t, w, s, 0, 3, 0, 0), all[3:])
		sameRecords(t, where+": cut inside a batch", readAll(t, w, s, 0, 2, 2, 0), all[2:4])
		sameRecords(t, where+": last of a batch", readAll(t, w, s, 0, 8, 1, 0), all[8:9])
	}
	check("appended")
	size := func(b *Batch) int64 { return int64(len(appendBatchEntry(nil, b))) }
	wantBytes := int64(len(EncodeRecord(nil, m0))) + size(b1) + size(b2) + int64(len(EncodeRecord(nil, m9)))
	if st := w.Stats(); st.Records != 10 || st.Bytes != wantBytes {
		t.Fatalf("stats %+v, want 10 records, %d bytes", st, wantBytes)
	}
	w.Close()
	w = openTest(t, Options{Path: path, NoSync: true})
	check("reopened")

	// Release into the first batch: its records below 3 are gone, its
	// bytes stay until the release passes its end.
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: s, Partition: 0, Offset: 3}).Err; err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "released to 3", readAll(t, w, s, 0, 0, 0, 0), all[3:])
	st, _ := w.Partition(s, 0)
	if st.Bytes != wantBytes-int64(len(EncodeRecord(nil, m0))) || st.OldestTimestamp != 5000 || st.Released != 3 {
		t.Fatalf("released to 3: %+v", st)
	}
	w.Close()
	w = openTest(t, Options{Path: path, NoSync: true}) // recovery inside a partly released batch
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: s, Partition: 0, Offset: 7}).Err; err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "released to 7", readAll(t, w, s, 0, 0, 0, 0), all[7:])
	st, _ = w.Partition(s, 0)
	if st.Bytes != size(b2)+int64(len(EncodeRecord(nil, m9))) || st.OldestTimestamp != 6000 {
		t.Fatalf("released to 7: %+v (first batch's %d bytes freed)", st, size(b1))
	}
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: s, Partition: 0, Offset: 10}).Err; err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Records != 0 || st.Bytes != 0 {
		t.Fatalf("all released: %+v", st)
	}
}

// TestBatchRefused: a batch over the budget is refused whole, one after
// it in its chain is refused too, and a malformed batch is refused at
// once; none leaves a trace.
func TestBatchRefused(t *testing.T) {
	b, _ := testBatch("s.k", 0, 4, 1, 0, 0, 1)
	w := openTest(t, Options{NoSync: true, MaxBytes: int64(len(appendBatchEntry(nil, b))) - 1})
	var first, second error
	done := make(chan struct{}, 2)
	tk := w.Submit(Op{Kind: OpAppend, Batch: b, Done: func(wr Result) { first = wr.Err; done <- struct{}{} }})
	small, _ := testBatch("s.k", 0, 1, 1, 4, 0, 1)
	w.Submit(Op{Kind: OpAppend, Batch: small, After: tk, Done: func(wr Result) { second = wr.Err; done <- struct{}{} }})
	<-done
	<-done
	if !errors.Is(first, ErrBudgetExceeded) || !errors.Is(second, ErrPredecessorFailed) {
		t.Fatalf("refusals: %v, %v", first, second)
	}
	bad, _ := testBatch("s.k", 0, 2, 1, 0, 0, 1)
	bad.Records[22] |= 2 // "snappy": the WAL stores uncompressed batches only
	if err := appendBatch(t, w, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("compressed batch: %v", err)
	}
	bad.Records = bad.Records[:40]
	if err := appendBatch(t, w, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short batch: %v", err)
	}
	if st := w.Stats(); st.Records != 0 || st.Bytes != 0 || st.Partitions != 0 {
		t.Fatalf("refused batches left %+v", st)
	}
	if err := appendBatch(t, w, small); err != nil {
		t.Fatal(err)
	}
}

// TestBatchesShareAChunk: records and batches appended in one group
// commit go into one version 2 chunk, read back in order from any
// offset; a group of records only is still written as version 1.
func TestBatchesShareAChunk(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	const s = "factory.mixed"
	release, held := make(chan struct{}), make(chan struct{})
	results := make(chan error, 5)
	// The committer calls Done: held in it, it commits the first op alone
	// and the next four queue up for one group (without the wait for held,
	// a busy machine let it take m0 into the first group too).
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("other.s", 0, "hold")}, Done: func(wr Result) { close(held); <-release; results <- wr.Err }})
	<-held
	m0 := rec(s, 0, "m0")
	b1, want1 := testBatch(s, 0, 4, 9, 0, 1, 77)
	m5 := rec(s, 0, "m5")
	b2, want2 := testBatch(s, 0, 2, 9, 4, 6, 77)
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{m0}, Done: func(wr Result) { results <- wr.Err }})
	tk := w.Submit(Op{Kind: OpAppend, Batch: b1, Done: func(wr Result) { results <- wr.Err }})
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{m5}, Done: func(wr Result) { results <- wr.Err }})
	w.Submit(Op{Kind: OpAppend, Batch: b2, After: tk, Done: func(wr Result) { results <- wr.Err }})
	close(release)
	for range 5 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	m0.Timestamp, m5.Timestamp = 1000, 1000
	for _, r := range append(want1, want2...) {
		r.Timestamp = b1.Timestamp // set by the WAL: the group's time
	}
	all := append(append(append([]*tributary.Record{m0}, want1...), m5), want2...)
	for from := range int64(len(all)) {
		sameRecords(t, fmt.Sprint("from ", from), readAll(t, w, s, 0, from, 0, 0), all[from:])
	}
	versions := map[string]byte{}
	if err := w.drainApplier(); err != nil { // the chunks bbolt holds
		t.Fatal(err)
	}
	w.db.View(func(tx *bolt.Tx) error {
		for _, st := range []string{s, "other.s"} {
			k, v := tx.Bucket(dataName(encodePKey(pkey{st, 0}))).Cursor().First()
			if k == nil {
				t.Fatalf("no chunk of %s", st)
			}
			versions[st] = v[0]
		}
		return nil
	})
	if versions[s] != chunkV2 || versions["other.s"] != chunkV1 {
		t.Fatalf("chunk versions %v; want 2 with batches, 1 without", versions)
	}
}

// FuzzDecodeBatchEntry: a batch entry decodes into its records or fails
// with ErrCorrupt, never panics, and a decoded entry re-encodes to
// records of the same content.
func FuzzDecodeBatchEntry(f *testing.F) {
	for _, n := range []int{1, 3} {
		b, _ := testBatch("s.k", 2, n, 5, 10, 4, 99)
		b.Offset = 4
		f.Add(appendBatchEntry(nil, b), 0)
		f.Add(appendBatchEntry(nil, b), n-1)
	}
	f.Add([]byte{formatKafkaBatch}, 0)
	f.Fuzz(func(t *testing.T, data []byte, skip int) {
		rs, err := decodeBatchEntry(data, skip)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		e, err := decodeBatchHeader(data)
		if err != nil {
			t.Fatalf("records decoded, header not: %v", err)
		}
		if len(rs) != e.count-min(max(skip, 0), e.count) {
			t.Fatalf("%d records of %d, skip %d", len(rs), e.count, skip)
		}
		for i, r := range rs {
			if r.Offset != e.offset+int64(e.count-len(rs)+i) || r.Stream != e.stream || r.Timestamp != e.timestamp {
				t.Fatalf("record %d: %+v", i, r)
			}
		}
	})
}

// TestWriteBatchFuzzSeeds writes FuzzDecodeBatchEntry's committed seeds
// when TRIBUTARY_WRITE_FUZZ_SEEDS is set, and otherwise checks that they
// decode as their names say.
func TestWriteBatchFuzzSeeds(t *testing.T) {
	b, _ := testBatch("s.k", 2, 3, 5, 10, 4, 99)
	b.Offset = 4
	good := appendBatchEntry(nil, b)
	seeds := map[string][]byte{
		"three-records": good,
		"truncated":     good[:len(good)-3],
		"count-bomb":    append(append([]byte(nil), good[:len(good)-len(b.Records)-1]...), append([]byte{0x7f}, b.Records...)...),
	}
	wantOK := map[string]bool{"three-records": true, "truncated": false, "count-bomb": false}
	if os.Getenv("TRIBUTARY_WRITE_FUZZ_SEEDS") != "" {
		dir := filepath.Join("testdata", "fuzz", "FuzzDecodeBatchEntry")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nint(0)\n", s)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	chunkSeed := encodeChunkV2(nil, 4, [][]byte{good, EncodeRecord(nil, rec("s.k", 2, "v"))}, []int{3, 1})
	if os.Getenv("TRIBUTARY_WRITE_FUZZ_SEEDS") != "" {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", chunkSeed)
		if err := os.WriteFile(filepath.Join("testdata", "fuzz", "FuzzDecodeChunk", "version-2-batch"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecodeChunk", "version-2-batch")); err != nil ||
		string(raw) != fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", chunkSeed) {
		t.Fatalf("FuzzDecodeChunk seed version-2-batch missing or stale (%v): regenerate with TRIBUTARY_WRITE_FUZZ_SEEDS=1", err)
	}
	if ch, err := decodeChunk(chunkSeed); err != nil || ch.count() != 4 || ch.entries() != 2 {
		t.Fatalf("version 2 chunk seed: %v", err)
	}
	for name, s := range seeds {
		if _, err := decodeBatchEntry(s, 0); (err == nil) != wantOK[name] {
			t.Fatalf("%s: %v", name, err)
		}
		raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecodeBatchEntry", name))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nint(0)\n", s); string(raw) != want {
			t.Fatalf("seed %s is stale: regenerate with TRIBUTARY_WRITE_FUZZ_SEEDS=1", name)
		}
	}
}
