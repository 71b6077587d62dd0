// Package pqkafka encodes one row group of a stream's Parquet data file
// straight into Kafka record batches (message format v2, uncompressed),
// the bytes the Kafka fetch path caches and serves, without building
// record objects or Arrow arrays in between.
//
// How it reads: only the envelope columns a Kafka record needs are read,
// found by their Iceberg field ids (offset 2, timestamp 3, key 5, value 6,
// producer_timestamp 10, header key 13, header value 14; the same ids as
// package tables, checked by kafka/consume's tests), through parquet-go's
// page reader: each page is decompressed into parquet-go's pooled buffers,
// its values are referenced in place (plain or dictionary-indexed, any
// encoding parquet-go decodes), copied once into the batch bytes, and the
// pages are released back to the pool when the row group is encoded. The
// per-row bookkeeping (offsets, timestamps, byte-slice headers, header
// ranges) lives in a Decoder's slices, reused from one row group to the
// next. Every other column (topic, source, typed columns) is never read.
//
// What it accepts: any file whose leaves with those ids have the types
// and nesting of the envelope (INT64 offset and timestamp, BYTE_ARRAY key,
// value and header key and value, headers a one-level repeated list). A
// file without them (no field ids, another layout) gives ErrUnsupported,
// and the caller decodes it the general way. A file that has them but
// whose bytes or levels do not add up gives an error wrapping ErrCorrupt;
// nothing here panics on bad input (a panic inside parquet-go's decoders
// is recovered into ErrCorrupt).
//
// The batches are exactly those kafka.AppendBatch makes from the same
// records, split as kafka/consume's encodeGroup splits them: consecutive
// records while their kafka.RecordSize sum stays within the batch bound.
package pqkafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
	"github.com/tributary-io/tributary/internal/kbatch"
)

// Envelope field ids (package tables' Field* constants).
const (
	fieldOffset            = 2
	fieldTimestamp         = 3
	fieldKey               = 5
	fieldValue             = 6
	fieldProducerTimestamp = 10
	fieldHeaderKey         = 13
	fieldHeaderValue       = 14
)

// FieldIDs are the field ids the encoder reads, for tests that check them
// against package tables: offset, timestamp, key, value,
// producer_timestamp, header key, header value.
var FieldIDs = [...]int{fieldOffset, fieldTimestamp, fieldKey, fieldValue, fieldProducerTimestamp, fieldHeaderKey, fieldHeaderValue}

// Errors.
var (
	// ErrUnsupported: the file does not have the envelope's columns with
	// their field ids and types; decode it another way.
	ErrUnsupported = errors.New("pqkafka: not an envelope layout")
	// ErrCorrupt: the file claims the envelope layout but its contents
	// are inconsistent or cannot be decoded.
	ErrCorrupt = errors.New("pqkafka: corrupt data file")
)

// Group is the record batches of one row group: batch i holds offsets
// [Ends[i-1], Ends[i]) (Ends[-1] = First) at Buf[Starts[i]:Starts[i+1]].
type Group struct {
	First  int64
	Buf    []byte
	Ends   []int64
	Starts []int
}

// Decoder holds the buffers one row group is decoded with; reuse it for
// the next (not concurrently).
type Decoder struct {
	offs, ts, pts []int64
	ptsOK         []bool
	keys, vals    [][]byte
	hk, hv        [][]byte
	hstart        []int32 // row r's headers are hk[hstart[r]:hstart[r+1]]
	hvstart       []int32 // the same, counted on the value column
	pages         []parquet.Page
	rows          int // rows of the column being read, so far
	want          int // rows wanted: reading a column stops there
	total         int // rows of the row group
}

// empty is a non-null empty byte string: nil means null.
var empty = []byte{}

