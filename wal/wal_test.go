package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
)

func openTest(t *testing.T, opts Options) *WAL {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "wal", "wal.db")
	}
	w, err := Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// rec is a test record whose encoded size is the same at any offset < 64.
func rec(stream string, part int32, value string) *tributary.Record {
	return &tributary.Record{Stream: stream, Partition: part, Timestamp: 1000, Topic: "t", Value: []byte(value), Source: "mqtt"}
}

var recSize = int64(len(EncodeRecord(nil, rec("s", 0, "vvvv"))))

// step is one action of a scripted scenario against a WAL.
type step struct {
	do     string // append, release, ensure, read, reopen, state
	stream string
	part   int32
	n      int64 // append: record count; release: upTo; ensure: minNext; read: from
	max    int   // read: maxRecords

	wantOffsets []int64 // append: offsets assigned; read: offsets returned
	wantErr     error
	wantState   [2]int64 // state: Released, Next
	wantRecords int64    // state: Stats().Records
}

func TestScript(t *testing.T) {
	scenarios := []struct {
		name    string
		maxRecs int64 // budget in records of recSize; 0 = unlimited
		steps   []step
	}{
		{name: "dense offsets per partition, continuing after reopen", steps: []step{
			{do: "append", stream: "a", part: 0, n: 3, wantOffsets: []int64{0, 1, 2}},
			{do: "append", stream: "a", part: 1, n: 2, wantOffsets: []int64{0, 1}},
			{do: "append", stream: "b", part: 0, n: 1, wantOffsets: []int64{0}},
			{do: "append", stream: "a", part: 0, n: 2, wantOffsets: []int64{3, 4}},
			{do: "reopen"},
			{do: "state", stream: "a", part: 0, wantState: [2]int64{0, 5}, wantRecords: 8},
			{do: "append", stream: "a", part: 0, n: 1, wantOffsets: []int64{5}},
			{do: "append", stream: "a", part: 1, n: 1, wantOffsets: []int64{2}},
			{do: "read", stream: "a", part: 0, n: 0, wantOffsets: []int64{0, 1, 2, 3, 4, 5}},
			{do: "read", stream: "a", part: 0, n: 4, max: 1, wantOffsets: []int64{4}},
			{do: "read", stream: "a", part: 0, n: 6, wantOffsets: nil},
			{do: "read", stream: "nope", part: 0, n: 0, wantOffsets: nil},
		}},
		{name: "release is idempotent and reads start at the released point", steps: []step{
			{do: "append", stream: "a", part: 0, n: 5, wantOffsets: []int64{0, 1, 2, 3, 4}},
			{do: "release", stream: "a", part: 0, n: 2},
			{do: "release", stream: "a", part: 0, n: 2},
			{do: "release", stream: "a", part: 0, n: 1},
			{do: "state", stream: "a", part: 0, wantState: [2]int64{2, 5}, wantRecords: 3},
			{do: "read", stream: "a", part: 0, n: 0, wantOffsets: []int64{2, 3, 4}},
			{do: "reopen"},
			{do: "state", stream: "a", part: 0, wantState: [2]int64{2, 5}, wantRecords: 3},
			{do: "release", stream: "a", part: 0, n: 99}, // clamped to next
			{do: "state", stream: "a", part: 0, wantState: [2]int64{5, 5}, wantRecords: 0},
			{do: "read", stream: "a", part: 0, n: 0, wantOffsets: nil},
			{do: "append", stream: "a", part: 0, n: 1, wantOffsets: []int64{5}},
			{do: "release", stream: "unknown", part: 9, n: 3},
		}},
		{name: "ensure partition", steps: []step{
			{do: "ensure", stream: "a", part: 0, n: 10},
			{do: "state", stream: "a", part: 0, wantState: [2]int64{10, 10}},
			{do: "append", stream: "a", part: 0, n: 2, wantOffsets: []int64{10, 11}},
			{do: "ensure", stream: "a", part: 0, n: 5}, // behind: no-op
			{do: "state", stream: "a", part: 0, wantState: [2]int64{10, 12}, wantRecords: 2},
			{do: "ensure", stream: "a", part: 0, n: 20}, // ahead: records below are released
			{do: "state", stream: "a", part: 0, wantState: [2]int64{20, 20}, wantRecords: 0},
			{do: "reopen"},
			{do: "append", stream: "a", part: 0, n: 1, wantOffsets: []int64{20}},
			{do: "ensure", stream: "new", part: 2, n: 0},
			{do: "state", stream: "new", part: 2, wantState: [2]int64{0, 0}, wantRecords: 1},
			{do: "ensure", stream: "a", part: 0, n: -1, wantErr: ErrInvalid},
		}},
		{name: "budget refuses whole appends until released", maxRecs: 4, steps: []step{
			{do: "append", stream: "a", part: 0, n: 3, wantOffsets: []int64{0, 1, 2}},
			{do: "append", stream: "a", part: 0, n: 2, wantErr: ErrBudgetExceeded},
			{do: "state", stream: "a", part: 0, wantState: [2]int64{0, 3}, wantRecords: 3},
			{do: "append", stream: "b", part: 0, n: 1, wantOffsets: []int64{0}},
			{do: "append", stream: "b", part: 0, n: 1, wantErr: ErrBudgetExceeded},
			{do: "state", stream: "b", part: 0, wantState: [2]int64{0, 1}, wantRecords: 4},
			{do: "reopen"},
			{do: "append", stream: "a", part: 0, n: 1, wantErr: ErrBudgetExceeded},
			{do: "release", stream: "a", part: 0, n: 2},
			{do: "append", stream: "a", part: 0, n: 3, wantErr: ErrBudgetExceeded},
			{do: "append", stream: "a", part: 0, n: 2, wantOffsets: []int64{3, 4}},
			{do: "read", stream: "a", part: 0, n: 0, wantOffsets: []int64{2, 3, 4}},
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			opts := Options{Path: filepath.Join(t.TempDir(), "wal.db"), MaxBytes: sc.maxRecs * recSize, NoSync: true}
			w := openTest(t, opts)
			ctx := context.Background()
			for i, s := range sc.steps {
				where := fmt.Sprintf("step %d (%s %s/%d %d)", i, s.do, s.stream, s.part, s.n)
				var err error
				switch s.do {
				case "append":
					var recs []*tributary.Record
					for j := int64(0); j < s.n; j++ {
						recs = append(recs, rec(s.stream, s.part, "vvvv"))
					}
					err = w.Apply(ctx, Op{Kind: OpAppend, Records: recs}).Err
					if err == nil {
						var got []int64
						for _, r := range recs {
							got = append(got, r.Offset)
						}
						assertOffsets(t, where, got, s.wantOffsets)
					}
				case "release":
					err = w.Apply(context.Background(), Op{Kind: OpRelease, Stream: s.stream, Partition: s.part, Offset: s.n}).Err
				case "ensure":
					err = w.Apply(context.Background(), Op{Kind: OpEnsure, Stream: s.stream, Partition: s.part, Offset: s.n}).Err
				case "read":
					var recs []*tributary.Record
					recs, err = w.Read(s.stream, s.part, s.n, s.max, 0)
					var got []int64
					for _, r := range recs {
						got = append(got, r.Offset)
						if r.Stream != s.stream || r.Partition != s.part || string(r.Value) != "vvvv" {
							t.Fatalf("%s: read back %+v", where, r)
						}
					}
					assertOffsets(t, where, got, s.wantOffsets)
				case "reopen":
					if err := w.Close(); err != nil {
						t.Fatalf("%s: close: %v", where, err)
					}
					w = openTest(t, opts)
				case "state":
					ps := findPartition(w, s.stream, s.part)
					if ps == nil || ps.Released != s.wantState[0] || ps.Next != s.wantState[1] {
						t.Fatalf("%s: partition state %+v, want released/next %v", where, ps, s.wantState)
					}
					if ps.Bytes != (ps.Next-ps.Released)*recSize {
						t.Fatalf("%s: partition bytes %d, want %d", where, ps.Bytes, (ps.Next-ps.Released)*recSize)
					}
					if want := int64(0); ps.Next > ps.Released {
						want = 1000
						if ps.OldestTimestamp != want {
							t.Fatalf("%s: oldest timestamp %d, want %d", where, ps.OldestTimestamp, want)
						}
					}
					if st := w.Stats(); st.Records != s.wantRecords || st.Bytes != s.wantRecords*recSize {
						t.Fatalf("%s: stats records %d bytes %d, want %d records", where, st.Records, st.Bytes, s.wantRecords)
					}
				default:
					t.Fatalf("bad step %q", s.do)
				}
				if s.wantErr == nil && err != nil || !errors.Is(err, s.wantErr) {
					t.Fatalf("%s: err %v, want %v", where, err, s.wantErr)
				}
			}
		})
	}
}

