package wal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tributary-io/tributary"
)

// at is a record with a preassigned offset and epoch.
func at(stream string, part int32, off, epoch int64) *tributary.Record {
	r := rec(stream, part, "vvvv")
	r.Offset, r.Epoch = off, epoch
	return r
}

func ats(stream string, part int32, from, to, epoch int64) []*tributary.Record {
	var out []*tributary.Record
	for o := from; o < to; o++ {
		out = append(out, at(stream, part, o, epoch))
	}
	return out
}

// TestAppendAtScript walks AppendAt through creation at an offset, resends,
// gaps, mixed partitions, Append after AppendAt and a reopen.
func TestAppendAtScript(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w := openTest(t, Options{Path: path, NoSync: true})
	ctx := context.Background()
	appendAt := func(where string, wantSkipped int, wantErr error, recs ...*tributary.Record) {
		t.Helper()
		wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: recs})
		skipped, err := int(wr.Skipped), wr.Err
		if !errors.Is(err, wantErr) || skipped != wantSkipped {
			t.Fatalf("%s: skipped %d, err %v; want %d, %v", where, skipped, err, wantSkipped, wantErr)
		}
	}
	state := func(where, stream string, part int32, released, next, epoch int64) {
		t.Helper()
		ps, ok := w.Partition(stream, part)
		if !ok || ps.Released != released || ps.Next != next || ps.Epoch != epoch || ps.Bytes != (next-released)*recSize {
			t.Fatalf("%s: %s/%d is %+v (known %v), want [%d, %d) epoch %d", where, stream, part, ps, ok, released, next, epoch)
		}
		if got := readOffsets(t, w, stream, part, 0, 0, 0); fmt.Sprint(got) != fmt.Sprint(offsets(released, next)) {
			t.Fatalf("%s: read %v, want [%d, %d)", where, got, released, next)
		}
	}

	// A new partition starts at its first record's offset.
	appendAt("create at 10", 0, nil, ats("r", 3, 10, 13, 2)...)
	state("create at 10", "r", 3, 10, 13, 2)
	// A resend overlapping the end: the known records are skipped.
	appendAt("overlap", 3, nil, ats("r", 3, 10, 15, 2)...)
	state("overlap", "r", 3, 10, 15, 2)
	// Entirely old: all skipped, nothing written.
	appendAt("all old", 2, nil, ats("r", 3, 11, 13, 2)...)
	state("all old", "r", 3, 10, 15, 2)
	// A gap refuses the whole call, including other partitions' records.
	gap := append(ats("r", 4, 0, 2, 1), ats("r", 3, 16, 18, 2)...)
	err := w.Apply(ctx, Op{Kind: OpAppendAt, Records: gap}).Err
	var ge *GapError
	if !errors.As(err, &ge) || ge.Next != 15 || ge.Offset != 16 || ge.Stream != "r" || ge.Partition != 3 {
		t.Fatalf("gap: %v, want GapError next 15 at 16", err)
	}
	if _, ok := w.Partition("r", 4); ok {
		t.Fatal("gap: the refused call created partition 4")
	}
	state("after gap", "r", 3, 10, 15, 2)
	// A gap inside one call (15 follows, 17 does not).
	appendAt("inner gap", 0, ErrGap, at("r", 3, 15, 2), at("r", 3, 17, 2))
	state("after inner gap", "r", 3, 10, 15, 2)
	// Mixed partitions and an epoch bump in one call.
	appendAt("mixed", 1, nil, at("r", 3, 14, 2), at("r", 3, 15, 3), at("r", 4, 7, 1), at("r", 4, 8, 1))
	state("mixed 3", "r", 3, 10, 16, 3)
	state("mixed 4", "r", 4, 7, 9, 1)
	// Append continues at next; its records keep their own epoch.
	r := rec("r", 3, "vvvv")
	if err := w.Apply(ctx, Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil || r.Offset != 16 {
		t.Fatalf("append after AppendAt: offset %d, %v", r.Offset, err)
	}
	// Release and reopen keep next and the epoch.
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "r", Partition: 3, Offset: 17}).Err; err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = openTest(t, Options{Path: path, NoSync: true})
	state("reopened", "r", 3, 17, 17, 3)
	state("reopened 4", "r", 4, 7, 9, 1)
	appendAt("after reopen", 0, nil, at("r", 3, 17, 3))
	appendAt("gap after release", 0, ErrGap, at("r", 3, 19, 3))
	// Invalid input.
	if wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: []*tributary.Record{at("r", 3, -1, 0)}}); !errors.Is(wr.Err, ErrInvalid) {
		t.Fatalf("negative offset: %v", wr.Err)
	}
	if wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: []*tributary.Record{nil}}); !errors.Is(wr.Err, ErrInvalid) {
		t.Fatalf("nil record: %v", wr.Err)
	}
}