// Open reads a data file's footer (size bytes of r), for Encode. Errors
// wrap ErrCorrupt, including a panic of parquet-go's footer decoding on
// bad bytes.
func Open(r io.ReaderAt, size int64) (f *parquet.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("%w: footer: %v", ErrCorrupt, p)
		}
	}()
	// parquet-go allocates the footer length the file's tail claims
	// before comparing it with the file's size.
	var tail [8]byte
	if size < 12 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, size)
	}
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return nil, fmt.Errorf("%w: footer: %v", ErrCorrupt, err)
	}
	if n := int64(binary.LittleEndian.Uint32(tail[:4])); string(tail[4:]) != "PAR1" || n > size-12 {
		return nil, fmt.Errorf("%w: footer of %d bytes in a file of %d, magic %q", ErrCorrupt, n, size, tail[4:])
	}
	f, err = parquet.OpenFile(r, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true),
		parquet.ReadBufferSize(256<<10))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return f, nil
}

// columns are the leaf columns the encoder reads.
type columns struct {
	off, ts, key, val, pts, hk, hv *parquet.Column
}

func findColumns(f *parquet.File) (columns, error) {
	var c columns
	var walk func(col *parquet.Column)
	walk = func(col *parquet.Column) {
		for _, ch := range col.Columns() {
			if !ch.Leaf() {
				walk(ch)
				continue
			}
			switch ch.ID() {
			case fieldOffset:
				c.off = ch
			case fieldTimestamp:
				c.ts = ch
			case fieldKey:
				c.key = ch
			case fieldValue:
				c.val = ch
			case fieldProducerTimestamp:
				c.pts = ch
			case fieldHeaderKey:
				c.hk = ch
			case fieldHeaderValue:
				c.hv = ch
			}
		}
	}
	walk(f.Root())
	kind := func(col *parquet.Column, k parquet.Kind, maxRep int) bool {
		return col == nil || col.Type().Kind() == k && col.MaxRepetitionLevel() == maxRep
	}
	switch {
	case c.off == nil || c.ts == nil || c.val == nil:
		return c, fmt.Errorf("%w: no offset, timestamp or value column with its field id", ErrUnsupported)
	case (c.hk == nil) != (c.hv == nil):
		return c, fmt.Errorf("%w: header key without header value", ErrUnsupported)
	case !kind(c.off, parquet.Int64, 0) || !kind(c.ts, parquet.Int64, 0) || !kind(c.pts, parquet.Int64, 0) ||
		!kind(c.key, parquet.ByteArray, 0) || !kind(c.val, parquet.ByteArray, 0) ||
		!kind(c.hk, parquet.ByteArray, 1) || !kind(c.hv, parquet.ByteArray, 1):
		return c, fmt.Errorf("%w: envelope columns of unexpected types", ErrUnsupported)
	}
	return c, nil
}

// Encode encodes row group rg of f, whose first row is offset first, as
// record batches of at most batchBytes of records each (at least one
// record per batch). The returned Group's slices are fresh; the decoder's
// buffers are kept for the next call.
func (d *Decoder) Encode(f *parquet.File, rg int, first int64, batchBytes int) (g *Group, err error) {
	return d.encodeRows(f, rg, first, batchBytes, -1)
}

// EncodePrefix is Encode of the batches of row group rg that hold offsets
// before from plus about limit bytes of records after it (from the value
// column's average row size): only as many pages are read as those rows
// need. The batches are exactly Encode's first batches; the last one is
// left out unless the prefix reaches the row group's end (it could be cut
// short), so the Group may have none. For a consumer's first fetch of a
// cold row group, answered before the whole row group is encoded.
func (d *Decoder) EncodePrefix(f *parquet.File, rg int, first int64, batchBytes int, from int64, limit int) (*Group, error) {
	rows := 0
	if rg >= 0 && rg < len(f.Metadata().RowGroups) {
		g := f.Metadata().RowGroups[rg]
		avg := int64(1024)
		if cols, err := findColumns(f); err == nil && g.NumRows > 0 && cols.val.Index() < len(g.Columns) {
			avg = max(1, g.Columns[cols.val.Index()].MetaData.TotalUncompressedSize/g.NumRows)
		}
		rows = int(min(max(0, from-first)+int64(limit)/avg+2, g.NumRows, 1<<24))
	}
	return d.encodeRows(f, rg, first, batchBytes, max(rows, 1))
}