func assertOffsets(t *testing.T, where string, got, want []int64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: offsets %v, want %v", where, got, want)
	}
}

func findPartition(w *WAL, stream string, part int32) *PartitionState {
	for _, ps := range w.Partitions() {
		if ps.Stream == stream && ps.Partition == part {
			return &ps
		}
	}
	return nil
}

func TestAppendFieldsRoundTrip(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	want := sampleRecords()[3]
	want.Principal = "CN=gateway-9" // durable like every other field
	in := *want
	in.Offset = 0
	before := time.Now().UnixMicro()
	zeroTS := &tributary.Record{Stream: "k.v", Partition: math32, Value: []byte("x")}
	if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{&in, zeroTS}}).Err; err != nil {
		t.Fatal(err)
	}
	if zeroTS.Timestamp < before || zeroTS.Offset != 1 {
		t.Fatalf("zero timestamp record: %+v", zeroTS)
	}
	got, err := w.Read("k.v", math32, 0, 1, 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("read: %v, %v", got, err)
	}
	want2 := *want
	want2.Offset = 0
	if fmt.Sprintf("%#v", *got[0]) != fmt.Sprintf("%#v", want2) {
		t.Fatalf("read back\n got %#v\nwant %#v", *got[0], want2)
	}
}

const math32 = 2147483647

