package cloudwrite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cloudwrite/wire"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/uplink"
)

// env is one state database and one file:// warehouse store, shared by
// the writers (servers) of a test.
type env struct {
	t     *testing.T
	dir   string
	uri   string
	st    *State
	store BucketStore
}

func newEnv(t *testing.T, uri string) *env {
	t.Helper()
	dir := t.TempDir()
	if uri == "" {
		uri = "sqlite://" + filepath.Join(dir, "state.db")
	}
	st, err := OpenState(uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := uplink.OpenBucket(context.Background(), "file://"+filepath.Join(dir, "warehouse"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &env{t: t, dir: dir, uri: uri, st: st, store: BucketStore{B: b}}
}

func (e *env) writer(server string, mod func(*Config)) *Writer {
	cfg := Config{Server: server, FlushInterval: 5 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	// Each server has its own connections to the state database.
	st, err := OpenState(e.uri)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	w := NewWriter(cfg, st, e.store)
	e.t.Cleanup(w.Close)
	return w
}

// testSegment is n records of one producer (pid -1: none) from seq.
func testSegment(stream string, p int32, pid int64, seq int32, n int) *wire.Segment {
	s := &wire.Segment{Stream: stream, Partition: p, ProducerID: pid, BaseSequence: seq, Topic: stream, Source: "kafka", Principal: "alice"}
	for i := 0; i < n; i++ {
		s.Records = append(s.Records, &tributary.Record{Value: []byte(fmt.Sprintf("%s-%d-%d", stream, seq, i))})
	}
	return s
}

type result struct {
	o   Outcome
	err error
}

// submit submits seg and waits for its answer.
func submit(w *Writer, seg *wire.Segment) result {
	ch := make(chan result, 1)
	w.Submit(seg, func(o Outcome, err error) { ch <- result{o, err} })
	return <-ch
}

func (e *env) objects() []string {
	var keys []string
	if err := e.store.List(context.Background(), Prefix, func(k string, _ time.Time) error { keys = append(keys, k); return nil }); err != nil {
		e.t.Fatal(err)
	}
	return keys
}

func TestWriterOneObjectPerFlushDenseOffsets(t *testing.T) {
	e := newEnv(t, "")
	w := e.writer("s1", func(c *Config) { c.FlushInterval = time.Hour })
	var wg sync.WaitGroup
	res := make([]result, 20)
	for i := range res {
		wg.Add(1)
		w.Submit(testSegment("f.t", 1, -1, 0, 3), func(o Outcome, err error) { res[i] = result{o, err}; wg.Done() })
	}
	w.Flush()
	wg.Wait()
	seen := map[int64]bool{}
	for _, r := range res {
		if r.err != nil {
			t.Fatal(r.err)
		}
		for j := int64(0); j < 3; j++ {
			if seen[r.o.First+j] {
				t.Fatalf("offset %d twice", r.o.First+j)
			}
			seen[r.o.First+j] = true
		}
	}
	for o := int64(0); o < 60; o++ {
		if !seen[o] {
			t.Fatalf("offset %d missing", o)
		}
	}
	if n := len(e.objects()); n != 1 {
		t.Fatalf("%d objects for one flush", n)
	}
	recs, err := NewTail(e.st, e.store, 0).Read(context.Background(), "f.t", 1, 10, 1<<20)
	if err != nil || len(recs) != 50 || recs[0].Offset != 10 || recs[49].Offset != 59 || recs[0].Node != "s1" {
		t.Fatalf("tail: %d records, %v", len(recs), err)
	}
}

func TestWriterCutsAtFlushBytes(t *testing.T) {
	e := newEnv(t, "")
	w := e.writer("s1", func(c *Config) { c.FlushInterval = time.Hour; c.FlushBytes = 1 })
	if r := submit(w, testSegment("f.t", 0, -1, 0, 1)); r.err != nil || r.o.First != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestWriterBackpressure(t *testing.T) {
	e := newEnv(t, "")
	block := make(chan struct{})
	w := e.writer("s1", func(c *Config) {
		c.MaxBufferedBytes = 2000
		c.afterPut = func(string) error { <-block; return nil }
	})
	first := make(chan result, 1)
	w.Submit(testSegment("f.t", 0, -1, 0, 30), func(o Outcome, err error) { first <- result{o, err} })
	// The buffer holds the first submission until its flush is answered.
	r := submit(w, testSegment("f.t", 0, -1, 0, 30))
	if !errors.Is(r.err, ErrBackpressure) {
		t.Fatalf("over the cap: %v", r.err)
	}
	close(block)
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	if r := submit(w, testSegment("f.t", 0, -1, 0, 30)); r.err != nil || r.o.First != 30 {
		t.Fatalf("after the flush: %+v", r)
	}
}

// A server that dies after the put and before sequencing leaves an
// orphan: its records are never visible, take no offset, and the sweep
// deletes the object.
func TestCrashAfterPutBeforeSequencing(t *testing.T) {
	e := newEnv(t, "")
	crash := e.writer("s1", func(c *Config) { c.afterPut = func(string) error { return errors.New("killed") } })
	r := submit(crash, testSegment("f.t", 0, 9, 0, 4))
	if !errors.Is(r.err, ErrNotWritten) {
		t.Fatalf("crashed flush answered %+v", r)
	}
	orphans := e.objects()
	if len(orphans) != 1 {
		t.Fatalf("objects %v", orphans)
	}
	if end, ok, _ := e.st.End(context.Background(), "f.t", 0); ok || end != 0 {
		t.Fatalf("an orphan took offsets: %d", end)
	}
	// The producer's retry, to another server, lands once at offset 0.
	other := e.writer("s2", nil)
	if r := submit(other, testSegment("f.t", 0, 9, 0, 4)); r.err != nil || r.o.First != 0 || r.o.Duplicate {
		t.Fatalf("retry %+v", r)
	}
	if r := submit(other, testSegment("f.t", 0, 9, 0, 4)); r.err != nil || r.o.First != 0 || !r.o.Duplicate {
		t.Fatalf("second retry %+v", r)
	}
	tail := NewTail(e.st, e.store, 0)
	recs, err := tail.Read(context.Background(), "f.t", 0, 0, 1<<20)
	if err != nil || len(recs) != 4 || recs[0].Node != "s2" {
		t.Fatalf("tail %d %v", len(recs), err)
	}
	c := NewCommitter(CommitConfig{Server: "s2", OrphanGrace: time.Nanosecond}, nil, e.st, tail, e.store)
	if err := c.SweepOrphans(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Left: the retry's object and the duplicate's (collected once the
	// table has committed, Committer.Collect), not the orphan.
	left := e.objects()
	if len(left) != 2 || left[0] == orphans[0] || left[1] == orphans[0] {
		t.Fatalf("after the sweep: %v (orphan %s)", left, orphans[0])
	}
}

func TestIdempotentProducerAcrossServers(t *testing.T) {
	e := newEnv(t, "")
	a, b := e.writer("a", nil), e.writer("b", nil)
	if r := submit(a, testSegment("f.t", 0, 5, 0, 3)); r.err != nil || r.o.First != 0 {
		t.Fatalf("%+v", r)
	}
	if r := submit(b, testSegment("f.t", 0, -1, 0, 2)); r.err != nil || r.o.First != 3 {
		t.Fatalf("plain %+v", r)
	}
	if r := submit(b, testSegment("f.t", 0, 5, 0, 3)); r.err != nil || !r.o.Duplicate || r.o.First != 0 {
		t.Fatalf("retry on b %+v", r)
	}
	if r := submit(b, testSegment("f.t", 0, 5, 3, 1)); r.err != nil || r.o.First != 5 {
		t.Fatalf("next on b %+v", r)
	}
	if r := submit(a, testSegment("f.t", 0, 5, 9, 1)); r.err != nil || !errors.Is(r.o.Err, ErrOutOfOrder) {
		t.Fatalf("gap %+v", r)
	}
	s := testSegment("f.t", 0, 5, 0, 1)
	s.ProducerEpoch = 1
	if r := submit(a, s); r.err != nil || r.o.Err != nil || r.o.First != 6 {
		t.Fatalf("new epoch %+v", r)
	}
	if r := submit(b, testSegment("f.t", 0, 5, 4, 1)); r.err != nil || !errors.Is(r.o.Err, ErrProducerFenced) {
		t.Fatalf("old epoch %+v", r)
	}
	if end, _, _ := e.st.End(context.Background(), "f.t", 0); end != 7 {
		t.Fatalf("end %d", end)
	}
}

// Servers sequencing one partition at once: dense, never twice.
func concurrentServers(t *testing.T, e *env, servers, perServer int) {
	ws := make([]*Writer, servers)
	for i := range ws {
		ws[i] = e.writer(fmt.Sprintf("s%d", i), nil)
	}
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for i, w := range ws {
		for j := 0; j < perServer; j++ {
			wg.Add(1)
			w.Submit(testSegment("f.t", 0, -1, 0, 2), func(o Outcome, err error) {
				defer wg.Done()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for k := int64(0); k < 2; k++ {
					if by, ok := seen[o.First+k]; ok {
						t.Errorf("offset %d given to %s and s%d", o.First+k, by, i)
					}
					seen[o.First+k] = fmt.Sprintf("s%d", i)
				}
			})
			if j%10 == 9 {
				time.Sleep(time.Millisecond) // spread over several flushes
			}
		}
	}
	wg.Wait()
	n := int64(servers * perServer * 2)
	for o := int64(0); o < n; o++ {
		if _, ok := seen[o]; !ok {
			t.Fatalf("offset %d missing (a gap)", o)
		}
	}
	if end, _, _ := e.st.End(context.Background(), "f.t", 0); end != n {
		t.Fatalf("end %d, want %d", end, n)
	}
	recs, err := NewTail(e.st, e.store, 0).Read(context.Background(), "f.t", 0, 0, 1<<30)
	if err != nil || int64(len(recs)) != n {
		t.Fatalf("tail %d %v", len(recs), err)
	}
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("tail record %d has offset %d", i, r.Offset)
		}
	}
}

func TestConcurrentServersSQLite(t *testing.T) { concurrentServers(t, newEnv(t, ""), 3, 60) }

func TestConcurrentServersPostgres(t *testing.T) {
	concurrentServers(t, newEnv(t, testkit.Postgres(t)), 3, 60)
}

// namedSegment is n records of the named producer with sequence ids
// first..last.
func namedSegment(name string, first, last int64, n int) *wire.Segment {
	s := testSegment("f.t", 0, -1, 0, n)
	s.Source, s.Dedup = "pulsar", &tributary.Dedup{Producer: name, First: first, Last: last}
	return s
}

// Named producers (Pulsar): a resend at or below the last sequence id
// lands once, on any server and after a restart; the last write's resend
// is answered with its original offset, an older one with -1; sequence
// ids may skip; producers are apart.
func TestNamedProducerAcrossServers(t *testing.T) {
	e := newEnv(t, "")
	a, b := e.writer("a", nil), e.writer("b", nil)
	ctx := context.Background()
	if n, err := e.st.LastSequence(ctx, "f.t", 0, "p"); err != nil || n != -1 {
		t.Fatalf("unknown producer: %d %v", n, err)
	}
	for i, c := range []struct {
		w         *Writer
		seg       *wire.Segment
		first     int64
		duplicate bool
	}{
		{a, namedSegment("p", 0, 0, 2), 0, false},
		{b, namedSegment("p", 0, 0, 2), 0, true},  // resend to the other server
		{b, namedSegment("p", 1, 3, 3), 2, false}, // a batch
		{a, namedSegment("p", 1, 3, 3), 2, true},
		{a, namedSegment("p", 0, 0, 2), -1, true}, // older than the last
		{a, namedSegment("q", 0, 0, 1), 5, false}, // another producer
		{b, namedSegment("p", 9, 9, 1), 6, false}, // a gap in sequence ids
	} {
		r := submit(c.w, c.seg)
		if r.err != nil || r.o.Err != nil || r.o.First != c.first || r.o.Duplicate != c.duplicate {
			t.Fatalf("write %d: %+v, want first %d duplicate %v", i, r, c.first, c.duplicate)
		}
	}
	// A restarted server: the state is in the database.
	c := e.writer("c", nil)
	if r := submit(c, namedSegment("p", 9, 9, 1)); !r.o.Duplicate || r.o.First != 6 {
		t.Fatalf("after a restart: %+v", r)
	}
	if n, err := e.st.LastSequence(ctx, "f.t", 0, "p"); err != nil || n != 9 {
		t.Fatalf("last sequence %d %v", n, err)
	}
	if end, _, _ := e.st.End(ctx, "f.t", 0); end != 7 {
		t.Fatalf("end %d: a resend took offsets", end)
	}
}

// A sequencing that waits on the state database (another writer holds
// it) gives up at half the orphan grace, refusing its producers: the
// object would otherwise be sequenced, and answered, while the orphan
// sweep, which spares only sequenced objects, may delete it.
func TestSequencingStopsAtHalfTheOrphanGrace(t *testing.T) {
	e := newEnv(t, "")
	const grace = 1200 * time.Millisecond
	w := e.writer("s1", func(c *Config) { c.OrphanGrace = grace })
	lock, err := OpenState(e.uri)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	tx, err := lock.db.BeginTx(context.Background(), nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO tributary_cw_ids (name, next_id) VALUES ('lock', 1)`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ch := make(chan result, 1)
	w.Submit(testSegment("f.t", 0, -1, 0, 2), func(o Outcome, err error) { ch <- result{o, err} })
	// The lock is held past the grace: a sequencing still waiting would
	// commit once it is released.
	time.AfterFunc(grace+200*time.Millisecond, func() { tx.Rollback() })
	// (SQLite's wait for the lock does not end at the deadline: the
	// refusal comes once it is released, the deadline past.)
	if r := <-ch; !errors.Is(r.err, ErrNotWritten) {
		t.Fatalf("sequenced after %v although the orphan grace is %v: %+v", time.Since(start), grace, r)
	}
	if end, ok, _ := e.st.End(context.Background(), "f.t", 0); ok || end != 0 {
		t.Fatalf("the refused object took offsets: %d", end)
	}
}

// An idempotent producer has up to five batches in flight: when the
// server that sequenced them dies before answering, all are retried to
// another server, the first ones no longer the producer's last run.
// Each is a duplicate at its original offset, as Kafka keeps the last
// five batches of a producer per partition.
func TestIdempotentRetryOfEarlierBatches(t *testing.T) {
	testkit.StateDBs(t, func(t *testing.T, uri string) { idempotentRetryOfEarlierBatches(t, newEnv(t, uri)) })
}

func idempotentRetryOfEarlierBatches(t *testing.T, e *env) {
	a, b := e.writer("a", func(c *Config) { c.FlushInterval = time.Hour }), e.writer("b", nil)
	var wg sync.WaitGroup
	first := make([]int64, 6)
	for i := range first {
		wg.Add(1)
		a.Submit(testSegment("f.t", 0, 5, int32(3*i), 3), func(o Outcome, err error) {
			defer wg.Done()
			if err != nil || o.Err != nil {
				t.Errorf("batch %d: %v %v", i, err, o.Err)
			}
			first[i] = o.First
		})
	}
	a.Flush()
	wg.Wait()
	for i := 1; i < len(first); i++ { // the last five: 1..5
		if r := submit(b, testSegment("f.t", 0, 5, int32(3*i), 3)); r.err != nil || r.o.Err != nil || !r.o.Duplicate || r.o.First != first[i] {
			t.Fatalf("retry of batch %d on b: %+v, want a duplicate at %d", i, r, first[i])
		}
	}
	// The sixth from last is forgotten: out of order, as on Kafka.
	if r := submit(b, testSegment("f.t", 0, 5, 0, 3)); r.err != nil || !errors.Is(r.o.Err, ErrOutOfOrder) {
		t.Fatalf("retry of a batch no longer kept: %+v", r)
	}
	if r := submit(b, testSegment("f.t", 0, 5, 18, 1)); r.err != nil || r.o.Err != nil || r.o.Duplicate || r.o.First != 18 {
		t.Fatalf("the next batch: %+v", r)
	}
	if end, _, _ := e.st.End(context.Background(), "f.t", 0); end != 19 {
		t.Fatalf("end %d, want 19", end)
	}
}
