package wal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/tributary-io/tributary"
)

// captureTap keeps copies of the tapped chunks and the owner's committed
// Next of each partition at the moment of the tap.
type captureTap struct {
	w         *WAL
	mu        sync.Mutex
	parts     []TappedPartition
	committed []int64 // the WAL's committed Next when tapped
}

func (c *captureTap) Tapped(parts []TappedPartition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		cp := p
		cp.Chunks = nil
		for _, ch := range p.Chunks {
			cp.Chunks = append(cp.Chunks, append([]byte(nil), ch...))
		}
		c.parts = append(c.parts, cp)
		st, _ := c.w.Partition(p.Stream, p.Partition)
		c.committed = append(c.committed, st.Next)
	}
}

func (c *captureTap) take() []TappedPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.parts
	c.parts = nil
	return out
}

func verbatim(t *testing.T, w *WAL, v Verbatim) (VerbatimResult, error) {
	t.Helper()
	type res struct {
		r   VerbatimResult
		err error
	}
	ch := make(chan res, 1)
	w.Submit(Op{Kind: OpVerbatim, Verbatim: &v, Done: func(r Result) { ch <- res{r.Verbatim, r.Err} }})
	r := <-ch
	return r.r, r.err
}

func appendRecs(t *testing.T, w *WAL, stream string, part int32, n int) {
	t.Helper()
	recs := make([]*tributary.Record, n)
	for i := range recs {
		recs[i] = rec(stream, part, "vvvv")
	}
	if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: recs}).Err; err != nil {
		t.Fatal(err)
	}
}

// readPartition reads all of a partition's records.
func readPartition(t *testing.T, w *WAL, stream string, part int32) []*tributary.Record {
	t.Helper()
	return readAll(t, w, stream, part, 0, 0, 0)
}

