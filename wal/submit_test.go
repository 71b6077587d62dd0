package wal

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
)

// TestSubmitKinds: every write goes through Submit/Apply, with each
// kind's outcome in the Result; malformed ops are refused at once.
func TestSubmitKinds(t *testing.T) {
	w := openTest(t, Options{Path: filepath.Join(t.TempDir(), "wal.db"), NoSync: true})
	ctx := context.Background()
	recs := []*tributary.Record{rec("s", 0, "a"), rec("s", 0, "b"), rec("s", 0, "c")}
	if r := w.Apply(ctx, Op{Kind: OpAppend, Records: recs}); r.Err != nil || recs[2].Offset != 2 {
		t.Fatalf("append: %+v, offset %d", r, recs[2].Offset)
	}
	at := []*tributary.Record{rec("s", 0, "b"), rec("s", 0, "c"), rec("s", 0, "d")}
	at[0].Offset, at[1].Offset, at[2].Offset = 1, 2, 3
	if r := w.Apply(ctx, Op{Kind: OpAppendAt, Records: at}); r.Err != nil || r.Skipped != 2 {
		t.Fatalf("append at: %+v, want 2 skipped", r)
	}
	b, _ := testBatch("s", 0, 3, -1, 0, 4, 1000)
	if r := w.Apply(ctx, Op{Kind: OpAppend, Batch: b}); r.Err != nil || b.Offset != 4 {
		t.Fatalf("batch: %+v at %d", r, b.Offset)
	}
	if r := w.Apply(ctx, Op{Kind: OpRelease, Stream: "s", Offset: 2}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if ps, _ := w.Partition("s", 0); ps.Released != 2 || ps.Next != 7 {
		t.Fatalf("after release: %+v", ps)
	}
	if r := w.Apply(ctx, Op{Kind: OpEnsure, Stream: "e", Offset: 10}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if ps, _ := w.Partition("e", 0); ps.Next != 10 {
		t.Fatalf("ensure: %+v", ps)
	}
	cs, err := w.ReadChunks("s", 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := w.Apply(ctx, Op{Kind: OpVerbatim, Verbatim: &Verbatim{Stream: "v", Epoch: 7, Chunks: cs}})
	if r.Err != nil || r.Verbatim.Next != 7 {
		t.Fatalf("verbatim: %+v", r)
	}
	if r := w.Apply(ctx, Op{Kind: OpDrop, Stream: "v", Epoch: 1}); r.Err != nil || !r.Kept {
		t.Fatalf("drop below an epoch the partition holds: %+v", r)
	}
	if r := w.Apply(ctx, Op{Kind: OpDrop, Stream: "v", Epoch: math.MaxInt64}); r.Err != nil || r.Dropped != 7 {
		t.Fatalf("drop: %+v, want 7 dropped (the chunks start at 0)", r)
	}
	if r := w.Apply(ctx, Op{Kind: OpSeal, Stream: "v", Epoch: 9}); r.Err != nil || r.Kept {
		t.Fatalf("seal: %+v", r)
	}
	if ps, ok := w.Partition("v", 0); ok || ps.Floor != 9 {
		t.Fatalf("sealed, dropped partition: %+v, %v", ps, ok)
	}
	if r := w.Apply(ctx, Op{Kind: OpAppend, Records: []*tributary.Record{rec("v", 0, "x")}}); !errors.Is(r.Err, ErrFenced) {
		t.Fatalf("append below the seal: %v", r.Err)
	}
	for _, bad := range []Op{{}, {Kind: 99}, {Kind: OpVerbatim}, {Kind: OpReadmit}, {Kind: OpEnsure, Stream: "s", Offset: -1},
		{Kind: OpAppend, Records: recs, Batch: b}, {Kind: OpAppend, Records: []*tributary.Record{nil}}} {
		if r := w.Apply(ctx, bad); !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("%+v: %v, want ErrInvalid", bad, r.Err)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if r := w.Apply(canceled, Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "late")}}); !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("canceled: %v", r.Err)
	}
	if st := w.Stats(); st.Incarnation < 1 || st.Broken != nil {
		t.Fatalf("stats: incarnation %d, broken %v", st.Incarnation, st.Broken)
	}
}

