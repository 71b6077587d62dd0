package pqkafka

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/tributary-io/tributary/internal/kbatch"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests write files with parquet-go's generic writer, in layouts
// other than package tables' writer (that one is compared with the record
// path in kafka/consume's TestDirectBatchesMatchRecordPath): plain and
// dictionary encodings, no compression, snappy and zstd, small pages, a
// required headers list, files without field ids.

type hdr struct {
	Key   string `parquet:"key,id(13),dict"`
	Value []byte `parquet:"value,id(14),optional"`
}

type row struct {
	Offset    int64  `parquet:"offset,id(2),delta"`
	Timestamp int64  `parquet:"timestamp,id(3)"`
	Topic     string `parquet:"topic,id(4),dict"`
	Key       []byte `parquet:"key,id(5),optional"`
	Value     []byte `parquet:"value,id(6)"`
	PTS       *int64 `parquet:"producer_timestamp,id(10),optional"`
	Headers   []hdr  `parquet:"headers,id(11),list" parquet-element:",id(12)"`
	Typed     *int64 `parquet:"reading,id(20),optional"` // a typed column, never read
}

// dictRow has dictionary-encoded offsets, timestamps and values, as an
// older writer's files have.
type dictRow struct {
	Offset    int64  `parquet:"offset,id(2),dict"`
	Timestamp int64  `parquet:"timestamp,id(3),dict"`
	Value     []byte `parquet:"value,id(6),dict"`
}

// noIDs has the envelope's names but no field ids: another engine's file.
type noIDs struct {
	Offset    int64  `parquet:"offset"`
	Timestamp int64  `parquet:"timestamp"`
	Value     []byte `parquet:"value"`
}

func rows(first int64, n int) []row {
	out := make([]row, n)
	for i := range out {
		off := first + int64(i)
		r := row{Offset: off, Timestamp: 1_700_000_000_000_000 + off*1500, Topic: "t", Value: fmt.Appendf(nil, "value-%d", off)}
		switch i % 5 {
		case 0:
			r.Key = []byte(fmt.Sprintf("k%d", off))
			pts := r.Timestamp - 5_000_000 + off%7
			r.PTS = &pts
			r.Headers = []hdr{{Key: "a", Value: []byte("1")}, {Key: "b"}, {Key: "", Value: bytes.Repeat([]byte{'x'}, i%300)}}
		case 1:
			r.Value = bytes.Repeat([]byte{byte(i)}, 4000) // several batches per row group
		case 2:
			r.Headers = []hdr{{Key: "only"}}
			r.Typed = &off
		case 3:
			pts := int64(999) // below 1 ms: the acceptance time is served
			r.PTS = &pts
		}
		out[i] = r
	}
	return out
}

func write[T any](t testing.TB, rs []T, opts ...parquet.WriterOption) *parquet.File {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf, opts...)
	if _, err := w.Write(rs); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// decodeGroup parses g's batches with franz-go's kmsg, checking lengths,
// CRCs, offsets and the batch bound.
func decodeGroup(t *testing.T, g *Group, batchBytes int) []rec {
	t.Helper()
	var out []rec
	next := g.First
	for i := range g.Ends {
		b := g.Buf[g.Starts[i]:g.Starts[i+1]]
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		if int(rb.Length)+12 != len(b) || rb.CRC != int32(crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli))) {
			t.Fatalf("batch %d: length %d of %d bytes or bad CRC", i, rb.Length, len(b))
		}
		if rb.FirstOffset != next || rb.FirstOffset+int64(rb.NumRecords) != g.Ends[i] {
			t.Fatalf("batch %d covers %d+%d, want from %d to %d", i, rb.FirstOffset, rb.NumRecords, next, g.Ends[i])
		}
		next = g.Ends[i]
		recs := rb.Records
		size := 0
		for len(recs) > 0 {
			var r kmsg.Record
			if err := r.ReadFrom(recs); err != nil {
				t.Fatal(err)
			}
			n := int(r.Length) + kbatch.VarintLen(int64(r.Length))
			recs = recs[n:]
			r.OffsetDelta += int32(rb.FirstOffset - g.First) // make it the row index
			size += 24 + len(r.Key) + len(r.Value)
			for _, h := range r.Headers {
				size += 10 + len(h.Key) + len(h.Value)
			}
			out = append(out, rec{r, rb.FirstTimestamp + int64(r.TimestampDelta)})
		}
		if size > batchBytes && rb.NumRecords > 1 {
			t.Fatalf("batch %d holds %d bytes of records, over %d", i, size, batchBytes)
		}
	}
	return out
}