// encodeRows encodes the first want rows of row group rg (all: -1).
func (d *Decoder) encodeRows(f *parquet.File, rg int, first int64, batchBytes, want int) (g *Group, err error) {
	defer func() {
		for i, p := range d.pages {
			parquet.Release(p)
			d.pages[i] = nil
		}
		d.pages = d.pages[:0]
		// The byte slices point into released pages: drop them.
		clear(d.keys)
		clear(d.vals)
		clear(d.hk[:cap(d.hk)])
		clear(d.hv[:cap(d.hv)])
		if r := recover(); r != nil {
			g, err = nil, fmt.Errorf("%w: row group %d: %v", ErrCorrupt, rg, r)
		}
	}()
	cols, err := findColumns(f)
	if err != nil {
		return nil, err
	}
	groups := f.RowGroups()
	if rg < 0 || rg >= len(groups) {
		return nil, fmt.Errorf("%w: row group %d of %d", ErrCorrupt, rg, len(groups))
	}
	rowGroup := groups[rg]
	n64 := rowGroup.NumRows()
	if n64 <= 0 || n64 > 1<<24 {
		return nil, fmt.Errorf("%w: row group %d has %d rows", ErrCorrupt, rg, n64)
	}
	total := int(n64)
	n := total
	if want >= 0 && want < total {
		n = want
	}
	chunks := rowGroup.ColumnChunks()
	chunk := func(c *parquet.Column) (parquet.ColumnChunk, error) {
		if c.Index() < 0 || c.Index() >= len(chunks) {
			return nil, fmt.Errorf("%w: column %d of %d", ErrCorrupt, c.Index(), len(chunks))
		}
		return chunks[c.Index()], nil
	}
	d.want, d.total = n, total
	flat := func(c *parquet.Column, name string, top bool, mk func(*parquet.Column) func(parquet.Page) error) error {
		if c == nil {
			return nil
		}
		fn := mk(c)
		ch, err := chunk(c)
		if err != nil {
			return err
		}
		if err := checkPages(f, rg, c.Index()); err != nil {
			return fmt.Errorf("column %s: %w", name, err)
		}
		d.rows = 0
		if err := d.readPages(ch, name, fn); err != nil {
			return err
		}
		if top && (d.rows < n || n == total && d.rows != total) {
			return fmt.Errorf("%w: column %s has %d rows, the row group %d", ErrCorrupt, name, d.rows, total)
		}
		return nil
	}
	d.offs, d.ts = resize(d.offs, n), resize(d.ts, n)
	if err := flat(cols.off, "offset", true, d.int64s(&d.offs, nil, total)); err != nil {
		return nil, err
	}
	if err := flat(cols.ts, "timestamp", true, d.int64s(&d.ts, nil, total)); err != nil {
		return nil, err
	}
	d.pts, d.ptsOK = resize(d.pts, n), resize(d.ptsOK, n)
	clear(d.ptsOK)
	if err := flat(cols.pts, "producer_timestamp", true, d.int64s(&d.pts, d.ptsOK, total)); err != nil {
		return nil, err
	}
	d.keys, d.vals = resize(d.keys, n), resize(d.vals, n)
	clear(d.keys)
	if err := flat(cols.key, "key", true, d.byteArrays(d.keys, total)); err != nil {
		return nil, err
	}
	if err := flat(cols.val, "value", true, d.byteArrays(d.vals, total)); err != nil {
		return nil, err
	}
	for i := range d.vals {
		if d.vals[i] == nil {
			d.vals[i] = empty // value is never null in a batch
		}
	}
	d.hstart, d.hvstart = resize(d.hstart, n+1)[:0], resize(d.hvstart, n+1)[:0]
	d.hk, d.hv = d.hk[:0], d.hv[:0]
	if cols.hk != nil {
		if err := flat(cols.hk, "header key", false, d.repeated(&d.hk, &d.hstart, total)); err != nil {
			return nil, err
		}
		if err := flat(cols.hv, "header value", false, d.repeated(&d.hv, &d.hvstart, total)); err != nil {
			return nil, err
		}
		if n < total {
			// A prefix: the rows beyond it are cut off.
			if len(d.hstart) < n || len(d.hvstart) < n {
				return nil, fmt.Errorf("%w: row group %d: header columns have %d and %d rows, want at least %d", ErrCorrupt, rg, len(d.hstart), len(d.hvstart), n)
			}
			if len(d.hstart) > n {
				d.hk = d.hk[:d.hstart[n]]
			}
			if len(d.hvstart) > n {
				d.hv = d.hv[:d.hvstart[n]]
			}
			d.hstart, d.hvstart = d.hstart[:n], d.hvstart[:n]
		}
		if len(d.hstart) != n || len(d.hvstart) != n || len(d.hk) != len(d.hv) {
			return nil, fmt.Errorf("%w: row group %d: header columns have %d and %d rows, %d and %d elements, want %d rows",
				ErrCorrupt, rg, len(d.hstart), len(d.hvstart), len(d.hk), len(d.hv), total)
		}
		for i := range d.hstart {
			if d.hstart[i] != d.hvstart[i] {
				return nil, fmt.Errorf("%w: row group %d row %d: header keys and values disagree", ErrCorrupt, rg, i)
			}
		}
		for i, k := range d.hk {
			if k == nil {
				return nil, fmt.Errorf("%w: row group %d: null header key %d", ErrCorrupt, rg, i)
			}
		}
	} else {
		d.hstart = resize(d.hstart, n)
		clear(d.hstart)
	}
	d.hstart = append(d.hstart, int32(len(d.hk)))
	for i, o := range d.offs {
		if o != first+int64(i) {
			return nil, fmt.Errorf("%w: row group %d: row %d has offset %d, want %d", ErrCorrupt, rg, i, o, first+int64(i))
		}
	}
	g = d.encode(first, n, batchBytes)
	if n < total && len(g.Ends) > 0 { // the last batch may be cut short
		g.Ends = g.Ends[:len(g.Ends)-1]
		g.Starts = g.Starts[:len(g.Starts)-1]
		g.Buf = g.Buf[:g.Starts[len(g.Starts)-1]]
	}
	return g, nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Bounds of one page: parquet-go allocates what a page header claims
// before it reads the page, so the headers are checked first.
const (
	maxPageBytes  = 256 << 20
	maxPageValues = 1 << 24
)

// checkPages walks the page headers of leaf column col of row group rg
// (without reading the pages) and checks each against the bounds and the
// column chunk.
func checkPages(f *parquet.File, rg, col int) error {
	md := f.Metadata()
	if rg >= len(md.RowGroups) || col >= len(md.RowGroups[rg].Columns) {
		return fmt.Errorf("%w: no column chunk %d in row group %d", ErrCorrupt, col, rg)
	}
	cm := md.RowGroups[rg].Columns[col].MetaData
	pos := cm.DataPageOffset
	if cm.DictionaryPageOffset > 0 && cm.DictionaryPageOffset < pos {
		pos = cm.DictionaryPageOffset
	}
	end := pos + cm.TotalCompressedSize
	if pos < 4 || cm.TotalCompressedSize < 0 || end > f.Size() || end < pos {
		return fmt.Errorf("%w: column chunk at %d+%d in a file of %d bytes", ErrCorrupt, pos, cm.TotalCompressedSize, f.Size())
	}
	switch cm.Codec {
	case format.Uncompressed, format.Zstd:
	default:
		// parquet-go's other decoders size their output from the stream
		// (lz4 doubles it until it fits): not read here.
		return fmt.Errorf("%w: compression codec %v", ErrUnsupported, cm.Codec)
	}
	small := make([]byte, 4096)
	var proto thrift.CompactProtocol
	for pos < end {
		// A header is read from 4 KiB, or 1 MiB if it is longer (page
		// statistics of long values).
		var h format.PageHeader
		var buf []byte
		var r *bytes.Reader
		var n int
		for _, w := range [][]byte{small, nil} {
			if w == nil {
				w = make([]byte, min(1<<20, end-pos))
			}
			var err error
			n, err = f.ReadAt(w[:min(int64(len(w)), end-pos)], pos)
			if n == 0 {
				return fmt.Errorf("%w: page header at %d: %v", ErrCorrupt, pos, err)
			}
			buf, r, h = w, bytes.NewReader(w[:n]), format.PageHeader{}
			if err = thrift.NewDecoder(proto.NewReader(r)).Decode(&h); err == nil {
				break
			} else if len(w) > len(small) || int64(n) == end-pos {
				return fmt.Errorf("%w: page header at %d: %v", ErrCorrupt, pos, err)
			}
		}
		nv := int32(0)
		switch {
		case h.DataPageHeader.Valid:
			nv = h.DataPageHeader.V.NumValues
		case h.DataPageHeaderV2.Valid:
			nv = h.DataPageHeaderV2.V.NumValues
		case h.DictionaryPageHeader.Valid:
			nv = h.DictionaryPageHeader.V.NumValues
		}
		pos += int64(n - r.Len())
		if h.UncompressedPageSize < 0 || h.UncompressedPageSize > maxPageBytes || h.CompressedPageSize < 0 ||
			int64(h.CompressedPageSize) > end-pos || nv < 0 || nv > maxPageValues {
			return fmt.Errorf("%w: page at %d: %d bytes (%d compressed) of %d values", ErrCorrupt, pos, h.UncompressedPageSize, h.CompressedPageSize, nv)
		}
		if cm.Codec == format.Zstd && h.CompressedPageSize > 0 {
			if err := checkZstdFrame(f, pos, buf[n-r.Len():n], h.UncompressedPageSize); err != nil {
				return err
			}
		}
		pos += int64(h.CompressedPageSize)
	}
	return nil
}

// checkZstdFrame checks that the zstd frame of a page at pos (head: the
// bytes of it already read) claims no more content than the page header
// says: the decoder allocates the frame's claim.
func checkZstdFrame(f *parquet.File, pos int64, head []byte, size int32) error {
	var fh [18]byte // magic, descriptor, window, dictionary id, content size
	m := copy(fh[:], head)
	if m < len(fh) {
		n, _ := f.ReadAt(fh[m:], pos+int64(m))
		m += n
	}
	b := fh[:m]
	if len(b) < 5 || binary.LittleEndian.Uint32(b) != 0xFD2FB528 {
		return nil // not a frame header: the decoder refuses it
	}
	d := b[4]
	i := 5
	if d&0x20 == 0 { // not single segment: a window descriptor
		i++
	}
	i += [4]int{0, 1, 2, 4}[d&3]
	var fcs uint64
	switch d >> 6 {
	case 0:
		if d&0x20 == 0 {
			return nil // no content size
		}
		if i+1 <= len(b) {
			fcs = uint64(b[i])
		}
	case 1:
		if i+2 <= len(b) {
			fcs = uint64(binary.LittleEndian.Uint16(b[i:])) + 256
		}
	case 2:
		if i+4 <= len(b) {
			fcs = uint64(binary.LittleEndian.Uint32(b[i:]))
		}
	case 3:
		if i+8 <= len(b) {
			fcs = binary.LittleEndian.Uint64(b[i:])
		}
	}
	if fcs > uint64(size) {
		return fmt.Errorf("%w: page at %d: zstd frame of %d bytes in a page of %d", ErrCorrupt, pos, fcs, size)
	}
	return nil
}

// readPages calls fn with each page of the chunk, keeping the pages until
// the row group is encoded.
func (d *Decoder) readPages(ch parquet.ColumnChunk, name string, fn func(parquet.Page) error) error {
	pages := ch.Pages()
	defer pages.Close()
	for {
		p, err := pages.ReadPage()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: column %s: %v", ErrCorrupt, name, err)
		}
		d.pages = append(d.pages, p)
		if err := fn(p); err != nil {
			return fmt.Errorf("column %s: %w", name, err)
		}
		if d.rows >= d.want && d.want < d.total {
			return nil // a prefix: enough rows
		}
	}
}