// TestAppendAtBudget: a refused AppendAt leaves nothing, skipped records
// take no budget.
func TestAppendAtBudget(t *testing.T) {
	w := openTest(t, Options{NoSync: true, MaxBytes: 4 * recSize})
	ctx := context.Background()
	if wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: ats("r", 0, 5, 8, 0)}); wr.Err != nil {
		t.Fatal(wr.Err)
	}
	if wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: ats("r", 0, 5, 10, 0)}); !errors.Is(wr.Err, ErrBudgetExceeded) {
		t.Fatalf("over budget: %v", wr.Err)
	}
	checkBytes(t, w, "refused")
	if wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: ats("r", 0, 5, 9, 0)}); wr.Err != nil || wr.Skipped != 3 {
		t.Fatalf("fits after skipping: %d, %v", wr.Skipped, wr.Err)
	}
	if ps, _ := w.Partition("r", 0); ps.Next != 9 || ps.Bytes != 4*recSize {
		t.Fatalf("state %+v", ps)
	}
}

// TestAppendAtAsyncPipelined queues consecutive ranges back to back
// without waiting, as a replica receiving a pipelined stream does; they
// all land, in order, in few group commits.
func TestAppendAtAsyncPipelined(t *testing.T) {
	w := openTest(t, Options{})
	const ranges, per = 200, 5
	errs := make(chan error, ranges)
	for i := int64(0); i < ranges; i++ {
		w.Submit(Op{Kind: OpAppendAt, Records: ats("r", 1, 100+i*per, 100+(i+1)*per, 4), Done: func(wr Result) {
			skipped, err := int(wr.Skipped), wr.Err
			if err == nil && skipped != 0 {
				err = fmt.Errorf("skipped %d", skipped)
			}
			errs <- err
		}})
	}
	for i := 0; i < ranges; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ps, _ := w.Partition("r", 1)
	if ps.Released != 100 || ps.Next != 100+ranges*per || ps.Epoch != 4 {
		t.Fatalf("state %+v", ps)
	}
	if st := w.Stats(); st.Commits >= ranges {
		t.Fatalf("%d commits for %d pipelined ranges: no group commit", st.Commits, ranges)
	}
	w.Submit(Op{Kind: OpAppendAt, Records: []*tributary.Record{at("r", 1, 2000, 4)}, Done: func(wr Result) { errs <- wr.Err }})
	if err := <-errs; !errors.Is(err, ErrGap) {
		t.Fatalf("async gap: %v", err)
	}
}

// TestDropPartition: dropping frees the budget, survives a reopen, leaves
// other partitions alone, and a later append starts the partition afresh.
func TestDropPartition(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w := openTest(t, Options{Path: path, NoSync: true})
	ctx := context.Background()
	appendN(t, w, "d", 0, 10, 1000)
	appendN(t, w, "d", 1, 3, 1000)
	if wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: ats("d", 0, 10, 12, 5)}); wr.Err != nil {
		t.Fatal(wr.Err)
	}
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "d", Partition: 0, Offset: 4}).Err; err != nil {
		t.Fatal(err)
	}
	wr := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: "d", Partition: 0, Epoch: math.MaxInt64})
	n, err := wr.Dropped, wr.Err
	if err != nil || n != 8 {
		t.Fatalf("drop: %d, %v; want 8 unreleased records dropped", n, err)
	}
	if wr := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: "d", Partition: 0, Epoch: math.MaxInt64}); wr.Err != nil || wr.Dropped != 0 {
		t.Fatalf("drop again: %d, %v", wr.Dropped, wr.Err)
	}
	if wr := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: "d", Partition: 9, Epoch: math.MaxInt64}); wr.Err != nil || wr.Dropped != 0 {
		t.Fatalf("drop unknown: %d, %v", wr.Dropped, wr.Err)
	}
	check := func(where string) {
		t.Helper()
		if _, ok := w.Partition("d", 0); ok {
			t.Fatalf("%s: dropped partition still listed", where)
		}
		if got := readOffsets(t, w, "d", 0, 0, 0, 0); len(got) != 0 {
			t.Fatalf("%s: dropped partition reads %v", where, got)
		}
		checkPartition(t, w, where, "d", 1, 0, 3)
		if st := w.Stats(); st.Records != 3 || st.Bytes != 3*recSize || st.Partitions != 1 {
			t.Fatalf("%s: stats %+v", where, st)
		}
	}
	check("dropped")
	w.Close()
	w = openTest(t, Options{Path: path, NoSync: true})
	check("reopened")
	// AppendAt recreates it where its records start; Append after a drop
	// starts at 0.
	if wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: ats("d", 0, 20, 22, 6)}); wr.Err != nil {
		t.Fatal(wr.Err)
	}
	if ps, _ := w.Partition("d", 0); ps.Released != 20 || ps.Next != 22 || ps.Epoch != 6 {
		t.Fatalf("recreated: %+v", ps)
	}
	if wr := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: "d", Partition: 0, Epoch: math.MaxInt64}); wr.Err != nil {
		t.Fatal(wr.Err)
	}
	appendN(t, w, "d", 0, 2, 1000)
	checkPartition(t, w, "append after drop", "d", 0, 0, 2)
	checkBytes(t, w, "end")
}