// countingLayer counts the journal's writes and syncs and can fail the
// next write.
type countingLayer struct {
	mu            sync.Mutex
	writes, syncs int
	fail          bool
	sizes         []int
	// hold, when set, blocks the second Sync until closed; held is
	// closed when that Sync is reached.
	hold, held chan struct{}
}

type countingFile struct {
	l *countingLayer
	journalFile
}

func (l *countingLayer) OpenSegment(name string) (journalFile, error) {
	f, err := osLayer{}.OpenSegment(name)
	if err != nil {
		return nil, err
	}
	return &countingFile{l, f}, nil
}

func (*countingLayer) SyncDir(string) error { return nil }

func (f *countingFile) Write(p []byte) (int, error) {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	if f.l.fail {
		f.l.fail = false
		return 0, errors.New("injected write failure")
	}
	f.l.writes++
	f.l.sizes = append(f.l.sizes, len(p))
	return f.journalFile.Write(p)
}

func (f *countingFile) Sync() error {
	f.l.mu.Lock()
	f.l.syncs++
	held := f.l.hold != nil && f.l.syncs == 2
	f.l.mu.Unlock()
	if held {
		close(f.l.held)
		<-f.l.hold
	}
	return nil
}

// TestGroupCommitSeam: the group commit's write and sync, seen through
// the journal's file layer with bbolt out of the way (the applier held):
// concurrent appends share one write and one sync per group; a group's
// refused op (the budget) leaves the others in the group's one record;
// a failed write fails the whole group and breaks the WAL.
func TestGroupCommitSeam(t *testing.T) {
	l := &countingLayer{hold: make(chan struct{}), held: make(chan struct{})}
	w, err := Open(Options{Path: filepath.Join(t.TempDir(), "wal.db"), fs: l, testPause: true, MaxBytes: 200 * recSize})
	if err != nil {
		t.Fatal(err)
	}
	defer w.crash()
	release := sync.OnceFunc(func() { close(l.hold) })
	defer release()
	// One append alone gives the size of a one-record group's write.
	if r := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv")}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]Result, 100)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", int32(i%4), "vvvv")}})
		}()
	}
	close(start)
	// The first group's sync is held until it holds two appends or two
	// more are queued behind it, so at least two of the 100 share a group
	// however the scheduler runs the writers (on an instant file layer a
	// busy machine can otherwise hand the committer one append at a time).
	<-l.held
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		queued := len(w.queue)
		w.mu.Unlock()
		l.mu.Lock()
		first := l.sizes[1] > l.sizes[0]
		l.mu.Unlock()
		if queued >= 2 || first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d appends queued behind a held sync after a minute", queued)
		}
	}
	release()
	wg.Wait()
	for _, r := range results {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	l.mu.Lock()
	writes, syncs := l.writes, l.syncs
	l.mu.Unlock()
	if writes != syncs || writes-1 >= 100 {
		t.Fatalf("100 concurrent appends after one: %d journal writes and %d syncs, want one of each per group, fewer than 101", writes, syncs)
	}
	if st := w.Stats(); int(st.Commits) != writes {
		t.Fatalf("%d commits, %d journal writes", st.Commits, writes)
	}

	// A refused op in a group: the others are journaled, it is not.
	big := make([]*tributary.Record, 150)
	for i := range big {
		big[i] = rec("s", 0, "vvvv")
	}
	var small, refused Result
	wg.Add(2)
	w.Submit(Op{Kind: OpAppend, Records: big, Done: func(r Result) { refused = r; wg.Done() }})
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 1, "vvvv")}, Done: func(r Result) { small = r; wg.Done() }})
	wg.Wait()
	if !errors.Is(refused.Err, ErrBudgetExceeded) || small.Err != nil {
		t.Fatalf("over budget: %v; small: %v", refused.Err, small.Err)
	}
	l.mu.Lock()
	last := l.sizes[len(l.sizes)-1]
	l.mu.Unlock()
	if last > 10*int(recSize)+200 {
		t.Fatalf("the group's journal record is %d bytes: the refused op's records are in it", last)
	}

	// A failed write fails its group and every later write.
	l.mu.Lock()
	l.fail = true
	l.mu.Unlock()
	if r := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 2, "x")}}); r.Err == nil {
		t.Fatal("a group whose journal write failed was acknowledged")
	}
	if r := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 2, "y")}}); !errors.Is(r.Err, ErrBroken) {
		t.Fatalf("after a failed journal write: %v, want ErrBroken", r.Err)
	}
}
