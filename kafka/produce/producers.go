package produce

import (
	"sync"
	"time"

	"github.com/tributary-io/tributary/kafka"
)

// Idempotent-producer state, per (stream, partition, producer id), following
// Kafka's ProducerStateManager:
//
//   - A batch whose epoch is older than the known one is refused with
//     INVALID_PRODUCER_EPOCH (47).
//   - A batch of the known epoch that lies within one of the last five
//     appended runs is a retry: it is answered with success and the offset
//     its first record was written at, and nothing is appended.
//   - Otherwise, with the known epoch, its first sequence must follow the
//     last appended sequence (wrapping at MaxInt32), else
//     OUT_OF_ORDER_SEQUENCE_NUMBER (45); with a newer epoch it must start at
//     sequence 0.
//   - An unknown producer id (never seen, or forgotten after
//     ProducerIdleExpiry) is accepted at any sequence, as Kafka does when the
//     producer's state has been removed.
//
// Producer ids are bound to principals: InitProducerId binds the id it
// hands out to the connection's principal (anonymous = ""), and a Produce
// whose batch carries an id bound to another principal is refused with
// INVALID_PRODUCER_ID_MAPPING (49), nothing appended. That is the error a
// Kafka broker gives when a producer uses an id not assigned to its
// (transactional) identity; franz-go and the Java client answer it by
// dropping the id and asking for a fresh one, which is the right recovery
// for a client that re-authenticated as someone else. Not
// CLUSTER_AUTHORIZATION_FAILED (the principal may produce idempotently)
// nor TRANSACTIONAL_ID_AUTHORIZATION_FAILED (there is no transactional
// id). An id with no binding (handed out before a restart and never used,
// or idle past ProducerIdleExpiry) is claimed by the first principal that
// produces with it; bindings are rebuilt at Start from the principal of
// each run (ProducerRun.Principal, from Record.Principal), so a restart
// does not free an id that was used.
//
// The check and the append are done under the entry's lock, so a
// producer's batches for one partition are appended one at a time in
// order; different producers and partitions proceed concurrently and share
// the WAL's group commit.

const dedupWindow = 5

type producerKey struct {
	stream    string
	partition int32
	pid       int64
}

type producerEntry struct {
	mu       sync.Mutex // held across check + append + update
	known    bool
	epoch    int16
	lastSeq  int32
	runs     []ProducerRun // last dedupWindow runs, oldest first
	lastUsed time.Time
}

type producers struct {
	expiry time.Duration

	mu      sync.Mutex
	m       map[producerKey]*producerEntry
	created int
	owners  map[int64]*pidOwner // producer id -> the principal it is bound to
	bound   int
}

type pidOwner struct {
	principal string
	lastUsed  time.Time
}

func newProducers(expiry time.Duration) *producers {
	return &producers{expiry: expiry, m: make(map[producerKey]*producerEntry), owners: make(map[int64]*pidOwner)}
}

// bind records that pid belongs to principal.
func (p *producers) bind(pid int64, principal string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bindLocked(pid, principal, time.Now())
}

func (p *producers) bindLocked(pid int64, principal string, now time.Time) {
	p.owners[pid] = &pidOwner{principal: principal, lastUsed: now}
	if p.bound++; p.bound%1024 == 0 {
		for id, o := range p.owners {
			if now.Sub(o.lastUsed) > p.expiry {
				delete(p.owners, id)
			}
		}
	}
}

// claim tells whether principal may produce with pid: it is bound to
// principal, or to nobody (then it is bound to principal now).
func (p *producers) claim(pid int64, principal string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	o, ok := p.owners[pid]
	if !ok {
		p.bindLocked(pid, principal, now)
		return true
	}
	if o.principal != principal {
		return false
	}
	o.lastUsed = now
	return true
}

// lock returns the locked entry for k, creating it.
func (p *producers) lock(k producerKey) *producerEntry {
	for {
		p.mu.Lock()
		e, ok := p.m[k]
		if !ok {
			e = &producerEntry{lastUsed: time.Now()}
			p.m[k] = e
			if p.created++; p.created%1024 == 0 {
				p.sweepLocked(time.Now())
			}
		}
		p.mu.Unlock()
		e.mu.Lock()
		p.mu.Lock()
		current := p.m[k] == e
		p.mu.Unlock()
		if current { // not swept between our lookup and our lock
			e.lastUsed = time.Now()
			return e
		}
		e.mu.Unlock()
	}
}

// sweepLocked forgets entries idle for longer than the expiry.
func (p *producers) sweepLocked(now time.Time) {
	for k, e := range p.m {
		if e.mu.TryLock() {
			if now.Sub(e.lastUsed) > p.expiry {
				delete(p.m, k)
			}
			e.mu.Unlock()
		}
	}
}

// load folds runs (oldest first per key) into the state.
func (p *producers) load(runs []ProducerRun) {
	for _, r := range runs {
		e := p.lock(producerKey{r.Stream, r.Partition, r.ProducerID})
		e.add(r)
		e.mu.Unlock()
		p.bind(r.ProducerID, r.Principal)
	}
}

// add records an appended run.
func (e *producerEntry) add(r ProducerRun) {
	switch {
	case !e.known || r.ProducerEpoch > e.epoch:
		e.known, e.epoch, e.runs = true, r.ProducerEpoch, e.runs[:0]
	case r.ProducerEpoch < e.epoch:
		return
	}
	e.lastSeq = r.LastSeq
	e.runs = append(e.runs, r)
	if len(e.runs) > dedupWindow {
		e.runs = append(e.runs[:0], e.runs[len(e.runs)-dedupWindow:]...)
	}
}

// check decides what to do with a batch of sequences [first, last] from
// epoch: append it (code 0, dup false), answer it as a duplicate written at
// offset (dup true), or refuse it with a Kafka error code.
func (e *producerEntry) check(epoch int16, first, last int32) (offset int64, dup bool, code int16) {
	if !e.known {
		return 0, false, 0
	}
	switch {
	case epoch < e.epoch:
		return 0, false, kafka.CodeInvalidProducerEpoch
	case epoch > e.epoch:
		if first != 0 {
			return 0, false, kafka.CodeOutOfOrderSequence
		}
		return 0, false, 0
	}
	for i := len(e.runs) - 1; i >= 0; i-- {
		r := e.runs[i]
		span := kafka.SeqDelta(r.FirstSeq, r.LastSeq)
		d1, d2 := kafka.SeqDelta(r.FirstSeq, first), kafka.SeqDelta(r.FirstSeq, last)
		if d1 <= span && d2 <= span && d1 <= d2 {
			return r.FirstOffset + int64(d1), true, 0
		}
	}
	if first != kafka.NextSeq(e.lastSeq) {
		return 0, false, kafka.CodeOutOfOrderSequence
	}
	return 0, false, 0
}