// TestIncarnation: every Open raises the incarnation durably, and each
// partition's Start is its Next at that Open.
func TestIncarnation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	var last int64
	for round := 1; round <= 3; round++ {
		w, err := Open(Options{Path: path, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		if inc := w.Stats().Incarnation; inc <= last {
			t.Fatalf("round %d: incarnation %d, want > %d", round, inc, last)
		}
		last = w.Stats().Incarnation
		st, _ := w.Partition("s", 0)
		if st.Start != int64(3*(round-1)) || st.Next != st.Start {
			t.Fatalf("round %d: %+v, want Start = Next = %d", round, st, 3*(round-1))
		}
		appendRecs(t, w, "s", 0, 3)
		if st, _ := w.Partition("s", 0); st.Start != int64(3*(round-1)) {
			t.Fatalf("round %d: Start moved to %d by an append", round, st.Start)
		}
		w.Close()
	}
}

// TestTapVerbatim: the tap sees each group's chunks before the group is
// committed, and a second WAL storing them verbatim holds byte-identical
// chunks and the same records.
func TestTapVerbatim(t *testing.T) {
	owner := openTest(t, Options{NoSync: true})
	tap := &captureTap{w: owner}
	owner.SetTap(tap)
	replica := openTest(t, Options{NoSync: true})
	appendRecs(t, owner, "s", 1, 5)
	appendRecs(t, owner, "s", 1, 2000) // more than one chunk in one group
	parts := tap.take()
	if len(parts) != 2 {
		t.Fatalf("tapped %d groups, want 2", len(parts))
	}
	if tap.committed[0] != 0 || tap.committed[1] != 5 {
		t.Fatalf("committed Next when tapped: %v, want [0 5] (tapped before the commit)", tap.committed)
	}
	if len(parts[1].Chunks) < 2 || parts[1].First != 5 || parts[1].Next != 2005 || parts[1].Incarnation != owner.Stats().Incarnation {
		t.Fatalf("second group: %d chunks, next %d, incarnation %d", len(parts[1].Chunks), parts[1].Next, parts[1].Incarnation)
	}
	for _, p := range parts {
		r, err := verbatim(t, replica, Verbatim{Stream: p.Stream, Partition: p.Partition, Epoch: p.Epoch,
			Incarnation: p.Incarnation, From: p.Start, Chunks: p.Chunks})
		if err != nil || r.Skipped != 0 || r.Next != p.Next {
			t.Fatalf("verbatim: %+v, %v", r, err)
		}
	}
	sameWAL(t, owner, replica, "s", 1)
}

// sameWAL checks that two WALs hold the same chunk bytes and records.
func sameWAL(t *testing.T, a, b *WAL, stream string, part int32) {
	t.Helper()
	ca, err := a.ReadChunks(stream, part, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := b.ReadChunks(stream, part, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ca, cb) {
		t.Fatalf("chunks differ: %d and %d chunks", len(ca), len(cb))
	}
	if ra, rb := readPartition(t, a, stream, part), readPartition(t, b, stream, part); !reflect.DeepEqual(ra, rb) {
		t.Fatalf("records differ: %d and %d", len(ra), len(rb))
	}
	sa, _ := a.Partition(stream, part)
	sb, _ := b.Partition(stream, part)
	if sa.Next != sb.Next || sa.Released != sb.Released || sa.Bytes != sb.Bytes {
		t.Fatalf("states differ: %+v and %+v", sa, sb)
	}
}

// chunksOf encodes records [from, to) of partition s/0 as chunks of per
// records each.
func chunksOf(from, to int64, per int, value string) [][]byte {
	var out [][]byte
	for f := from; f < to; f += int64(per) {
		var recs [][]byte
		for o := f; o < min(to, f+int64(per)); o++ {
			r := rec("s", 0, value)
			r.Offset, r.Epoch = o, 1
			recs = append(recs, EncodeRecord(nil, r))
		}
		out = append(out, EncodeChunk(nil, f, recs))
	}
	return out
}

// TestVerbatimScript walks OpVerbatim through duplicates,
// overlaps, gaps, a bad checksum, the budget, a new incarnation's drop, a
// stale incarnation and a reopen.
func TestVerbatimScript(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w := openTest(t, Options{Path: path, NoSync: true, MaxBytes: 40 * recSize})
	do := func(where string, v Verbatim, want VerbatimResult, wantErr error) {
		t.Helper()
		v.Stream = "s"
		r, err := verbatim(t, w, v)
		if !errors.Is(err, wantErr) || err == nil && r != want {
			t.Fatalf("%s: %+v, %v; want %+v, %v", where, r, err, want, wantErr)
		}
	}
	state := func(where string, released, next, tag int64) {
		t.Helper()
		ps, _ := w.Partition("s", 0)
		if ps.Released != released || ps.Next != next || ps.Tag != tag || ps.Bytes != (next-released)*recSize {
			t.Fatalf("%s: %+v, want [%d, %d) tag %d", where, ps, released, next, tag)
		}
		if got := readOffsets(t, w, "s", 0, 0, 0, 0); fmt.Sprint(got) != fmt.Sprint(offsets(released, next)) {
			t.Fatalf("%s: read %v", where, got)
		}
	}
	do("create at 10", Verbatim{Incarnation: 1, Chunks: chunksOf(10, 20, 4, "vvvv")}, VerbatimResult{Next: 20}, nil)
	state("create at 10", 10, 20, 1)
	do("duplicate", Verbatim{Incarnation: 1, Chunks: chunksOf(10, 20, 4, "vvvv")}, VerbatimResult{Skipped: 10, Next: 20}, nil)
	do("overlap", Verbatim{Incarnation: 1, Chunks: chunksOf(18, 25, 4, "vvvv")}, VerbatimResult{Skipped: 2, Next: 25}, nil)
	state("overlap", 10, 25, 1)
	var gap *GapError
	do("gap", Verbatim{Incarnation: 1, Chunks: chunksOf(26, 28, 4, "vvvv")}, VerbatimResult{}, ErrGap)
	_, err := verbatim(t, w, Verbatim{Stream: "s", Incarnation: 1, Chunks: chunksOf(26, 28, 4, "vvvv")})
	if !errors.As(err, &gap) || gap.Next != 25 {
		t.Fatalf("gap error %v", err)
	}
	bad := chunksOf(25, 27, 4, "vvvv")
	bad[0][12] ^= 0xff
	do("bad checksum", Verbatim{Incarnation: 1, Chunks: bad}, VerbatimResult{}, ErrCorrupt)
	do("not consecutive", Verbatim{Incarnation: 1, Chunks: append(chunksOf(25, 27, 4, "vvvv"), chunksOf(28, 30, 4, "vvvv")...)}, VerbatimResult{}, ErrCorrupt)
	do("budget", Verbatim{Incarnation: 1, Chunks: chunksOf(25, 60, 8, "vvvv")}, VerbatimResult{}, ErrBudgetExceeded)
	state("refusals leave no trace", 10, 25, 1)

	// Incarnation 2 of the owner began with 21 durable: 21 to 24 were never
	// durable there and are dropped (the chunk [20, 22) is cut to [20, 21),
	// [22, 25) deleted); the owner's new 21 and 22 follow.
	do("new incarnation", Verbatim{Incarnation: 2, From: 21, Chunks: chunksOf(21, 23, 4, "wwww")},
		VerbatimResult{Dropped: 4, Next: 23}, nil)
	state("new incarnation", 10, 23, 2)
	recs := readPartition(t, w, "s", 0)
	if string(recs[10].Value) != "vvvv" || string(recs[11].Value) != "wwww" || string(recs[12].Value) != "wwww" {
		t.Fatalf("after the drop: %q %q %q", recs[10].Value, recs[11].Value, recs[12].Value)
	}
	do("stale incarnation", Verbatim{Incarnation: 1, Chunks: chunksOf(23, 24, 4, "vvvv")}, VerbatimResult{}, ErrStale)
	state("stale refused", 10, 23, 2)
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "s", Partition: 0, Offset: 12}).Err; err != nil {
		t.Fatal(err)
	}
	// A drop never reaches below Released.
	do("drop below released", Verbatim{Incarnation: 3, From: 5}, VerbatimResult{Dropped: 11, Next: 12}, nil)
	state("drop below released", 12, 12, 3)
	do("after the drop", Verbatim{Incarnation: 3, Chunks: chunksOf(12, 15, 2, "xxxx")}, VerbatimResult{Next: 15}, nil)

	w.Close()
	w = openTest(t, Options{Path: path, NoSync: true, MaxBytes: 40 * recSize})
	state("reopened", 12, 15, 3)
	do("stale after reopen", Verbatim{Incarnation: 2, Chunks: chunksOf(15, 16, 2, "vvvv")}, VerbatimResult{}, ErrStale)
}