// TestDropInGroup: a drop queued between appends of the same partition in
// one group commit applies in queue order.
func TestDropInGroup(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	appendN(t, w, "g", 0, 5, 1000)
	// Hold the committer: queue everything before it wakes up.
	w.mu.Lock()
	results := make(chan string, 4)
	w.queue = append(w.queue,
		&op{kind: opAppend, recs: []*tributary.Record{rec("g", 0, "vvvv")}, done: func(err error) { results <- fmt.Sprint("append ", err) }},
		&op{kind: opDrop, pk: pkey{"g", 0}, n: math.MaxInt64, done: func(err error) { results <- fmt.Sprint("drop ", err) }},
		&op{kind: opAppendAt, recs: []*tributary.Record{at("g", 0, 40, 2)}, done: func(err error) { results <- fmt.Sprint("at ", err) }},
		&op{kind: opRelease, pk: pkey{"g", 0}, n: 40, done: func(err error) { results <- fmt.Sprint("release ", err) }},
	)
	w.mu.Unlock()
	w.signal()
	for i := 0; i < 4; i++ {
		if r := <-results; !strings.HasSuffix(r, " <nil>") {
			t.Fatal(r)
		}
	}
	if st := w.Stats(); st.Commits != 2 {
		// The release, committed after the group, finds nothing to do.
		t.Fatalf("%d commits, want the three other ops in one", st.Commits)
	}
	ps, ok := w.Partition("g", 0)
	if !ok || ps.Released != 40 || ps.Next != 41 || ps.Epoch != 2 {
		t.Fatalf("state %+v", ps)
	}
	if got := readOffsets(t, w, "g", 0, 0, 0, 0); fmt.Sprint(got) != "[40]" {
		t.Fatalf("read %v", got)
	}
	checkBytes(t, w, "end")
}

// TestMetaWithoutEpoch: a WAL written before epochs were stored (24-byte
// meta entries) opens with epoch 0 and is rewritten in the new form.
func TestMetaWithoutEpoch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w := openTest(t, Options{Path: path, NoSync: true})
	appendN(t, w, "o", 2, 3, 1000)
	w.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(metaBucket)
		k := encodePKey(pkey{"o", 2})
		return m.Put(k, append([]byte(nil), m.Get(k)[:metaLenV0]...))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	w = openTest(t, Options{Path: path, NoSync: true})
	checkPartition(t, w, "old meta", "o", 2, 0, 3)
	r := rec("o", 2, "vvvv")
	r.Epoch, r.Timestamp = 7, 1003
	if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil || r.Offset != 3 {
		t.Fatalf("append: %d, %v", r.Offset, err)
	}
	if ps, _ := w.Partition("o", 2); ps.Epoch != 7 {
		t.Fatalf("epoch %d after append at epoch 7", ps.Epoch)
	}
}

// FuzzDecodeMeta: a partition's meta entry decodes only at its two sizes,
// never panics, and a decoded entry re-encodes to the same 32 bytes.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta(&partState{next: 10, released: 3, bytes: 700, epoch: 2}))
	f.Add(encodeMeta(&partState{})[:metaLenV0])
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, ok := decodeMeta(b)
		if ok != (len(b) == metaLen || len(b) == metaLenV0) {
			t.Fatalf("%d bytes decoded: %v", len(b), ok)
		}
		if !ok {
			return
		}
		want := append(append([]byte(nil), b...), make([]byte, metaLen-len(b))...)
		if got := encodeMeta(&st); string(got) != string(want) {
			t.Fatalf("re-encoded %x, want %x", got, want)
		}
	})
}

