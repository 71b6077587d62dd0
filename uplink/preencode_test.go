package uplink

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"reflect"
	"runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// keepBucket keeps a copy of every object written.
type keepBucket struct {
	Bucket
	mu   sync.Mutex
	objs map[string][]byte
}

func (b *keepBucket) WriteAll(ctx context.Context, key string, data []byte) error {
	b.mu.Lock()
	if b.objs == nil {
		b.objs = map[string][]byte{}
	}
	b.objs[key] = bytes.Clone(data)
	b.mu.Unlock()
	return b.Bucket.WriteAll(ctx, key, data)
}

// appendMany appends n records of partition p at epoch in groups of 500,
// with values prefix-i (some with a key and headers), and returns them.
func appendMany(t testing.TB, e *env, stream string, p int32, epoch int64, prefix string, n int) [][]byte {
	t.Helper()
	var vals [][]byte
	for lo := 0; lo < n; lo += 500 {
		var recs []*tributary.Record
		for i := lo; i < min(lo+500, n); i++ {
			r := &tributary.Record{Stream: stream, Partition: p, Epoch: epoch, Value: []byte(fmt.Sprintf("%s-%d", prefix, i)),
				Topic: fmt.Sprintf("t/%d", i%5), Source: "mqtt", ClientID: "c"}
			if i%3 == 0 {
				r.Key, r.Headers = []byte{byte(i)}, []tributary.Header{{Key: "h", Value: []byte("x")}}
			}
			recs = append(recs, r)
			vals = append(vals, r.Value)
		}
		if err := e.wal.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: recs}).Err; err != nil {
			t.Fatal(err)
		}
	}
	return vals
}

// preencodeAll runs the pre-encoder's steps until nothing is left to encode.
func preencodeAll(ctx context.Context, u *Uplink) {
	for {
		worked := false
		for _, p := range u.log.Partitions() {
			if p.Next > p.Released && u.pre.step(ctx, p) {
				worked = true
			}
		}
		if !worked {
			return
		}
	}
}

func preCount(u *Uplink, outcome string) int {
	var m dto.Metric
	if err := u.metrics.pre.WithLabelValues(outcome).Write(&m); err != nil {
		panic(err)
	}
	return int(m.GetCounter().GetValue())
}