// TestReadChunksFrom: ReadChunks starts at the chunk holding from (or
// Released) and a replica fed from there catches up verbatim.
func TestReadChunksFrom(t *testing.T) {
	owner := openTest(t, Options{NoSync: true})
	for range 5 {
		appendRecs(t, owner, "s", 0, 10)
	}
	replica := openTest(t, Options{NoSync: true})
	ch, err := owner.ReadChunks("s", 0, 25, 0)
	if err != nil || len(ch) != 3 {
		t.Fatalf("read chunks from 25: %d chunks, %v", len(ch), err)
	}
	if err := replica.Apply(context.Background(), Op{Kind: OpEnsure, Stream: "s", Partition: 0, Offset: 25}).Err; err != nil {
		t.Fatal(err)
	}
	r, err := verbatim(t, replica, Verbatim{Stream: "s", Incarnation: owner.Stats().Incarnation, Chunks: ch})
	if err != nil || r.Skipped != 5 || r.Next != 50 {
		t.Fatalf("catch up: %+v, %v", r, err)
	}
	got := readPartition(t, replica, "s", 0)
	want, _ := owner.Read("s", 0, 25, 0, 0)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replica holds %d records, want %d equal ones", len(got), len(want))
	}
	if ch, _ := owner.ReadChunks("s", 0, 0, 1); len(ch) != 1 {
		t.Fatalf("maxBytes 1: %d chunks, want 1", len(ch))
	}
	if ch, _ := owner.ReadChunks("s", 0, 50, 0); len(ch) != 0 {
		t.Fatalf("from next: %d chunks", len(ch))
	}
}

