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

// preMaxBytes bounds the records (logical bytes: value, key, topic) one
// in-progress file holds; so does Config.MaxBatchBytes/2, so that it is a
// prefix of the batch the next pass reads.
const preMaxBytes = 16 << 20

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
// records the pass would upload).
type pre struct {
	mu     sync.Mutex // held while a slice is appended, and by take
	enc    *tables.Encoder
	from   int64
	recs   []*tributary.Record
	bytes  int64
	bucket int64
	full   bool // an epoch or bucket change, or preMaxBytes: nothing more goes in
	gone   bool // taken by a pass, or discarded
}

type preKey struct {
	stream string
	part   int32
}

// preEncoder keeps one in-progress file per partition of a raw stream.
type preEncoder struct {
	u    *Uplink
	mu   sync.Mutex
	m    map[preKey]*pre
	held map[string]bool // streams a pass is syncing: left alone meanwhile

	sched rtmetrics.Sample // /sched/latencies:seconds, for busy
	last  []uint64

	records atomic.Int64 // in the in-progress files (tributary_uplink_preencoded_records)
}

func newPreEncoder(u *Uplink) *preEncoder {
	pe := &preEncoder{u: u, m: map[preKey]*pre{}, held: map[string]bool{}}
	pe.sched.Name = "/sched/latencies:seconds"
	return pe
}

// run pre-encodes until ctx ends.
func (pe *preEncoder) run(ctx context.Context) {
	for ctx.Err() == nil {
		worked := false
		live := map[preKey]bool{}
		for _, p := range pe.u.log.Partitions() {
			if pe.u.cfg.Payloads[p.Stream].Typed() || p.Next <= p.Released {
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
		enc, err := pe.u.cfg.Parquet.NewEncoder()
		if err != nil {
			pe.mu.Unlock()
			return false
		}
		pr = &pre{enc: enc, from: p.Released}
		pe.m[k] = pr
	}
	pe.mu.Unlock()

	pr.mu.Lock()
	defer pr.mu.Unlock()
	next := pr.from + int64(len(pr.recs))
	if pr.gone || pr.full || next >= p.Next {
		return false
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
	if len(pr.recs) == 0 {
		pr.bucket = int64(g.Bucket(recs[0].Timestamp))
	}
	n := 0
	for _, r := range recs {
		sz := int64(len(r.Value) + len(r.Key) + len(r.Topic))
		if r.Epoch != recs[0].Epoch || (len(pr.recs) > 0 && r.Epoch != pr.recs[0].Epoch) ||
			int64(g.Bucket(r.Timestamp)) != pr.bucket || pr.bytes+sz > min(preMaxBytes, pe.u.cfg.MaxBatchBytes/2) {
			pr.full = true
			break
		}
		pr.bytes += sz
		n++
	}
	if n == 0 {
		return false
	}
	if err := pr.enc.Append(recs[:n]); err != nil {
		pr.full = true
		return false
	}
	pr.recs = append(pr.recs, recs[:n]...)
	pe.records.Add(int64(n))
	return true
}

// drop discards pr (pe.mu held): a step appending to it stops.
func (pe *preEncoder) drop(pr *pre) {
	pr.mu.Lock()
	if !pr.gone {
		pr.gone = true
		pe.records.Add(-int64(len(pr.recs)))
	}
	pr.mu.Unlock()
}

// yield lets ingest run between slices: always the scheduler, and a sleep
// when goroutines waited long to run since the last slice (busy).
func (pe *preEncoder) yield(ctx context.Context) {
	runtime.Gosched()
	if pe.busy() {
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
	rtmetrics.Read([]rtmetrics.Sample{pe.sched})
	if pe.sched.Value.Kind() != rtmetrics.KindFloat64Histogram {
		return false
	}
	h := pe.sched.Value.Float64Histogram()
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
	return pr
}

// finish closes pr as the file of run (the first run of a pass's batch)
// if pr provably holds a prefix of it: it starts at run's first offset
// and its records are run's first ones, field for field. It appends the
// rest of run first. ok is false when pr does not match (the caller
// encodes run itself).
func (pr *pre) finish(run []*tributary.Record) (data []byte, st tables.FileStats, ok bool, err error) {
	if len(run) == 0 || pr.from != run[0].Offset || len(pr.recs) > len(run) {
		return nil, st, false, nil
	}
	for i, r := range pr.recs {
		if !sameRecord(r, run[i]) {
			return nil, st, false, nil
		}
	}
	if err := pr.enc.Append(run[len(pr.recs):]); err != nil {
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