// rec is a decoded record with its timestamp.
type rec struct {
	kmsg.Record
	ts int64
}

func checkRows(t *testing.T, want []row, got []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		ts := w.Timestamp / 1000
		if w.PTS != nil && *w.PTS/1000 != 0 {
			ts = *w.PTS / 1000
		}
		if int(g.OffsetDelta) != i || g.ts != ts {
			t.Fatalf("row %d: offset delta %d, timestamp %d; want %d", i, g.OffsetDelta, g.ts, ts)
		}
		if (g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) {
			t.Fatalf("row %d: key %q value %.20q, want %q %.20q", i, g.Key, g.Value, w.Key, w.Value)
		}
		if len(g.Headers) != len(w.Headers) {
			t.Fatalf("row %d: %d headers, want %d", i, len(g.Headers), len(w.Headers))
		}
		for j, h := range w.Headers {
			if g.Headers[j].Key != h.Key || (g.Headers[j].Value == nil) != (h.Value == nil) || !bytes.Equal(g.Headers[j].Value, h.Value) {
				t.Fatalf("row %d header %d: %q=%q, want %q=%q", i, j, g.Headers[j].Key, g.Headers[j].Value, h.Key, h.Value)
			}
		}
	}
}

func TestEncodeLayouts(t *testing.T) {
	const n = 3000
	want := rows(500, n)
	for _, c := range []struct {
		name string
		opts []parquet.WriterOption
	}{
		{"uncompressed", []parquet.WriterOption{parquet.Compression(&parquet.Uncompressed)}},
		{"zstd", []parquet.WriterOption{parquet.Compression(&parquet.Zstd)}},
		{"zstd small pages", []parquet.WriterOption{parquet.Compression(&parquet.Zstd), parquet.PageBufferSize(4 << 10)}},
		{"data page v1", []parquet.WriterOption{parquet.DataPageVersion(1), parquet.Compression(compress.Codec(&parquet.Uncompressed))}},
		{"two row groups", []parquet.WriterOption{parquet.MaxRowsPerRowGroup(n / 2)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := write(t, want, c.opts...)
			var d Decoder
			first := int64(500)
			var got []rec
			for rg := range f.RowGroups() {
				g, err := d.Encode(f, rg, first, 32<<10)
				if err != nil {
					t.Fatal(err)
				}
				if len(g.Ends) < 2 {
					t.Fatalf("row group %d: %d batches, want several", rg, len(g.Ends))
				}
				rs := decodeGroup(t, g, 32<<10)
				for i := range rs {
					rs[i].OffsetDelta += int32(first - 500)
				}
				got = append(got, rs...)
				first += f.RowGroups()[rg].NumRows()
			}
			checkRows(t, want, got)
		})
	}
}