// topLevels checks a page of a top-level (unrepeated) column about to
// fill rows row.. of n: one definition level per value (none only for a
// required column) and no row past n. It returns the levels and the
// page's value count.
func topLevels(p parquet.Page, maxDef byte, row, n int) ([]byte, int, error) {
	defs := p.DefinitionLevels()
	cnt := int(p.NumValues())
	if len(defs) != 0 && len(defs) != cnt || len(defs) == 0 && maxDef != 0 {
		return nil, 0, fmt.Errorf("%w: %d levels for %d values", ErrCorrupt, len(defs), cnt)
	}
	if row+cnt > n {
		return nil, 0, fmt.Errorf("%w: more than %d rows", ErrCorrupt, n)
	}
	return defs, cnt, nil
}

// int64s fills (*dst)[row] with a top-level INT64 column's values; for an
// optional column ok[row] says which rows have one (ok nil: required,
// every row must).
func (d *Decoder) int64s(dst *[]int64, ok []bool, n int) func(*parquet.Column) func(parquet.Page) error {
	return func(c *parquet.Column) func(parquet.Page) error { return d.int64Pages(c, *dst, ok, n) }
}

func (d *Decoder) int64Pages(c *parquet.Column, dst []int64, ok []bool, n int) func(parquet.Page) error {
	row := 0
	maxDef := byte(c.MaxDefinitionLevel())
	return func(p parquet.Page) error {
		vals, dict, err := int64Data(p)
		if err != nil {
			return err
		}
		defs, cnt, err := topLevels(p, maxDef, row, n)
		if err != nil {
			return err
		}
		v := 0
		for i := range cnt {
			if len(defs) != 0 && defs[i] != maxDef {
				if ok == nil {
					return fmt.Errorf("%w: null in a required column", ErrCorrupt)
				}
				row++
				continue
			}
			x, err := pick(vals, dict, v)
			if err != nil {
				return err
			}
			if row < d.want {
				dst[row] = x
				if ok != nil {
					ok[row] = true
				}
			}
			v++
			row++
		}
		if v != len(vals) {
			return fmt.Errorf("%w: %d values for %d non-null levels", ErrCorrupt, len(vals), v)
		}
		d.rows = row
		return nil
	}
}