func TestReadByteLimit(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	for i := 0; i < 10; i++ {
		if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv")}}).Err; err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		maxRecords int
		maxBytes   int64
		want       int
	}{
		{0, 0, 10},
		{3, 0, 3},
		{0, 1, 1}, // always at least one
		{0, recSize * 4, 4},
		{0, recSize*4 - 1, 3},
		{2, recSize * 4, 2},
	}
	for _, tt := range tests {
		got, err := w.Read("s", 0, 0, tt.maxRecords, tt.maxBytes)
		if err != nil || len(got) != tt.want {
			t.Errorf("Read(max %d records, %d bytes) = %d records, %v; want %d", tt.maxRecords, tt.maxBytes, len(got), err, tt.want)
		}
	}
}

func TestGroupCommit(t *testing.T) {
	w := openTest(t, Options{}) // with fsync: that is what makes groups form
	const goroutines, perG = 64, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perG; i++ {
				r := rec("s", int32(g%4), fmt.Sprintf("g%d-%d", g, i))
				if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := w.Stats()
	t.Logf("stats: %+v", st)
	if st.AppendedRecords != goroutines*perG || st.Records != goroutines*perG {
		t.Fatalf("appended %d, records %d; want %d", st.AppendedRecords, st.Records, goroutines*perG)
	}
	if st.Commits >= goroutines*perG/4 || st.Fsyncs != st.Commits {
		t.Fatalf("%d commits (%d fsyncs) for %d appends: not grouped", st.Commits, st.Fsyncs, goroutines*perG)
	}
	for p := int32(0); p < 4; p++ {
		recs, err := w.Read("s", p, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: offset %d at index %d", p, r.Offset, i)
			}
		}
	}
}

func TestBudgetInGroupLeavesOthersAlone(t *testing.T) {
	// Two appends in one group: the one that does not fit is refused, the
	// other commits. The group is formed by queueing both before the
	// committer runs: Submit from inside a blocked done callback.
	w := openTest(t, Options{NoSync: true, MaxBytes: 3 * recSize})
	ctx := context.Background()
	if err := w.Apply(ctx, Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv")}}).Err; err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 3)
	release := make(chan struct{})
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 1, "vvvv")}, Done: func(wr Result) {
		<-release // hold the committer while the next two queue up
		results <- wr.Err
	}})
	big := []*tributary.Record{rec("s", 0, "vvvv"), rec("s", 0, "vvvv"), rec("s", 0, "vvvv")}
	w.Submit(Op{Kind: OpAppend, Records: big, Done: func(wr Result) { results <- wr.Err }})
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 2, "vvvv")}, Done: func(wr Result) { results <- wr.Err }})
	close(release)
	var got []error
	for i := 0; i < 3; i++ {
		got = append(got, <-results)
	}
	if got[0] != nil || !errors.Is(got[1], ErrBudgetExceeded) || got[2] != nil {
		t.Fatalf("results %v; want nil, budget exceeded, nil", got)
	}
	if ps := findPartition(w, "s", 0); ps.Next != 1 {
		t.Fatalf("refused append left partition at next %d", ps.Next)
	}
	if st := w.Stats(); st.Records != 3 || st.BudgetRejections != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCloseWithAppendsInFlight(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	type ack struct {
		part  int32
		off   int64
		value string
	}
	var mu sync.Mutex
	var acks []ack
	var wg sync.WaitGroup
	started := make(chan struct{}, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				r := rec("s", int32(g%3), fmt.Sprintf("g%d-%d", g, i))
				err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err
				if i == 0 {
					started <- struct{}{}
				}
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("append: %v", err)
					}
					return
				}
				mu.Lock()
				acks = append(acks, ack{r.Partition, r.Offset, string(r.Value)})
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 16; i++ {
		<-started
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("appends hang after Close")
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if _, err := w.Read("s", 0, 0, 0, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "s", Partition: 0, Offset: 1}).Err; !errors.Is(err, ErrClosed) {
		t.Fatalf("release after close: %v", err)
	}
	done := make(chan error, 1)
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "x")}, Done: func(wr Result) { done <- wr.Err }})
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("append async after close: %v", err)
	}

	w = openTest(t, Options{Path: path})
	for _, a := range acks {
		got, err := w.Read("s", a.part, a.off, 1, 0)
		if err != nil || len(got) != 1 || got[0].Offset != a.off || string(got[0].Value) != a.value {
			t.Fatalf("acked %+v: read %v, %v", a, got, err)
		}
	}
	t.Logf("%d acknowledged appends survived close", len(acks))
}