// A file whose offsets, timestamps and values are dictionary-encoded (as
// the older Arrow writer's offsets were) is decoded through the
// dictionaries; a file without field ids is not this encoder's.
func TestEncodeDictionaryAndForeign(t *testing.T) {
	dr := make([]dictRow, 100)
	for i := range dr {
		dr[i] = dictRow{Offset: int64(i), Timestamp: int64(i%7) * 1000, Value: []byte{byte(i % 3)}}
	}
	var d Decoder
	g, err := d.Encode(write(t, dr), 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	recs := decodeGroup(t, g, 1<<20)
	for i, r := range recs {
		if r.ts != int64(i%7) || !bytes.Equal(r.Value, []byte{byte(i % 3)}) || r.Key != nil || len(r.Headers) != 0 {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
	if _, err := d.Encode(write(t, []noIDs{{Value: []byte("x")}}), 0, 0, 1<<20); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("file without field ids: %v, want ErrUnsupported", err)
	}
	// Codecs whose decoders size their output from the stream are left
	// to the general path.
	for _, c := range []compress.Codec{&parquet.Snappy, &parquet.Gzip, &parquet.Lz4Raw} {
		if _, err := d.Encode(write(t, rows(0, 10), parquet.Compression(c)), 0, 0, 1<<20); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("%s: %v, want ErrUnsupported", c, err)
		}
	}
}

// Offsets that are not first, first+1, … and row groups out of range are
// corrupt, not served.
func TestEncodeRejects(t *testing.T) {
	f := write(t, rows(10, 50))
	var d Decoder
	if _, err := d.Encode(f, 0, 11, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong first offset: %v", err)
	}
	if _, err := d.Encode(f, 1, 10, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("row group out of range: %v", err)
	}
	gap := rows(0, 20)
	gap[7].Offset = 99
	if _, err := d.Encode(write(t, gap), 0, 0, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("offset gap: %v", err)
	}
}

// encodeBytes opens b as a Parquet file and encodes every row group; it is
// what FuzzEncode drives, and must return an error, never panic.
func encodeBytes(b []byte) error {
	f, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return err
	}
	var d Decoder
	first := int64(0)
	for rg := range f.RowGroups() {
		if _, err := d.Encode(f, rg, first, 4<<10); err != nil {
			return err
		}
		first += f.RowGroups()[rg].NumRows()
	}
	return nil
}

// Every truncation and a sample of single-byte corruptions of a valid
// file give an error or the right rows, and never a panic.
func TestEncodeTruncatedAndCorrupt(t *testing.T) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf, parquet.PageBufferSize(2<<10))
	if _, err := w.Write(rows(0, 200)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b := buf.Bytes()
	if err := encodeBytes(b); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(b); n += max(1, len(b)/500) {
		if err := encodeBytes(b[:n]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: no error", n, len(b))
		}
	}
	for i := 0; i < len(b); i += max(1, len(b)/2000) {
		c := bytes.Clone(b)
		c[i] ^= 0x5a
		_ = encodeBytes(c) // an error or good rows; a panic fails the test
	}
}

// FuzzEncode feeds arbitrary bytes to the Parquet reader and the encoder:
// an error or batches, never a panic or a hang. The seeds are small
// valid files (testdata/fuzz/FuzzEncode) in the layouts of
// TestEncodeLayouts.
func FuzzEncode(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = encodeBytes(b)
	})
}

// A prefix is exactly the first batches of the whole row group's, and
// holds the batch of its start offset; at the end it is the whole group.
func TestEncodePrefix(t *testing.T) {
	want := rows(0, 3000)
	for _, opts := range [][]parquet.WriterOption{
		{parquet.PageBufferSize(8 << 10)},
		{parquet.PageBufferSize(8 << 10), parquet.DataPageVersion(1)},
		{},
	} {
		f := write(t, want, opts...)
		var d Decoder
		full, err := d.Encode(f, 0, 0, 16<<10)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			from  int64
			limit int
		}{{0, 1}, {0, 64 << 10}, {1500, 1}, {1500, 100 << 10}, {2999, 1 << 20}, {0, 1 << 30}} {
			p, err := d.EncodePrefix(f, 0, 0, 16<<10, c.from, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			k := len(p.Ends)
			if k > len(full.Ends) || fmt.Sprint(p.Ends) != fmt.Sprint(full.Ends[:k]) || !bytes.Equal(p.Buf, full.Buf[:full.Starts[k]]) {
				t.Fatalf("prefix from %d limit %d: %d batches differ from the group's first", c.from, c.limit, k)
			}
			if c.limit >= 1<<20 && k != len(full.Ends) {
				t.Fatalf("prefix from %d limit %d: %d of %d batches", c.from, c.limit, k, len(full.Ends))
			}
			if c.limit >= 64<<10 && (k == 0 || p.Ends[k-1] <= c.from) {
				t.Fatalf("prefix from %d limit %d ends at %v: does not hold the start offset", c.from, c.limit, p.Ends)
			}
		}
	}
}
