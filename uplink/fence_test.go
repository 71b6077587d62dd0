package uplink

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary-io/tributary/uplink/quarantine"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// appendVals appends values to (stream, partition) at epoch and returns them.
func appendVals(t *testing.T, w *wal.WAL, stream string, p int32, epoch int64, prefix string, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for i := range n {
		v := []byte(fmt.Sprintf("%s-%d", prefix, i))
		if err := w.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: stream, Partition: p, Epoch: epoch, Value: v, Topic: "t", Source: "mqtt"}}}).Err; err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

type fencedCalls struct {
	mu    sync.Mutex
	calls []string
}

// listenerFuncs is a FenceListener and ReleaseListener made of optional functions.
type listenerFuncs struct {
	fenced    func(stream string, p int32)
	releasing func(stream string, p int32, recs []*tributary.Record) error
}

func (l listenerFuncs) Fenced(stream string, p int32) {
	if l.fenced != nil {
		l.fenced(stream, p)
	}
}

func (l listenerFuncs) Releasing(stream string, p int32, recs []*tributary.Record) error {
	if l.releasing != nil {
		return l.releasing(stream, p, recs)
	}
	return nil
}

func watch(u *Uplink, l listenerFuncs) *Uplink {
	u.OnFence(l)
	u.OnRelease(l)
	return u
}

func (f *fencedCalls) add(stream string, p int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s/%d", stream, p))
}

func (f *fencedCalls) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// TestFencedPartition: after another node took partition p over, the
// uplink commits nothing more to p, drops p's records above the mark from
// the WAL, counts and reports it, and still commits the stream's other
// partitions in the same pass.
func TestFencedPartition(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	q, _ := e.cat.AllocatePartition(ctx, stream, "n3")
	var fenced fencedCalls
	qdir := t.TempDir()
	u := watch(New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: qdir}, e.wal, e.cat, e.bucket), listenerFuncs{fenced: fenced.add})
	want := map[int32][][]byte{p: appendVals(t, e.wal, stream, p, 0, "first", 5)}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	appendVals(t, e.wal, stream, p, 0, "lost", 7)
	want[q] = appendVals(t, e.wal, stream, q, 0, "other", 4)
	if e, err := e.cat.TakeOver(ctx, stream, p, "n1", "n2"); err != nil || e != 1 {
		t.Fatalf("take over: %d, %v", e, err)
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fenced.get(); !slices.Equal(got, []string{fmt.Sprintf("%s/%d", stream, p)}) {
		t.Fatalf("OnFenced calls %v", got)
	}
	if _, ok := e.wal.Partition(stream, p); ok {
		t.Fatal("fenced partition still in the WAL")
	}
	if st := u.Stats(); st.Fenced != 1 || st.FencedRecords != 7 || st.QuarantinedRecords != 7 {
		t.Fatalf("stats %+v", st)
	}
	// Dropped from the WAL, not lost: every record is in the quarantine.
	files, _ := filepath.Glob(filepath.Join(qdir, "*"+quarantine.FileSuffix))
	if len(files) != 1 {
		t.Fatalf("quarantine files %v", files)
	}
	q7, err := quarantine.Read(files[0])
	if err != nil || len(q7) != 7 {
		t.Fatalf("quarantine: %d records, %v", len(q7), err)
	}
	for i, r := range q7 {
		if string(r.Value) != fmt.Sprintf("lost-%d", i) || r.Offset != int64(5+i) || r.Stream != stream || r.Partition != p {
			t.Fatalf("quarantined record %d: %+v", i, r)
		}
	}
	checkTable(t, e.cat, stream, want)
	if n := unreleased(e.wal); n != 0 {
		t.Fatalf("%d records left", n)
	}
}