// int64Data returns a page's values, or its dictionary indexes (int32,
// widened) and the dictionary.
func int64Data(p parquet.Page) (vals []int64, dict []int64, err error) {
	if dc := p.Dictionary(); dc != nil {
		dv := dc.Page().Data()
		if dv.Kind() != encoding.Int64 {
			return nil, nil, fmt.Errorf("%w: dictionary of kind %v", ErrCorrupt, dv.Kind())
		}
		idx := p.Data()
		if idx.Kind() != encoding.Int32 {
			return nil, nil, fmt.Errorf("%w: dictionary indexes of kind %v", ErrCorrupt, idx.Kind())
		}
		ix := idx.Int32()
		w := make([]int64, len(ix))
		for i, x := range ix {
			w[i] = int64(x)
		}
		return w, dv.Int64(), nil
	}
	v := p.Data()
	if v.Kind() != encoding.Int64 {
		return nil, nil, fmt.Errorf("%w: page of kind %v", ErrCorrupt, v.Kind())
	}
	return v.Int64(), nil, nil
}

func pick(vals, dict []int64, i int) (int64, error) {
	if i >= len(vals) {
		return 0, fmt.Errorf("%w: fewer values than levels", ErrCorrupt)
	}
	if dict == nil {
		return vals[i], nil
	}
	x := vals[i]
	if x < 0 || x >= int64(len(dict)) {
		return 0, fmt.Errorf("%w: dictionary index %d of %d", ErrCorrupt, x, len(dict))
	}
	return dict[x], nil
}