// TestVerbatimBatches: a replica stores chunks holding Kafka batch
// entries (version 2) as the owner wrote them, cuts an overlapping one
// where an entry begins, and refuses a cut inside a batch entry — when
// storing (an overlap) and when dropping an older incarnation's records.
func TestVerbatimBatches(t *testing.T) {
	owner := openTest(t, Options{NoSync: true})
	tap := &captureTap{w: owner}
	owner.SetTap(tap)
	b, _ := testBatch("s", 0, 5, -1, 0, 0, 1)
	if err := appendBatch(t, owner, b); err != nil {
		t.Fatal(err)
	}
	appendRecs(t, owner, "s", 0, 2)
	parts := tap.take()
	if len(parts) != 2 || len(parts[0].Chunks) != 1 || len(parts[1].Chunks) != 1 {
		t.Fatalf("tapped %+v", parts)
	}
	batchChunk, recChunk := parts[0].Chunks[0], parts[1].Chunks[0]
	if batchChunk[0] != chunkV2 {
		t.Fatalf("the batch's chunk is version %d", batchChunk[0])
	}
	replica := openTest(t, Options{NoSync: true})
	for _, p := range parts {
		if _, err := verbatim(t, replica, Verbatim{Stream: "s", Epoch: p.Epoch, Incarnation: p.Incarnation, From: p.Start, Chunks: p.Chunks}); err != nil {
			t.Fatal(err)
		}
	}
	sameWAL(t, owner, replica, "s", 0)

	// One chunk holding the batch entry and the two records, [0, 7).
	bc, err := decodeChunk(batchChunk)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := decodeChunk(recChunk)
	if err != nil {
		t.Fatal(err)
	}
	combined := encodeChunkV(nil, 0, [][]byte{bc.record(0), rc.record(0), rc.record(1)}, []int{5, 1, 1})
	inc := owner.Stats().Incarnation

	r2 := openTest(t, Options{NoSync: true})
	if _, err := verbatim(t, r2, Verbatim{Stream: "s", Incarnation: inc, Chunks: [][]byte{batchChunk}}); err != nil {
		t.Fatal(err)
	}
	res, err := verbatim(t, r2, Verbatim{Stream: "s", Incarnation: inc, Chunks: [][]byte{combined}})
	if err != nil || res.Skipped != 5 || res.Next != 7 {
		t.Fatalf("overlap cut at the batch's end: %+v, %v", res, err)
	}
	if got, want := readPartition(t, r2, "s", 0), readPartition(t, owner, "s", 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("records after the cut differ: %d and %d", len(got), len(want))
	}
	// A drop at an entry's start keeps the entries below it.
	res, err = verbatim(t, r2, Verbatim{Stream: "s", Incarnation: inc + 1, From: 5})
	if err != nil || res.Dropped != 2 || res.Next != 5 {
		t.Fatalf("drop at the batch's end: %+v, %v", res, err)
	}
	if got := readPartition(t, r2, "s", 0); len(got) != 5 || got[4].Offset != 4 {
		t.Fatalf("after the drop: %d records", len(got))
	}

	r3 := openTest(t, Options{NoSync: true})
	if _, err := verbatim(t, r3, Verbatim{Stream: "s", Incarnation: inc, Chunks: chunksOf(0, 2, 2, "vvvv")}); err != nil {
		t.Fatal(err)
	}
	if _, err := verbatim(t, r3, Verbatim{Stream: "s", Incarnation: inc, Chunks: [][]byte{combined}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an overlap ending inside a batch entry: %v, want ErrCorrupt", err)
	}
	r4 := openTest(t, Options{NoSync: true})
	if _, err := verbatim(t, r4, Verbatim{Stream: "s", Incarnation: inc, Chunks: [][]byte{combined}}); err != nil {
		t.Fatal(err)
	}
	if _, err := verbatim(t, r4, Verbatim{Stream: "s", Incarnation: inc + 1, From: 2}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a drop inside a batch entry: %v, want ErrCorrupt", err)
	}
	if got := readPartition(t, r4, "s", 0); len(got) != 7 {
		t.Fatalf("a refused drop changed the partition: %d records", len(got))
	}
}