// TestDropPartitionBelow: the drop happens only while every record of the
// partition is older than the given epoch.
func TestDropPartitionBelow(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	ctx := context.Background()
	if wr := w.Apply(ctx, Op{Kind: OpAppendAt, Records: ats("e", 0, 0, 3, 1)}); wr.Err != nil {
		t.Fatal(wr.Err)
	}
	if wr := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: "e", Partition: 0, Epoch: 1}); wr.Err != nil || !wr.Kept || wr.Dropped != 0 {
		t.Fatalf("epoch 1 below 1: dropped %d kept %v %v", wr.Dropped, wr.Kept, wr.Err)
	}
	if ps, ok := w.Partition("e", 0); !ok || ps.Next != 3 {
		t.Fatalf("kept partition: %+v %v", ps, ok)
	}
	if wr := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: "e", Partition: 0, Epoch: 2}); wr.Err != nil || wr.Kept || wr.Dropped != 3 {
		t.Fatalf("epoch 1 below 2: dropped %d kept %v %v", wr.Dropped, wr.Kept, wr.Err)
	}
	if wr := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: "e", Partition: 0, Epoch: 2}); wr.Err != nil || wr.Kept || wr.Dropped != 0 {
		t.Fatalf("unknown: dropped %d kept %v %v", wr.Dropped, wr.Kept, wr.Err)
	}
	checkBytes(t, w, "end")
}

// TestReleaseAfterAppendGroup: a release queued with appends is committed
// in a transaction of its own right after theirs, and releases exactly
// what it would have released in its place in the queue: the records
// appended before it in the same group, none appended after it.
func TestReleaseAfterAppendGroup(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	appendN(t, w, "r", 0, 5, 1000)
	appendN(t, w, "r", 1, 5, 1000)
	before := w.Stats().Commits
	var order []string
	var mu sync.Mutex
	results := make(chan error, 6)
	done := func(name string) func(error) {
		return func(err error) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			results <- err
		}
	}
	w.mu.Lock()
	w.queue = append(w.queue,
		// Partition 0: two appends, then a release beyond next: it
		// releases the five committed records and the two appended.
		&op{kind: opAppend, recs: []*tributary.Record{rec("r", 0, "a"), rec("r", 0, "b")}, done: done("append0")},
		&op{kind: opRelease, pk: pkey{"r", 0}, n: 100, done: done("release0")},
		// Partition 1: a release beyond next, then an append: it stays in
		// the group and releases the five committed records, not the one
		// appended after it.
		&op{kind: opRelease, pk: pkey{"r", 1}, n: 100, done: done("release1")},
		&op{kind: opAppend, recs: []*tributary.Record{rec("r", 1, "c")}, done: done("append1")},
		// A release of a partition created in this group, after its
		// creation: it sees the record.
		&op{kind: opAppend, recs: []*tributary.Record{rec("r", 2, "d")}, done: done("append2")},
		&op{kind: opRelease, pk: pkey{"r", 2}, n: 1, done: done("release2")},
	)
	w.mu.Unlock()
	w.signal()
	for range 6 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := w.Stats().Commits - before; got != 2 {
		t.Fatalf("%d commits, want 2 (appends, then releases)", got)
	}
	mu.Lock()
	if fmt.Sprint(order) != "[append0 release1 append1 append2 release0 release2]" {
		t.Fatalf("completion order %v: releases must follow the appends' commit", order)
	}
	mu.Unlock()
	for _, c := range []struct {
		part           int32
		released, next int64
	}{{0, 7, 7}, {1, 5, 6}, {2, 1, 1}} {
		ps, ok := w.Partition("r", c.part)
		if !ok || ps.Released != c.released || ps.Next != c.next {
			t.Fatalf("partition %d: %+v, want released %d next %d", c.part, ps, c.released, c.next)
		}
	}
	if got := readOffsets(t, w, "r", 1, 0, 0, 0); fmt.Sprint(got) != "[5]" {
		t.Fatalf("partition 1 reads %v", got)
	}
	checkBytes(t, w, "end")
}