// byteArrays is a page's byte strings: the i-th of them, aliased.
type byteArrays struct {
	data []byte
	offs []uint32
	ix   []int32 // dictionary indexes, when indexed
}

func byteData(p parquet.Page) (byteArrays, error) {
	var b byteArrays
	v := p.Data()
	if dc := p.Dictionary(); dc != nil {
		if v.Kind() != encoding.Int32 {
			return b, fmt.Errorf("%w: dictionary indexes of kind %v", ErrCorrupt, v.Kind())
		}
		b.ix = v.Int32()
		v = dc.Page().Data()
	}
	if v.Kind() != encoding.ByteArray {
		return b, fmt.Errorf("%w: page of kind %v", ErrCorrupt, v.Kind())
	}
	b.data, b.offs = v.ByteArray()
	if len(b.offs) == 0 {
		b.offs = []uint32{0}
	}
	return b, nil
}

func (b *byteArrays) len() int {
	if b.ix != nil {
		return len(b.ix)
	}
	return len(b.offs) - 1
}

func (b *byteArrays) at(i int) ([]byte, error) {
	if b.ix != nil {
		if i >= len(b.ix) {
			return nil, fmt.Errorf("%w: fewer values than levels", ErrCorrupt)
		}
		i = int(b.ix[i])
		if i < 0 || i >= len(b.offs)-1 {
			return nil, fmt.Errorf("%w: dictionary index %d of %d", ErrCorrupt, i, len(b.offs)-1)
		}
	}
	if i+1 >= len(b.offs) {
		return nil, fmt.Errorf("%w: fewer values than levels", ErrCorrupt)
	}
	j, k := b.offs[i], b.offs[i+1]
	if j > k || int(k) > len(b.data) {
		return nil, fmt.Errorf("%w: byte array offsets %d..%d of %d", ErrCorrupt, j, k, len(b.data))
	}
	if j == k {
		return empty, nil
	}
	return b.data[j:k:k], nil
}