func TestAppendCanceledContext(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Apply(ctx, Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "v")}}).Err; !errors.Is(err, context.Canceled) {
		t.Fatalf("append: %v", err)
	}
	if ps := w.Partitions(); len(ps) != 0 {
		t.Fatalf("canceled append wrote %+v", ps)
	}
}

func TestAppendInvalid(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	for _, recs := range [][]*tributary.Record{{nil}, {{Stream: ""}}, {rec("s", 0, "v"), {Stream: string(make([]byte, 2000))}}} {
		if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: recs}).Err; !errors.Is(err, ErrInvalid) {
			t.Fatalf("append %v: %v", recs, err)
		}
	}
	if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{}}).Err; err != nil {
		t.Fatalf("empty append: %v", err)
	}
	if len(w.Partitions()) != 0 || w.Stats().Commits != 0 {
		t.Fatalf("invalid appends wrote something: %+v", w.Stats())
	}
}

func TestNotify(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	select {
	case <-w.Notify():
		t.Fatal("notified before any append")
	default:
	}
	if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "v")}}).Err; err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Notify():
	default:
		t.Fatal("no notification after a commit")
	}
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "s", Partition: 0, Offset: 1}).Err; err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Notify():
		t.Fatal("notified after a release")
	default:
	}
}

func TestAppendAsyncOrder(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	const n = 500
	var mu sync.Mutex
	var order []int64
	var wg sync.WaitGroup
	recs := make([]*tributary.Record, n)
	for i := range recs {
		recs[i] = rec("s", 0, fmt.Sprint(i))
		wg.Add(1)
		w.Submit(Op{Kind: OpAppend, Records: recs[i : i+1], Done: func(wr Result) {
			defer wg.Done()
			if wr.Err != nil {
				t.Error(wr.Err)
			}
			mu.Lock()
			order = append(order, recs[i].Offset)
			mu.Unlock()
		}})
	}
	wg.Wait()
	for i, r := range recs {
		if r.Offset != int64(i) || order[i] != int64(i) {
			t.Fatalf("record %d got offset %d, completion %d", i, r.Offset, order[i])
		}
	}
}

// TestFileSizing: the map is sized from the budget; a new file is
// pre-sized with a hole (apparent size, no disk blocks), reopens with its
// records, and an existing larger file is left as it is.
func TestFileSizing(t *testing.T) {
	for _, c := range []struct {
		budget int64
		want   int
	}{{0, maxMmapSize}, {1 << 20, minMmapSize}, {1 << 30, 2 << 30}, {1 << 40, maxMmapSize}} {
		if got := mmapSize(c.budget); got != c.want {
			t.Errorf("mmapSize(%d) = %d, want %d", c.budget, got, c.want)
		}
	}
	path := filepath.Join(t.TempDir(), "wal.db")
	w := openTest(t, Options{Path: path})
	if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "v")}}).Err; err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < presize {
		t.Fatalf("file of %d bytes, want at least %d", fi.Size(), presize)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 >= presize/2 {
		t.Fatalf("%d bytes of disk blocks for a new WAL: the pre-size is not a hole", st.Blocks*512)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, presize+4096); err != nil { // "an existing larger file"
		t.Fatal(err)
	}
	w = openTest(t, Options{Path: path})
	if got := readOffsets(t, w, "s", 0, 0, 0, 0); fmt.Sprint(got) != "[0]" {
		t.Fatalf("after reopen: %v", got)
	}
	if fi, _ := os.Stat(path); fi.Size() != presize+4096 {
		t.Fatalf("existing file resized to %d", fi.Size())
	}
}