// TestFencedDropsCovered: a fenced node whose records up to some offset
// are in the table (committed by it before the take-over, reply lost)
// drops them all without releasing (the mark cannot tell its records from
// the new owner's), and commits nothing.
func TestFencedDropsCovered(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	var released []int64
	u := watch(New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir()}, e.wal, e.cat, e.bucket), listenerFuncs{releasing: func(_ string, _ int32, recs []*tributary.Record) error {
		for _, r := range recs {
			released = append(released, r.Offset)
		}
		return nil
	}})
	vals := appendVals(t, e.wal, stream, p, 0, "v", 10)
	recs, _ := e.wal.Read(stream, p, 0, 6, 0)
	files, err := u.upload(ctx, stream, recs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.CommitAppend(ctx, stream, []tables.PartitionAppend{{Partition: p, From: 0, To: 6, Files: files}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.TakeOver(ctx, stream, p, "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(released) != 0 {
		t.Fatalf("released %v", released)
	}
	if st := u.Stats(); st.Fenced != 1 || st.FencedRecords != 10 {
		t.Fatalf("stats %+v", st)
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{p: vals[:6]})
}

// TestEpochCut: records of two epochs in one WAL partition go into
// separate appends, each with its own epoch, in one pass.
func TestEpochCut(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	rc := &recordingCommitter{Committer: e.cat}
	u := New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir()}, e.wal, rc, e.bucket)
	want := appendVals(t, e.wal, stream, p, 0, "old", 3)
	want = append(want, appendVals(t, e.wal, stream, p, 2, "new", 4)...)
	want = append(want, appendVals(t, e.wal, stream, p, 3, "newer", 1)...)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(rc.appends()); got != "[[0,3)@0 [3,7)@2 [7,8)@3]" {
		t.Fatalf("appends %s", got)
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{p: want})
}

type recordingCommitter struct {
	Committer
	mu  sync.Mutex
	got []string
}

func (c *recordingCommitter) CommitAppend(ctx context.Context, stream string, a []tables.PartitionAppend, s map[string]string) (tables.CommitResult, error) {
	c.mu.Lock()
	for _, pa := range a {
		c.got = append(c.got, fmt.Sprintf("[%d,%d)@%d", pa.From, pa.To, pa.Epoch))
	}
	c.mu.Unlock()
	return c.Committer.CommitAppend(ctx, stream, a, s)
}

func (c *recordingCommitter) appends() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// TestFenceUnderFaults: a node appends continuously while its store and
// catalog fail (before and after applying commits); another node takes
// the partition over mid-way. Whatever the timing: the table holds every
// offset below its mark exactly once, each the value appended at that
// offset; the old owner stops on OnFenced and none of its later records
// reaches the table; its WAL ends with nothing of the partition left.
func TestFenceUnderFaults(t *testing.T) {
	e := newEnv(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	fb, fc, cat := e.faulty()
	fb.Writes.FailRandomly(testkit.Rand(t, 5, 6), 0.2, 0)
	fb.Writes.DelayRandomly(testkit.Rand(t, 5, 7), 0.2, 20*time.Millisecond)
	fc.Commits.FailRandomly(testkit.Rand(t, 7, 8), 0.2, 0.2)
	fc.Loads.FailRandomly(testkit.Rand(t, 7, 9), 0.1, 0)
	var stopped atomic.Bool
	u := watch(New(Config{Interval: 20 * time.Millisecond, MaxBatchBytes: 4 << 10, MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir()}, e.wal, cat, fb),
		listenerFuncs{fenced: func(string, int32) { stopped.Store(true) }})
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.Run(ctx)
	}()

	var mu sync.Mutex
	vals := map[int64][]byte{}
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		for i := 0; !stopped.Load(); i++ {
			v := []byte(fmt.Sprintf("v-%d", i))
			r := &tributary.Record{Stream: stream, Partition: p, Value: v, Topic: "t", Source: "mqtt"}
			if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			vals[r.Offset] = v
			mu.Unlock()
			time.Sleep(time.Millisecond) // a steady trickle, not a flood
		}
	}()
	testkit.Eventually(t, 30*time.Second, "some commits under faults", func() bool {
		_, _, lost := fc.Commits.Counts()
		return u.Stats().RecordsCommitted > 200 && lost > 0
	})

	if _, err := e.cat.TakeOver(ctx, stream, p, "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the fence", func() bool { return u.Stats().Fenced > 0 })
	<-appended
	fb.Writes.Heal()
	fc.Commits.Heal()
	fc.Loads.Heal()
	testkit.Eventually(t, 30*time.Second, "nothing of the fenced partition left in the WAL", func() bool {
		st, ok := e.wal.Partition(stream, p)
		return !ok || st.Next == st.Released
	})

	cancel()
	<-done

	tb, err := e.cat.LoadTable(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	mark := tables.HighWater(tb, p)
	want := map[int32][][]byte{p: nil}
	mu.Lock()
	for off := int64(0); off < mark; off++ {
		want[p] = append(want[p], vals[off])
	}
	mu.Unlock()
	checkTable(t, e.cat, stream, want)
	st := u.Stats()
	_, uploads, _ := fb.Writes.Counts()
	_, before, after := fc.Commits.Counts()
	t.Logf("mark %d of %d appended; fenced %d partition(s), %d records dropped; faults: %d uploads, %d+%d commits",
		mark, len(vals), st.Fenced, st.FencedRecords, uploads, before, after)
	if mark == 0 || st.Fenced == 0 {
		t.Fatalf("mark %d, stats %+v", mark, st)
	}
}