// byteArrays fills dst[row] with a top-level BYTE_ARRAY column's values,
// nil for a null.
func (d *Decoder) byteArrays(dst [][]byte, n int) func(*parquet.Column) func(parquet.Page) error {
	return func(c *parquet.Column) func(parquet.Page) error { return d.bytePages(c, dst, n) }
}

func (d *Decoder) bytePages(c *parquet.Column, dst [][]byte, n int) func(parquet.Page) error {
	row := 0
	maxDef := byte(c.MaxDefinitionLevel())
	return func(p parquet.Page) error {
		b, err := byteData(p)
		if err != nil {
			return err
		}
		defs, cnt, err := topLevels(p, maxDef, row, n)
		if err != nil {
			return err
		}
		v := 0
		for i := range cnt {
			if len(defs) != 0 && defs[i] != maxDef {
				if row < d.want {
					dst[row] = nil
				}
				row++
				continue
			}
			x, err := b.at(v)
			if err != nil {
				return err
			}
			if row < d.want {
				dst[row] = x
			}
			v++
			row++
		}
		if v != b.len() {
			return fmt.Errorf("%w: %d values for %d non-null levels", ErrCorrupt, b.len(), v)
		}
		d.rows = row
		return nil
	}
}

// repeated reads a header leaf (a BYTE_ARRAY in a list of structs): each
// element's value (nil = null) is appended to *dst, and each row's first
// element index to *starts.
func (d *Decoder) repeated(dst *[][]byte, starts *[]int32, n int) func(*parquet.Column) func(parquet.Page) error {
	return func(c *parquet.Column) func(parquet.Page) error { return d.repeatedPages(c, dst, starts, n) }
}

func (d *Decoder) repeatedPages(c *parquet.Column, dst *[][]byte, starts *[]int32, n int) func(parquet.Page) error {
	maxDef := byte(c.MaxDefinitionLevel())
	elemDef := maxDef // the definition level at which the list element exists
	if c.Optional() {
		elemDef--
	}
	return func(p parquet.Page) error {
		b, err := byteData(p)
		if err != nil {
			return err
		}
		defs, reps := p.DefinitionLevels(), p.RepetitionLevels()
		cnt := int(p.NumValues())
		if len(defs) != cnt || len(reps) != cnt {
			return fmt.Errorf("%w: %d and %d levels for %d values", ErrCorrupt, len(defs), len(reps), cnt)
		}
		v := 0
		for i := range cnt {
			switch {
			case reps[i] == 0:
				if len(*starts) >= n {
					return fmt.Errorf("%w: more than %d rows", ErrCorrupt, n)
				}
				*starts = append(*starts, int32(len(*dst)))
			case reps[i] != 1 || len(*starts) == 0:
				return fmt.Errorf("%w: repetition level %d", ErrCorrupt, reps[i])
			}
			switch {
			case defs[i] == maxDef:
				x, err := b.at(v)
				if err != nil {
					return err
				}
				*dst = append(*dst, x)
				v++
			case defs[i] >= elemDef:
				*dst = append(*dst, nil)
			case reps[i] != 0:
				return fmt.Errorf("%w: a repeated empty list", ErrCorrupt)
			}
		}
		if v != b.len() {
			return fmt.Errorf("%w: %d values for %d non-null levels", ErrCorrupt, b.len(), v)
		}
		d.rows = len(*starts) - 1 // the last row may go on in the next page
		return nil
	}
}

