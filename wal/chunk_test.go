package wal

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tributary-io/tributary/internal/testkit"

	"github.com/tributary-io/tributary"
)

// chunkLayout returns the [first, end) ranges of the chunks stored for a
// partition, including a straddling chunk's released records.
func chunkLayout(t *testing.T, w *WAL, stream string, part int32) [][2]int64 {
	t.Helper()
	if err := w.drainApplier(); err != nil { // the layout is bbolt's
		t.Fatal(err)
	}
	var out [][2]int64
	err := w.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(dataName(encodePKey(pkey{stream, part})))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			ch, err := decodeChunkAt(k, v)
			if err != nil {
				return err
			}
			out = append(out, [2]int64{ch.first, ch.end()})
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func appendN(t *testing.T, w *WAL, stream string, part int32, n int, ts int64) {
	t.Helper()
	recs := make([]*tributary.Record, n)
	for i := range recs {
		recs[i] = rec(stream, part, "vvvv")
		recs[i].Timestamp = ts + int64(i)
	}
	if err := w.Append(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
}

func readOffsets(t *testing.T, w *WAL, stream string, part int32, from int64, maxRecords int, maxBytes int64) []int64 {
	t.Helper()
	recs, err := w.Read(stream, part, from, maxRecords, maxBytes)
	if err != nil {
		t.Fatalf("read from %d: %v", from, err)
	}
	var got []int64
	for _, r := range recs {
		got = append(got, r.Offset)
	}
	return got
}

func offsets(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// checkPartition checks Released, Next, Bytes and OldestTimestamp of a
// partition of records written by appendN (timestamp 1000+offset).
func checkPartition(t *testing.T, w *WAL, where, stream string, part int32, released, next int64) {
	t.Helper()
	ps := findPartition(w, stream, part)
	if ps == nil || ps.Released != released || ps.Next != next || ps.Bytes != (next-released)*recSize {
		t.Fatalf("%s: state %+v, want [%d, %d) of %d bytes", where, ps, released, next, (next-released)*recSize)
	}
	oldest := int64(0)
	if next > released {
		oldest = 1000 + released
	}
	if ps.OldestTimestamp != oldest {
		t.Fatalf("%s: oldest timestamp %d, want %d", where, ps.OldestTimestamp, oldest)
	}
	if got := readOffsets(t, w, stream, part, 0, 0, 0); fmt.Sprint(got) != fmt.Sprint(offsets(released, next)) {
		t.Fatalf("%s: read %v, want [%d, %d)", where, got, released, next)
	}
}

func TestChunkBoundaries(t *testing.T) {
	opts := Options{Path: filepath.Join(t.TempDir(), "wal.db"), NoSync: true}
	w := openTest(t, opts)
	// Each lone Append is one group: chunks [0,5) [5,10) [10,15).
	for i := 0; i < 3; i++ {
		appendN(t, w, "s", 0, 5, 1000+int64(i*5))
	}
	layout := func(where string, want string) {
		t.Helper()
		if got := fmt.Sprint(chunkLayout(t, w, "s", 0)); got != want {
			t.Fatalf("%s: chunks %s, want %s", where, got, want)
		}
	}
	layout("appended", "[[0 5] [5 10] [10 15]]")
	reads := []struct {
		from       int64
		maxRecords int
		maxBytes   int64
		want       []int64
	}{
		{7, 0, 0, offsets(7, 15)},             // from the middle of a chunk
		{5, 0, 0, offsets(5, 15)},             // from a chunk's first record
		{9, 0, 0, offsets(9, 15)},             // from a chunk's last record
		{14, 0, 0, []int64{14}},               // last record
		{15, 0, 0, nil},                       // at Next
		{3, 2, 0, []int64{3, 4}},              // maxRecords stops at a chunk end
		{3, 3, 0, []int64{3, 4, 5}},           // … and across one
		{6, 2, 0, []int64{6, 7}},              // … inside a chunk
		{0, 0, 3 * recSize, []int64{0, 1, 2}}, // maxBytes inside a chunk
		{2, 0, 4*recSize - 1, []int64{2, 3, 4}},
		{4, 0, 4 * recSize, offsets(4, 8)}, // across a boundary
		{8, 0, 1, []int64{8}},              // at least one
	}
	for _, r := range reads {
		if got := readOffsets(t, w, "s", 0, r.from, r.maxRecords, r.maxBytes); fmt.Sprint(got) != fmt.Sprint(r.want) {
			t.Fatalf("Read(from %d, %d records, %d bytes) = %v, want %v", r.from, r.maxRecords, r.maxBytes, got, r.want)
		}
	}
	checkPartition(t, w, "initial", "s", 0, 0, 15)

	// Release at a chunk boundary deletes the chunk.
	if err := w.Release("s", 0, 5); err != nil {
		t.Fatal(err)
	}
	layout("release at 5", "[[5 10] [10 15]]")
	checkPartition(t, w, "release at 5", "s", 0, 5, 15)
	// Release inside a chunk keeps it, but its released records are gone.
	if err := w.Release("s", 0, 7); err != nil {
		t.Fatal(err)
	}
	layout("release at 7", "[[5 10] [10 15]]")
	checkPartition(t, w, "release at 7", "s", 0, 7, 15)
	if got := readOffsets(t, w, "s", 0, 5, 1, 0); fmt.Sprint(got) != "[7]" {
		t.Fatalf("read below Released in a straddling chunk: %v", got)
	}
	if err := w.Release("s", 0, 8); err != nil {
		t.Fatal(err)
	}
	checkPartition(t, w, "release at 8", "s", 0, 8, 15)
	w.Close()
	w = openTest(t, opts)
	checkPartition(t, w, "reopened with a straddling chunk", "s", 0, 8, 15)
	layout("reopened", "[[5 10] [10 15]]")
	// Release across a boundary into the next chunk.
	if err := w.Release("s", 0, 12); err != nil {
		t.Fatal(err)
	}
	layout("release at 12", "[[10 15]]")
	checkPartition(t, w, "release at 12", "s", 0, 12, 15)
	appendN(t, w, "s", 0, 5, 1015)
	layout("appended again", "[[10 15] [15 20]]")
	if err := w.Release("s", 0, 20); err != nil {
		t.Fatal(err)
	}
	layout("all released", "[]")
	checkPartition(t, w, "all released", "s", 0, 20, 20)

	// EnsurePartition over a straddling chunk and whole chunks.
	appendN(t, w, "s", 0, 5, 1020)
	appendN(t, w, "s", 0, 5, 1025)
	if err := w.Release("s", 0, 22); err != nil {
		t.Fatal(err)
	}
	checkPartition(t, w, "before ensure", "s", 0, 22, 30)
	if err := w.EnsurePartition("s", 0, 40); err != nil {
		t.Fatal(err)
	}
	layout("ensured", "[]")
	checkPartition(t, w, "ensured", "s", 0, 40, 40)
	if st := w.Stats(); st.Bytes != 0 || st.Records != 0 {
		t.Fatalf("stats after ensure: %+v", st)
	}
	w.Close()
	w = openTest(t, opts)
	checkPartition(t, w, "reopened after ensure", "s", 0, 40, 40)
}

// TestChunkCaps checks that a large group is split into chunks by record
// count and by size, and that a record larger than the size cap gets a
// chunk of its own.
func TestChunkCaps(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	appendN(t, w, "s", 0, maxChunkRecords+10, 1000)
	if got := fmt.Sprint(chunkLayout(t, w, "s", 0)); got != fmt.Sprintf("[[0 %d] [%d %d]]", maxChunkRecords, maxChunkRecords, maxChunkRecords+10) {
		t.Fatalf("chunks by count: %s", got)
	}
	big := make([]byte, maxChunkBytes*2/3)
	var recs []*tributary.Record
	for i := 0; i < 3; i++ {
		recs = append(recs, &tributary.Record{Stream: "b", Value: big}, &tributary.Record{Stream: "b", Value: []byte("small")})
	}
	if err := w.Append(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(chunkLayout(t, w, "b", 0)); got != "[[0 2] [2 4] [4 6]]" {
		t.Fatalf("chunks by size: %s", got)
	}
	huge := &tributary.Record{Stream: "h", Value: make([]byte, maxChunkBytes+1)}
	if err := w.Append(context.Background(), huge, &tributary.Record{Stream: "h"}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(chunkLayout(t, w, "h", 0)); got != "[[0 1] [1 2]]" {
		t.Fatalf("chunks with a huge record: %s", got)
	}
	got, err := w.Read("b", 0, 1, 0, 0)
	if err != nil || len(got) != 5 || len(got[1].Value) != len(big) || string(got[4].Value) != "small" {
		t.Fatalf("read back: %d records, %v", len(got), err)
	}
}

// TestChunkOneGroup checks a group in which records are appended to a
// partition by several calls and then released and ensured: the appends
// share a chunk, and the release sees the group's own records.
func TestChunkOneGroup(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	appendN(t, w, "s", 0, 2, 1000)
	hold, entered := make(chan struct{}), make(chan struct{})
	results := make(chan error, 8)
	w.AppendAsync([]*tributary.Record{rec("other", 0, "vvvv")}, func(err error) {
		close(entered)
		<-hold // hold the committer while the next ops queue up
		results <- err
	})
	<-entered
	queued := func(n int) {
		testkit.Eventually(t, 20*time.Second, "queued ops", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.queue) >= n
		})

	}
	add := func(from int64, n int) {
		recs := make([]*tributary.Record, n)
		for i := range recs {
			recs[i] = rec("s", 0, "vvvv")
			recs[i].Timestamp = 1000 + from + int64(i)
		}
		w.AppendAsync(recs, func(err error) { results <- err })
	}
	add(2, 3)
	add(5, 1)
	add(6, 4)
	queued(3)
	go func() { results <- w.Release("s", 0, 4) }()
	queued(4)
	add(10, 2)
	queued(5)
	close(hold)
	for i := 0; i < 6; i++ {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	// The release stays in the group (an append to its partition follows
	// it: see deferReleases), and the pending records are written first.
	if got := fmt.Sprint(chunkLayout(t, w, "s", 0)); got != "[[2 10] [10 12]]" {
		t.Fatalf("chunks: %s", got)
	}
	checkPartition(t, w, "one group", "s", 0, 4, 12)
}

// TestBudgetExact appends, releases and ensures at random boundaries, with
// records of random sizes, some in shared groups, and checks after every
// step that Bytes is exactly the encoded size of the records in
// [Released, Next) as read back, per partition and in Stats.
func TestBudgetExact(t *testing.T) {
	opts := Options{Path: filepath.Join(t.TempDir(), "wal.db"), NoSync: true, MaxBytes: 64 << 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := openTest(t, opts)
	rng := testkit.Rand(t, 7, 11)
	ctx := context.Background()
	ts := int64(1)
	newRec := func(part int32) *tributary.Record {
		ts++
		return &tributary.Record{Stream: "s", Partition: part, Timestamp: ts, Value: make([]byte, rng.IntN(600)), Topic: strings.Repeat("t", rng.IntN(3))}
	}
	rejected := 0
	for step := 0; step < 1500; step++ {
		part := int32(rng.IntN(3))
		ps := findPartition(w, "s", part)
		switch x := rng.IntN(100); {
		case x < 45:
			recs := make([]*tributary.Record, 1+rng.IntN(20))
			for i := range recs {
				recs[i] = newRec(part)
			}
			if err := w.Append(ctx, recs...); errors.Is(err, ErrBudgetExceeded) {
				rejected++
			} else if err != nil {
				t.Fatal(err)
			}
		case x < 55:
			// Several appends in one group, over partitions.
			n := 2 + rng.IntN(6)
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				recs := []*tributary.Record{newRec(int32(rng.IntN(3))), newRec(part)}
				w.AppendAsync(recs, func(err error) { errs <- err })
			}
			for i := 0; i < n; i++ {
				if err := <-errs; errors.Is(err, ErrBudgetExceeded) {
					rejected++
				} else if err != nil {
					t.Fatal(err)
				}
			}
		case x < 93:
			if ps == nil {
				continue
			}
			upTo := ps.Released - 2 + rng.Int64N(ps.Next-ps.Released+5)
			if err := w.Release("s", part, upTo); err != nil {
				t.Fatalf("release %d of %+v: %v", upTo, ps, err)
			}
		case x < 96:
			if ps == nil {
				continue
			}
			if err := w.EnsurePartition("s", part, ps.Next+rng.Int64N(3)); err != nil {
				t.Fatal(err)
			}
		default:
			w.Close()
			w = openTest(t, opts)
		}
		checkBytes(t, w, fmt.Sprintf("step %d", step))
	}
	t.Logf("%d appends refused by the budget; final stats %+v", rejected, w.Stats())
	if rejected == 0 {
		t.Fatal("budget never reached: the test does not exercise it")
	}
}

func checkBytes(t *testing.T, w *WAL, where string) {
	t.Helper()
	var total, records int64
	for _, ps := range w.Partitions() {
		recs, err := w.Read(ps.Stream, ps.Partition, 0, 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		var bytes int64
		for i, r := range recs {
			if r.Offset != ps.Released+int64(i) {
				t.Fatalf("%s: %+v: record %d at offset %d", where, ps, i, r.Offset)
			}
			bytes += int64(len(EncodeRecord(nil, r)))
		}
		if int64(len(recs)) != ps.Next-ps.Released || bytes != ps.Bytes {
			t.Fatalf("%s: %+v: read %d records of %d bytes", where, ps, len(recs), bytes)
		}
		if len(recs) > 0 && ps.OldestTimestamp != recs[0].Timestamp || len(recs) == 0 && ps.OldestTimestamp != 0 {
			t.Fatalf("%s: %+v: oldest timestamp, first record %+v", where, ps, recs)
		}
		total += bytes
		records += int64(len(recs))
	}
	if st := w.Stats(); st.Bytes != total || st.Records != records {
		t.Fatalf("%s: stats %d records %d bytes, partitions hold %d, %d", where, st.Records, st.Bytes, records, total)
	}
}

// corruptChunk rewrites the chunk stored under key off with f applied.
func corruptChunk(t *testing.T, path, stream string, part int32, off int64, f func([]byte)) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(dataName(encodePKey(pkey{stream, part})))
		v := append([]byte(nil), b.Get(offsetKey(off))...)
		f(v)
		return b.Put(offsetKey(off), v)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCorruptChunk(t *testing.T) {
	opts := Options{Path: filepath.Join(t.TempDir(), "wal.db"), NoSync: true}
	w := openTest(t, opts)
	for i := 0; i < 3; i++ {
		appendN(t, w, "s", 0, 5, 1000+int64(i*5))
	}
	w.Close()
	// A flipped bit in the middle chunk: Open checks only the ends, Read
	// and Release report it.
	corruptChunk(t, opts.Path, "s", 0, 5, func(v []byte) { v[len(v)/2] ^= 1 })
	w = openTest(t, opts)
	if _, err := w.Read("s", 0, 0, 0, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read over a corrupt chunk: %v", err)
	}
	if got := readOffsets(t, w, "s", 0, 0, 5, 0); fmt.Sprint(got) != fmt.Sprint(offsets(0, 5)) {
		t.Fatalf("read before the corrupt chunk: %v", got)
	}
	if err := w.Release("s", 0, 7); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("release over a corrupt chunk: %v", err)
	}
	if ps := findPartition(w, "s", 0); ps.Released != 0 || ps.Next != 15 || ps.Bytes != 15*recSize {
		t.Fatalf("failed release changed the state: %+v", ps)
	}
	w.Close()
	// A torn last chunk: Open refuses the WAL.
	corruptChunk(t, opts.Path, "s", 0, 10, func(v []byte) { v[len(v)-1] ^= 0xff })
	if w, err := Open(opts); !errors.Is(err, ErrCorrupt) {
		if err == nil {
			w.Close()
		}
		t.Fatalf("open with a torn last chunk: %v", err)
	}
}

func TestOldFormatRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Format 1: one key per record, no format key.
	pk := encodePKey(pkey{"s", 0})
	err = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(metaBucket)
		data, _ := tx.CreateBucket(dataName(pk))
		if err := data.Put(offsetKey(0), EncodeRecord(nil, rec("s", 0, "v"))); err != nil {
			return err
		}
		v := make([]byte, 24)
		be.PutUint64(v, 1)
		return meta.Put(pk, v)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	w, err := Open(Options{Path: path})
	if err == nil {
		w.Close()
		t.Fatal("opened a format-1 WAL")
	}
	if !strings.Contains(err.Error(), "format changed") {
		t.Fatalf("unclear error: %v", err)
	}
}

func TestChunkRoundTrip(t *testing.T) {
	var recs [][]byte
	for _, r := range sampleRecords() {
		recs = append(recs, EncodeRecord(nil, r))
	}
	for n := 1; n <= len(recs); n++ {
		v := encodeChunk([]byte("prefix"), 42, recs[:n])
		ch, err := decodeChunk(v[len("prefix"):])
		if err != nil {
			t.Fatal(err)
		}
		if ch.first != 42 || ch.count() != n || ch.end() != 42+int64(n) {
			t.Fatalf("chunk %d..%d of %d records", ch.first, ch.end(), ch.count())
		}
		for i := 0; i < n; i++ {
			if string(ch.record(i)) != string(recs[i]) {
				t.Fatalf("record %d differs", i)
			}
		}
		if ch.size(0, n) != int64(len(ch.data)) || ch.size(1, 1) != 0 {
			t.Fatal("sizes")
		}
	}
}

// fixCRC returns b with its last four bytes replaced by the checksum of the
// rest, so that fuzzing reaches the parser behind the checksum.
func fixCRC(b []byte) []byte {
	if len(b) < 4 {
		return b
	}
	body := append([]byte(nil), b[:len(b)-4]...)
	return be.AppendUint32(body, crc32.Checksum(body, castagnoli))
}

// FuzzDecodeChunk checks that arbitrary input never panics and is either
// refused with ErrCorrupt or decodes to a chunk whose records re-encode to
// the same chunk contents.
func FuzzDecodeChunk(f *testing.F) {
	var recs [][]byte
	for _, r := range sampleRecords() {
		recs = append(recs, EncodeRecord(nil, r))
	}
	f.Add(encodeChunk(nil, 0, recs[:1]))
	f.Add(encodeChunk(nil, 7, recs))
	f.Add(encodeChunk(nil, 1<<62, [][]byte{{1}, {2, 3}}))
	f.Add([]byte{})
	f.Add([]byte{chunkV1})
	b, _ := testBatch("s.k", 0, 3, 5, 0, 7, 1)
	b.Offset = 7
	f.Add(encodeChunkV2(nil, 7, [][]byte{appendBatchEntry(nil, b), recs[0]}, []int{3, 1}))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, fixCRC(data)} {
			ch, err := decodeChunk(in)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error does not wrap ErrCorrupt: %v", err)
				}
				continue
			}
			if ch.count() == 0 || ch.first < 0 || ch.end() < ch.first {
				t.Fatalf("bad chunk %d+%d", ch.first, ch.count())
			}
			var got [][]byte
			var ns []int
			var size int64
			for i := 0; i < ch.entries(); i++ {
				got = append(got, ch.record(i))
				ns = append(ns, int(ch.entryFirst(i+1)-ch.entryFirst(i)))
				size += int64(len(ch.record(i)))
				if e := ch.record(i); e[0] == formatKafkaBatch { // version 2: a batch entry decodes or is corrupt
					if rs, err := decodeBatchEntry(e, 0); err != nil && !errors.Is(err, ErrCorrupt) {
						t.Fatalf("batch entry error does not wrap ErrCorrupt: %v", err)
					} else if err == nil && len(rs) != ns[i] && len(rs) == 0 {
						t.Fatalf("batch entry of %d records", len(rs))
					}
				}
				if ts, err := ch.timestampAt(ch.entryFirst(i)); err != nil && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("timestamp %d: %v", ts, err)
				}
			}
			if size != ch.size(0, ch.count()) || size != int64(len(ch.data)) {
				t.Fatalf("sizes %d, %d, %d", size, ch.size(0, ch.count()), len(ch.data))
			}
			re := encodeChunk(nil, ch.first, got)
			if ch.offs != nil {
				re = encodeChunkV2(nil, ch.first, got, ns)
			}
			ch2, err := decodeChunk(re)
			if err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			var got2 [][]byte
			for i := 0; i < ch2.entries(); i++ {
				got2 = append(got2, ch2.record(i))
			}
			if ch2.first != ch.first || ch2.count() != ch.count() || !reflect.DeepEqual(got, got2) {
				t.Fatal("round trip differs")
			}
		}
	})
}

// TestChunkSeedCorpus checks that the committed seeds of FuzzDecodeChunk
// mean what their names say.
func TestChunkSeedCorpus(t *testing.T) {
	for name, wantOK := range map[string]bool{
		"one-mqtt-record": true, "sample-records": true, "torn": false, "bad-checksum": false,
		"count-bomb": false, "huge-length": false, "offset-overflow": false, "version-2": false,
	} {
		raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecodeChunk", name))
		if err != nil {
			t.Fatal(err)
		}
		lit := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(string(raw), "\n", 2)[1], "[]byte("), ")\n")
		data, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := decodeChunk([]byte(data)); (err == nil) != wantOK {
			t.Fatalf("%s: decodeChunk: %v", name, err)
		}
	}
}
