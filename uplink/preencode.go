package uplink

import (
	"bytes"
	"context"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// preSlice is the most records pre-encoded at once, between yields.
const preSlice = 1024

// preMaxBytes bounds the records (logical bytes: recBytes) one
// in-progress file holds; so does Config.MaxBatchBytes/2 (for a typed
// stream MaxTypedBatchBytes/2), so that it is a prefix of the batch the
// next pass reads.
const preMaxBytes = 16 << 20

// DefaultPreencodeMaxBytes is the default of Config.PreencodeMaxBytes.
const DefaultPreencodeMaxBytes = 64 << 20

// recBytes is the logical size of r counted against the pre-encoder's
// caps: value, key, topic and headers.
func recBytes(r *tributary.Record) int64 {
	n := len(r.Value) + len(r.Key) + len(r.Topic)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// preIdle is how long the pre-encoder waits when nothing new landed;
// preBackoff how long it sleeps after a slice when ingest is short of CPU.
const (
	preIdle    = 20 * time.Millisecond
	preBackoff = 10 * time.Millisecond
)

// pre is the in-progress file of one partition: the records from the
// WAL's released offset as they land, all of one epoch and one partition
// bucket, encoded into enc. recs are the records encoded (pointers of
// the WAL's reads: the proof at sync time that the file holds exactly the
// records the pass would upload). For a typed stream, enc has the schema
// of the table as loaded when the file started (tables.Preshape), every
// record in it is typed under that schema, and ets are their event times
// (part of the proof).
type pre struct {
	mu     sync.Mutex      // held while a slice is appended, and by take
	enc    *tables.Encoder // nil until the first slice
	from   int64
	recs   []*tributary.Record
	ets    []int64
	bytes  int64
	bucket int64
	full   bool // an epoch or bucket change, preMaxBytes, a schema change or a dead letter: nothing more goes in
	gone   bool // taken by a pass, or discarded
}

type preKey struct {
	stream string
	part   int32
}

// preEncoder keeps one in-progress file per partition.
type preEncoder struct {
	u    *Uplink
	mu   sync.Mutex
	m    map[preKey]*pre
	held map[string]bool // streams a pass is syncing: left alone meanwhile

	// sched reads the scheduler latencies (runtime/metrics
	// /sched/latencies:seconds) busy compares; tests put their own.
	sched func() *rtmetrics.Float64Histogram
	last  []uint64

	records  atomic.Int64 // in the in-progress files (tributary_uplink_preencoded_records)
	bytes    atomic.Int64 // their recBytes, at most Config.PreencodeMaxBytes (tributary_uplink_preencoded_bytes)
	backoffs atomic.Int64 // sleeps of yield (tributary_uplink_preencode_backoffs_total)
}

func newPreEncoder(u *Uplink) *preEncoder {
	return &preEncoder{u: u, m: map[preKey]*pre{}, held: map[string]bool{}, sched: readSched}
}

// readSched reads the process's scheduler latencies.
func readSched() *rtmetrics.Float64Histogram {
	s := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// run pre-encodes until ctx ends.
func (pe *preEncoder) run(ctx context.Context) {
	for ctx.Err() == nil {
		worked := false
		live := map[preKey]bool{}
		for _, p := range pe.u.log.Partitions() {
			if p.Next <= p.Released {
				continue
			}
			live[preKey{p.Stream, p.Partition}] = true
			if pe.step(ctx, p) {
				worked = true
				pe.yield(ctx)
			}
		}
		pe.mu.Lock()
		for k, pr := range pe.m {
			if !live[k] {
				delete(pe.m, k)
				pe.drop(pr)
			}
		}
		pe.mu.Unlock()
		if !worked {
			select {
			case <-ctx.Done():
			case <-time.After(preIdle):
			}
		}
	}
}

// step encodes one slice of partition p's newly landed records, if any;
// it reports whether it did.
func (pe *preEncoder) step(ctx context.Context, p wal.PartitionState) bool {
	k := preKey{p.Stream, p.Partition}
	pe.mu.Lock()
	if pe.held[p.Stream] {
		pe.mu.Unlock()
		return false
	}
	pr := pe.m[k]
	if pr == nil || pr.from != p.Released {
		// New, or released past (a pass committed it): start again at
		// the first record the next pass will upload.
		if pr != nil {
			pe.drop(pr)
		}
		pr = &pre{from: p.Released}
		pe.m[k] = pr
	}
	pe.mu.Unlock()

	pr.mu.Lock()
	defer pr.mu.Unlock()
	next := pr.from + int64(len(pr.recs))
	if pr.gone || pr.full || next >= p.Next {
		return false
	}
	pol := pe.u.cfg.Payloads[p.Stream]
	limit := min(preMaxBytes, pe.u.cfg.MaxBatchBytes/2)
	if pol.Typed() {
		limit = min(limit, MaxTypedBatchBytes/2)
	}
	room := pe.u.cfg.PreencodeMaxBytes - pe.bytes.Load() // across every partition
	if room <= 0 {
		return false // wait for a pass to take or drop a file
	}
	g, err := pe.u.cat.Granularity(ctx, p.Stream)
	if err != nil {
		return false
	}
	recs, err := pe.u.log.Read(p.Stream, p.Partition, next, preSlice, 0)
	if err != nil || len(recs) == 0 || recs[0].Offset != next {
		pr.full = true // released or dropped underneath: the pass decides
		return false
	}
	var sh *tables.Shaped
	ends := false // the slice ends the file
	if pol.Typed() {
		// Typed under the table's schema as it is, up to the first record
		// that needs the table to change or is a dead letter: the file
		// ends there.
		var n int
		if sh, n, err = pe.u.cat.Preshape(ctx, p.Stream, pol, recs); err != nil {
			return false
		}
		if n == 0 || (pr.enc != nil && !tables.SameSchema(pr.enc.Schema(), sh.Schema)) {
			pr.full = true
			return false
		}
		recs, ends = recs[:n], n < len(recs)
	}
	bucket := func(r *tributary.Record) int64 {
		if sh != nil {
			return sh.Bucket(g, r)
		}
		return int64(g.Bucket(r.Timestamp))
	}
	if len(pr.recs) == 0 {
		pr.bucket = bucket(recs[0])
	}
	n, add := 0, int64(0)
	for _, r := range recs {
		sz := recBytes(r)
		if add+sz > room {
			ends = false // not the file's end: the cap across partitions is, for now
			break
		}
		if r.Epoch != recs[0].Epoch || (len(pr.recs) > 0 && r.Epoch != pr.recs[0].Epoch) ||
			bucket(r) != pr.bucket || pr.bytes+add+sz > limit {
			pr.full = true
			break
		}
		add += sz
		n++
	}
	if ends && n == len(recs) {
		pr.full = true
	}
	if n == 0 {
		return false
	}
	if pr.enc == nil {
		if sh != nil {
			pr.enc, err = pe.u.cfg.Parquet.NewShapedEncoder(sh)
		} else {
			pr.enc, err = pe.u.cfg.Parquet.NewEncoder()
		}
		if err != nil {
			pr.full = true
			return false
		}
	}
	if sh != nil {
		err = pr.enc.AppendShaped(recs[:n], sh)
	} else {
		err = pr.enc.Append(recs[:n])
	}
	if err != nil {
		pr.full = true
		return false
	}
	if sh != nil {
		for _, r := range recs[:n] {
			_, et := sh.Typed(r.Offset)
			pr.ets = append(pr.ets, et)
		}
	}
	pr.recs = append(pr.recs, recs[:n]...)
	pr.bytes += add
	pe.records.Add(int64(n))
	pe.bytes.Add(add)
	return true
}

// drop discards pr (pe.mu held): a step appending to it stops.
func (pe *preEncoder) drop(pr *pre) {
	pr.mu.Lock()
	if !pr.gone {
		pr.gone = true
		pe.records.Add(-int64(len(pr.recs)))
		pe.bytes.Add(-pr.bytes)
	}
	pr.mu.Unlock()
}

// yield lets ingest run between slices: always the scheduler, and a sleep
// when goroutines waited long to run since the last slice (busy).
func (pe *preEncoder) yield(ctx context.Context) {
	runtime.Gosched()
	if pe.busy() {
		pe.backoffs.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(preBackoff):
		}
	}
}

// busy says whether, since the last call, more than 1% of the times a
// goroutine became runnable it waited over 1ms for a CPU (runtime/metrics
// /sched/latencies:seconds): ingest is short of CPU.
func (pe *preEncoder) busy() bool {
	h := pe.sched()
	if h == nil {
		return false
	}
	if len(pe.last) != len(h.Counts) {
		pe.last = make([]uint64, len(h.Counts))
	}
	var all, slow uint64
	for i, c := range h.Counts {
		d := c - pe.last[i]
		pe.last[i] = c
		all += d
		if h.Buckets[i] >= 1e-3 {
			slow += d
		}
	}
	return all > 0 && slow*100 > all
}

// hold keeps the pre-encoder off stream while a pass syncs it; release
// with unhold.
func (pe *preEncoder) hold(stream string) {
	pe.mu.Lock()
	pe.held[stream] = true
	pe.mu.Unlock()
}

func (pe *preEncoder) unhold(stream string) {
	pe.mu.Lock()
	delete(pe.held, stream)
	pe.mu.Unlock()
}

// take removes partition p's in-progress file, waiting for a slice being
// appended; nil if there is none.
func (pe *preEncoder) take(stream string, p int32) *pre {
	pe.mu.Lock()
	pr := pe.m[preKey{stream, p}]
	delete(pe.m, preKey{stream, p})
	pe.mu.Unlock()
	if pr == nil {
		return nil
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.gone || len(pr.recs) == 0 {
		return nil
	}
	pr.gone = true
	pe.records.Add(-int64(len(pr.recs)))
	pe.bytes.Add(-pr.bytes)
	return pr
}

// finish closes pr as the file of run (the first run of a pass's batch,
// shaped by sh for a typed stream, else sh is nil) if pr provably holds a
// prefix of it: it starts at run's first offset and its records are run's
// first ones, field for field; for a typed stream, sh's schema is the
// file's (the same id and field ids) and sh has each of these records
// typed, with the event time the file has. It appends the rest of run
// first. ok is false when pr does not match (the caller encodes run
// itself).
func (pr *pre) finish(run []*tributary.Record, sh *tables.Shaped) (data []byte, st tables.FileStats, ok bool, err error) {
	if len(run) == 0 || pr.enc == nil || pr.from != run[0].Offset || len(pr.recs) > len(run) ||
		(pr.enc.Schema() != nil) != (sh != nil) || (sh != nil && !tables.SameSchema(pr.enc.Schema(), sh.Schema)) {
		return nil, st, false, nil
	}
	for i, r := range pr.recs {
		if !sameRecord(r, run[i]) {
			return nil, st, false, nil
		}
		if sh != nil {
			if typed, et := sh.Typed(r.Offset); !typed || et != pr.ets[i] {
				return nil, st, false, nil
			}
		}
	}
	if sh != nil {
		err = pr.enc.AppendShaped(run[len(pr.recs):], sh)
	} else {
		err = pr.enc.Append(run[len(pr.recs):])
	}
	if err != nil {
		return nil, st, false, err
	}
	data, st, err = pr.enc.Close()
	return data, st, err == nil, err
}

// sameRecord says whether a and b are the same record, every field (nil
// and empty byte slices differ: a nil key is null).
func sameRecord(a, b *tributary.Record) bool {
	if a.Stream != b.Stream || a.Partition != b.Partition || a.Offset != b.Offset || a.Epoch != b.Epoch ||
		a.Timestamp != b.Timestamp || a.Topic != b.Topic || a.Source != b.Source || a.ClientID != b.ClientID ||
		a.Node != b.Node || a.Principal != b.Principal || a.ProducerID != b.ProducerID ||
		a.ProducerEpoch != b.ProducerEpoch || a.Sequence != b.Sequence || a.ProducerTimestamp != b.ProducerTimestamp ||
		!sameBytes(a.Key, b.Key) || !sameBytes(a.Value, b.Value) || len(a.Headers) != len(b.Headers) ||
		(a.Headers == nil) != (b.Headers == nil) {
		return false
	}
	for i, h := range a.Headers {
		if h.Key != b.Headers[i].Key || !sameBytes(h.Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