// tsMs is row i's Kafka timestamp: the producer's if set, else the time
// it was accepted (kafka.RecordTimestampMs).
func (d *Decoder) tsMs(i int) int64 {
	if d.ptsOK[i] {
		if p := d.pts[i] / 1000; p != 0 {
			return p
		}
	}
	return d.ts[i] / 1000
}

// recordSize is kafka.RecordSize of row i.
func (d *Decoder) recordSize(i int) int {
	n := 24 + len(d.keys[i]) + len(d.vals[i])
	for h := d.hstart[i]; h < d.hstart[i+1]; h++ {
		n += 10 + len(d.hk[h]) + len(d.hv[h])
	}
	return n
}

func (d *Decoder) encode(first int64, n, batchBytes int) *Group {
	need := 0
	for i := range n {
		need += d.recordSize(i)
	}
	g := &Group{First: first, Buf: make([]byte, 0, need+need/max(batchBytes, 1)*61+64)}
	for i := 0; i < n; {
		j, size := i+1, d.recordSize(i)
		for j < n && size+d.recordSize(j) <= batchBytes {
			size += d.recordSize(j)
			j++
		}
		g.Starts = append(g.Starts, len(g.Buf))
		g.Buf = d.appendBatch(g.Buf, first+int64(i), i, j)
		g.Ends = append(g.Ends, first+int64(j))
		i = j
	}
	g.Starts = append(g.Starts, len(g.Buf))
	return g
}

// appendBatch appends the batch of rows [i, j), base offset base, byte
// for byte as kafka.AppendBatch encodes the same records.
func (d *Decoder) appendBatch(dst []byte, base int64, i, j int) []byte {
	start := len(dst)
	baseTS := d.tsMs(i)
	maxTS := baseTS
	for r := i; r < j; r++ {
		maxTS = max(maxTS, d.tsMs(r))
	}
	dst = kbatch.AppendHeader(dst, base, j-i, baseTS, maxTS)
	for r := i; r < j; r++ {
		tsDelta := d.tsMs(r) - baseTS
		key, val := d.keys[r], d.vals[r]
		hs, he := d.hstart[r], d.hstart[r+1]
		size := 1 + kbatch.VarintLen(tsDelta) + kbatch.VarintLen(int64(r-i)) + kbatch.NullableLen(key) + kbatch.VarintLen(int64(len(val))) + len(val) +
			kbatch.VarintLen(int64(he-hs))
		for h := hs; h < he; h++ {
			size += kbatch.VarintLen(int64(len(d.hk[h]))) + len(d.hk[h]) + kbatch.NullableLen(d.hv[h])
		}
		dst = binary.AppendVarint(dst, int64(size))
		dst = append(dst, 0) // record attributes
		dst = binary.AppendVarint(dst, tsDelta)
		dst = binary.AppendVarint(dst, int64(r-i))
		dst = kbatch.AppendNullable(dst, key)
		dst = binary.AppendVarint(dst, int64(len(val)))
		dst = append(dst, val...)
		dst = binary.AppendVarint(dst, int64(he-hs))
		for h := hs; h < he; h++ {
			dst = binary.AppendVarint(dst, int64(len(d.hk[h])))
			dst = append(dst, d.hk[h]...)
			dst = kbatch.AppendNullable(dst, d.hv[h])
		}
	}
	kbatch.Finish(dst[start:])
	return dst
}