// TestPreEncodedFileIsTheBurstFile: records pre-encoded as they landed
// (across a row group), then a tail that landed after: the file the pass
// uploads is used from the pre-encoder and has exactly the bytes the
// burst path writes for the same records (WriteParquet), and the table
// reads back every record once.
func TestPreEncodedFileIsTheBurstFile(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	kb := &keepBucket{Bucket: e.bucket}
	u := New(Config{Node: "n1", ContinuousEncoding: true, Logger: quietLogger()}, e.wal, e.cat, kb)
	const stream = "pre.match"
	if _, err := e.cat.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.cat.Marks(ctx, stream); err != nil {
		t.Fatal(err)
	}
	vals := appendMany(t, e, stream, 0, 0, "a", tables.RowGroupRows+3000)
	preencodeAll(ctx, u)
	if n := u.pre.records.Load(); n != int64(len(vals)) {
		t.Fatalf("%d records pre-encoded, want %d", n, len(vals))
	}
	vals = append(vals, appendMany(t, e, stream, 0, 0, "b", 777)...)
	recs, err := e.wal.Read(stream, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if _, err := tables.WriteParquet(&want, recs); err != nil {
		t.Fatal(err)
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if preCount(u, "used") != 1 || preCount(u, "discarded") != 0 {
		t.Fatalf("pre-encoded files used %d, discarded %d; want 1, 0", preCount(u, "used"), preCount(u, "discarded"))
	}
	if len(kb.objs) != 1 {
		t.Fatalf("%d files uploaded, want 1", len(kb.objs))
	}
	for key, got := range kb.objs {
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%s: %d bytes differ from the burst path's %d", key, len(got), want.Len())
		}
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{0: vals})
	if unreleased(e.wal) != 0 || u.pre.records.Load() != 0 {
		t.Fatalf("WAL not released, or %d records still pre-encoded", u.pre.records.Load())
	}
}

// TestPreEncodedDiscarded: an in-progress file that is not provably a
// prefix of the batch is discarded and the batch encoded from scratch —
// the mark moved (another pass committed and released the records it
// holds) — and an epoch change ends a file: the batch cut there uses it,
// the next batch is encoded anew. The table holds every record once.
func TestPreEncodedDiscarded(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	u := New(Config{Node: "n1", ContinuousEncoding: true, Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	other := New(Config{Node: "n1", Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	const stream = "pre.discard"
	if _, err := e.cat.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.cat.Marks(ctx, stream); err != nil {
		t.Fatal(err)
	}
	vals := appendMany(t, e, stream, 0, 1, "a", 3000)
	preencodeAll(ctx, u)
	// Another pass commits (and releases) what the file holds, and more
	// lands: the file starts below the mark.
	if err := other.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	vals = append(vals, appendMany(t, e, stream, 0, 1, "b", 100)...)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if preCount(u, "used") != 0 || preCount(u, "discarded") != 1 {
		t.Fatalf("mark moved: used %d, discarded %d; want 0, 1", preCount(u, "used"), preCount(u, "discarded"))
	}
	// An epoch change in the middle of what landed: the file stops there.
	vals = append(vals, appendMany(t, e, stream, 0, 1, "c", 1500)...)
	vals = append(vals, appendMany(t, e, stream, 0, 2, "d", 1500)...)
	preencodeAll(ctx, u)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if preCount(u, "used") != 1 || preCount(u, "discarded") != 1 {
		t.Fatalf("epoch change: used %d, discarded %d; want 1, 1", preCount(u, "used"), preCount(u, "discarded"))
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{0: vals})
	if unreleased(e.wal) != 0 {
		t.Fatal("WAL not released")
	}
}

// TestPreFinishChecks: finish completes a file only when it holds a
// prefix of the run, field for field: not when the run starts elsewhere
// (the mark moved), is shorter than the file (a spec change to a finer
// partition bucket, a smaller batch), or holds other records at the same
// offsets (the WAL partition dropped and written again: another epoch,
// another payload, a null key where there was an empty one).
func TestPreFinishChecks(t *testing.T) {
	mk := func(n int) []*tributary.Record {
		out := make([]*tributary.Record, n)
		for i := range out {
			out[i] = &tributary.Record{Stream: "s", Offset: int64(10 + i), Epoch: 3, Timestamp: int64(i), Value: []byte{byte(i)}, Key: []byte{},
				Headers: []tributary.Header{{Key: "k", Value: nil}}}
		}
		return out
	}
	start := func(recs []*tributary.Record) *pre {
		enc, err := tables.ParquetOptions{}.NewEncoder()
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Append(recs); err != nil {
			t.Fatal(err)
		}
		return &pre{enc: enc, from: recs[0].Offset, recs: recs}
	}
	run := mk(50)
	if _, _, ok, err := start(mk(20)).finish(run, nil); !ok || err != nil {
		t.Fatalf("a prefix was not used: %v", err)
	}
	cases := map[string]func(r []*tributary.Record) []*tributary.Record{
		"mark moved":    func(r []*tributary.Record) []*tributary.Record { return r[5:] },
		"shorter run":   func(r []*tributary.Record) []*tributary.Record { return r[:10] },
		"other epoch":   func(r []*tributary.Record) []*tributary.Record { r[7].Epoch = 4; return r },
		"other payload": func(r []*tributary.Record) []*tributary.Record { r[3].Value = []byte("x"); return r },
		"null key":      func(r []*tributary.Record) []*tributary.Record { r[0].Key = nil; return r },
		"header value":  func(r []*tributary.Record) []*tributary.Record { r[1].Headers[0].Value = []byte{}; return r },
	}
	for name, f := range cases {
		if _, _, ok, _ := start(mk(20)).finish(f(mk(50)), nil); ok {
			t.Errorf("%s: the file was used", name)
		}
	}
	// sameRecord compares every field: a field added to Record must be
	// added there (and to this count).
	if n := reflect.TypeOf(tributary.Record{}).NumField(); n != 17 {
		t.Fatalf("tributary.Record has %d fields: check sameRecord compares the new ones", n)
	}
}

// TestUplinkDrainsContinuous: Run with continuous encoding while records
// land on two partitions: every record in the table once, in order, and
// pre-encoded files were used.
func TestUplinkDrainsContinuous(t *testing.T) {
	e := newEnv(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u := New(Config{Interval: 300 * time.Millisecond, Node: "n1", ContinuousEncoding: true, Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	want := map[int32][][]byte{}
	for round := range 60 {
		for p := range int32(2) {
			want[p] = append(want[p], appendMany(t, e, "a.cont", p, 0, fmt.Sprintf("r%d", round), 100)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
	testkit.Eventually(t, 30*time.Second, "WAL drained", func() bool { return unreleased(e.wal) == 0 })
	cancel()
	<-done
	checkTable(t, e.cat, "a.cont", want)
	if preCount(u, "used") == 0 {
		t.Fatalf("no pre-encoded file used (discarded %d)", preCount(u, "discarded"))
	}
	t.Logf("pre-encoded files used %d, discarded %d", preCount(u, "used"), preCount(u, "discarded"))
}

// TestPreencodeMemoryCap: 40 partitions of 1 KiB records, 2 MiB of them
// each, under a 5 MiB cap across partitions: after every slice the
// in-progress files together hold at most the cap (counted per file, not
// only in the total), the cap is used, and a pass frees it: everything
// lands in the table once and pre-encoding goes on afterwards.
func TestPreencodeMemoryCap(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const limit = 5 << 20
	u := New(Config{Node: "n1", ContinuousEncoding: true, PreencodeMaxBytes: limit, Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	const stream = "pre.cap"
	want := map[int32][][]byte{}
	val := bytes.Repeat([]byte("v"), 1000)
	for p := range int32(40) {
		var recs []*tributary.Record
		for i := range 2000 {
			v := append(fmt.Appendf(nil, "%d-%d-", p, i), val...)
			recs = append(recs, &tributary.Record{Stream: stream, Partition: p, Value: v, Topic: "t", Source: "mqtt"})
			want[p] = append(want[p], v)
		}
		if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: recs}).Err; err != nil {
			t.Fatal(err)
		}
	}
	held := func() (sum int64) {
		u.pre.mu.Lock()
		defer u.pre.mu.Unlock()
		for _, pr := range u.pre.m {
			pr.mu.Lock()
			if !pr.gone {
				for _, r := range pr.recs {
					sum += recBytes(r)
				}
			}
			pr.mu.Unlock()
		}
		return sum
	}
	peak := int64(0)
	for {
		worked := false
		for _, p := range u.log.Partitions() {
			if u.pre.step(ctx, p) {
				worked = true
				h := held()
				if h > limit || h != u.pre.bytes.Load() {
					t.Fatalf("in-progress files hold %d bytes (counted %d), cap %d", h, u.pre.bytes.Load(), limit)
				}
				peak = max(peak, h)
			}
		}
		if !worked {
			break
		}
	}
	if peak < limit-2*preSlice*1010 {
		t.Fatalf("peak %d bytes: the cap %d was not used", peak, limit)
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if u.pre.bytes.Load() != 0 || preCount(u, "used") == 0 {
		t.Fatalf("after the pass %d bytes held, %d files used", u.pre.bytes.Load(), preCount(u, "used"))
	}
	checkTable(t, e.cat, stream, want)
	appendMany(t, e, stream, 0, 0, "more", 100)
	preencodeAll(ctx, u)
	if u.pre.records.Load() != 100 {
		t.Fatalf("%d records pre-encoded after the pass, want 100", u.pre.records.Load())
	}
}

// histSched returns scheduler samples whose counts grow by fast wake-ups
// (under 1ms) and slow ones (over 1ms) per call.
func histSched(fast, slow uint64) func() *rtmetrics.Float64Histogram {
	h := &rtmetrics.Float64Histogram{Buckets: []float64{0, 1e-4, 1e-3, 1e-2, math.Inf(1)}, Counts: make([]uint64, 4)}
	return func() *rtmetrics.Float64Histogram {
		h.Counts[0] += fast
		h.Counts[2] += slow
		return &rtmetrics.Float64Histogram{Buckets: h.Buckets, Counts: slices.Clone(h.Counts)}
	}
}

func backoffsMetric(t *testing.T, u *Uplink) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(u.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "tributary_uplink_preencode_backoffs_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no tributary_uplink_preencode_backoffs_total")
	return 0
}

// TestPreencodeBacksOff: the pre-encoder sleeps after a slice when
// goroutines waited for a CPU: with scheduler samples where 5% of the
// wake-ups waited over 1ms it backs off after every slice (counted in
// tributary_uplink_preencode_backoffs_total); with none waiting, or 0.5%,
// never.
func TestPreencodeBacksOff(t *testing.T) {
	e := newEnv(t, 0)
	u := New(Config{Node: "n1", ContinuousEncoding: true, Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		fast, slow uint64
		want       int64
	}{{"idle", 0, 0, 0}, {"no waiting", 1000, 0, 0}, {"0.5% waiting", 995, 5, 0}, {"5% waiting", 950, 50, 20}} {
		u.pre.sched, u.pre.last = histSched(tc.fast, tc.slow), nil
		u.pre.busy() // the baseline
		before := u.pre.backoffs.Load()
		for range 20 {
			u.pre.yield(ctx)
		}
		if got := u.pre.backoffs.Load() - before; got != tc.want {
			t.Errorf("%s: %d back-offs in 20 slices, want %d", tc.name, got, tc.want)
		}
	}
	if got := backoffsMetric(t, u); got != 20 {
		t.Fatalf("tributary_uplink_preencode_backoffs_total = %v, want 20", got)
	}
}

// TestPreencodeBacksOffUnderLoad: with goroutines spinning on every CPU
// (ingest short of CPU, for real: the runtime's own scheduler samples),
// the pre-encoder backs off. Only that it eventually does is asserted, not
// how soon.
func TestPreencodeBacksOffUnderLoad(t *testing.T) {
	e := newEnv(t, 0)
	u := New(Config{Node: "n1", ContinuousEncoding: true, Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				for i := 0; i < 1e6; i++ {
					_ = i * i
				}
			}
		}()
	}
	defer wg.Wait()
	defer cancel()
	u.pre.busy()
	testkit.Eventually(t, 60*time.Second, "a back-off under load", func() bool {
		u.pre.yield(ctx)
		return u.pre.backoffs.Load() > 0
	})
}