// TestFencedBehindMark: a node returns after another took its partition
// over and committed past the node's WAL: the node's records at offsets
// the mark covers are the new owner's in the table; they are dropped as
// fenced, not released as "already committed".
func TestFencedBehindMark(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	appendVals(t, e.wal, stream, p, 0, "mine", 5)
	if _, err := e.cat.TakeOver(ctx, stream, p, "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	// n2 commits offsets 0-7 at epoch 1.
	var theirs [][]byte
	for i := range 8 {
		theirs = append(theirs, []byte(fmt.Sprintf("theirs-%d", i)))
	}
	u2 := New(Config{Node: "n2", Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	var recs []*tributary.Record
	for i, v := range theirs {
		recs = append(recs, &tributary.Record{Stream: stream, Partition: p, Offset: int64(i), Epoch: 1, Timestamp: time.Now().UnixMicro(), Value: v, Topic: "t", Source: "mqtt"})
	}
	files, err := u2.upload(ctx, stream, recs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.CommitAppend(ctx, stream, []tables.PartitionAppend{{Partition: p, From: 0, To: 8, Epoch: 1, Files: files}}, nil); err != nil {
		t.Fatal(err)
	}
	var fenced fencedCalls
	u := watch(New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir()}, e.wal, e.cat, e.bucket), listenerFuncs{fenced: fenced.add})
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if st := u.Stats(); st.Fenced != 1 || st.FencedRecords != 5 || len(fenced.get()) != 1 {
		t.Fatalf("stats %+v, OnFenced %v", st, fenced.get())
	}
	if _, ok := e.wal.Partition(stream, p); ok {
		t.Fatal("fenced partition still in the WAL")
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{p: theirs})
}

// takeBackCommitter runs takeBack once, between the uplink's read of a
// batch and its commit.
type takeBackCommitter struct {
	Committer
	once     sync.Once
	takeBack func()
}

func (c *takeBackCommitter) CommitAppend(ctx context.Context, stream string, a []tables.PartitionAppend, s map[string]string) (tables.CommitResult, error) {
	c.once.Do(c.takeBack)
	return c.Committer.CommitAppend(ctx, stream, a, s)
}

// TestFencedBatchOfRetakenPartition: while the uplink uploads a batch of
// partition p at epoch 0, p is taken over by n2 and back by this node
// (epoch 2), which drops its stale records and copies n2's (AppendAt, epoch
// 2). The stale batch is fenced, but the partition is kept: the copied
// records are committed on the next pass.
func TestFencedBatchOfRetakenPartition(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	appendVals(t, e.wal, stream, p, 0, "stale", 5)
	copied := [][]byte{[]byte("n2-0"), []byte("n2-1")}
	tc := &takeBackCommitter{Committer: e.cat, takeBack: func() {
		if _, err := e.cat.TakeOver(ctx, stream, p, "n1", "n2"); err != nil {
			t.Error(err)
		}
		if wr := e.wal.Apply(context.Background(), wal.Op{Kind: wal.OpDrop, Stream: stream, Partition: p, Epoch: math.MaxInt64}); wr.Err != nil {
			t.Error(wr.Err)
		}
		if _, err := e.cat.TakeOver(ctx, stream, p, "n2", "n1"); err != nil {
			t.Error(err)
		}
		var recs []*tributary.Record
		for i, v := range copied {
			recs = append(recs, &tributary.Record{Stream: stream, Partition: p, Offset: int64(i), Epoch: 2, Value: v, Topic: "t", Source: "mqtt"})
		}
		if wr := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppendAt, Records: recs}); wr.Err != nil {
			t.Error(wr.Err)
		}
	}}
	var fenced fencedCalls
	u := watch(New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir()}, e.wal, tc, e.bucket), listenerFuncs{fenced: fenced.add})
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if st := u.Stats(); st.Fenced != 0 || len(fenced.get()) != 0 {
		t.Fatalf("stats %+v, OnFenced %v", st, fenced.get())
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{p: copied})
}
