package produce

import (
	"slices"
	"sync"
	"time"

	"github.com/tributary-io/tributary"
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
// Pipelining: a producer has up to five batches of a partition in flight
// (on one connection, whose appends are queued in request order). The
// check is made under the entry's lock against the end of the sequences
// reserved by batches still being appended (pending), the batch's range
// is reserved and its append queued, chained to the producer's previous
// append (the Appender's Ticket) — then the lock is released; it
// is not held while the append waits for its fsync. When an append ends,
// settle records the run (success) or un-reserves: a refused batch
// un-reserves itself and every batch reserved after it, which the chain
// refuses as well (nothing of them is stored), so the producer's next
// expected sequence is the refused batch's first again and its resend is
// accepted, chained to nothing refused. A batch that duplicates one still
// in flight (a resend from another connection) gets a retriable error.

const dedupWindow = 5

type producerKey struct {
	stream    string
	partition int32
	pid       int64
}

type producerEntry struct {
	mu       sync.Mutex // held across check + reserve + queueing the append, and settle
	known    bool
	epoch    int16
	lastSeq  int32
	runs     []ProducerRun // last dedupWindow runs, oldest first
	lastUsed time.Time
	pending  []*pendingRun    // reserved, being appended, in queue order
	tail     tributary.Ticket // the producer's last queued append
}

// pendingRun is a batch whose sequences are reserved while it is appended.
type pendingRun struct {
	epoch       int16
	first, last int32
	ticket      tributary.Ticket
}

// reserve reserves r's sequences for an append about to be queued.
func (e *producerEntry) reserve(r ProducerRun) *pendingRun {
	p := &pendingRun{epoch: r.ProducerEpoch, first: r.FirstSeq, last: r.LastSeq}
	e.pending = append(e.pending, p)
	return p
}

// settle ends p's append: appended, its run r is recorded; refused, p
// and the reservations after it (refused by the chain) are dropped, and
// the producer's tail becomes the append before p.
func (e *producerEntry) settle(p *pendingRun, r ProducerRun, appended bool) {
	i := slices.Index(e.pending, p)
	if appended {
		if i >= 0 {
			e.pending = slices.Delete(e.pending, i, i+1)
		}
		e.add(r)
		return
	}
	if i < 0 {
		return // already dropped with an earlier refused reservation
	}
	clear(e.pending[i:])
	e.pending = e.pending[:i]
	e.tail = nil
	if i > 0 {
		e.tail = e.pending[i-1].ticket
	}
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
			if now.Sub(e.lastUsed) > p.expiry && len(e.pending) == 0 {
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
	if len(e.runs) == 0 || kafka.SeqDelta(e.lastSeq, r.LastSeq) < 1<<30 {
		e.lastSeq = r.LastSeq // (a run settled late, behind a later one, leaves it)
	}
	e.runs = append(e.runs, r)
	if len(e.runs) > dedupWindow {
		e.runs = append(e.runs[:0], e.runs[len(e.runs)-dedupWindow:]...)
	}
}

// check decides what to do with a batch of sequences [first, last] from
// epoch: append it (code 0, dup and inflight false), answer it as a
// duplicate written at offset (dup true), answer that it duplicates a
// batch still being appended (inflight true), or refuse it with a Kafka
// error code. A batch being appended counts as the last appended one.
func (e *producerEntry) check(epoch int16, first, last int32) (offset int64, dup, inflight bool, code int16) {
	known, curEpoch, curLast := e.known, e.epoch, e.lastSeq
	if n := len(e.pending); n > 0 {
		known, curEpoch, curLast = true, e.pending[n-1].epoch, e.pending[n-1].last
	}
	if !known {
		return 0, false, false, 0
	}
	switch {
	case epoch < curEpoch:
		return 0, false, false, kafka.CodeInvalidProducerEpoch
	case epoch > curEpoch:
		if first != 0 {
			return 0, false, false, kafka.CodeOutOfOrderSequence
		}
		return 0, false, false, 0
	}
	within := func(f, l int32) (int32, bool) {
		span := kafka.SeqDelta(f, l)
		d1, d2 := kafka.SeqDelta(f, first), kafka.SeqDelta(f, last)
		return d1, d1 <= span && d2 <= span && d1 <= d2
	}
	if e.known && epoch == e.epoch {
		for i := len(e.runs) - 1; i >= 0; i-- {
			r := e.runs[i]
			if d1, ok := within(r.FirstSeq, r.LastSeq); ok {
				return r.FirstOffset + int64(d1), true, false, 0
			}
		}
	}
	for _, p := range e.pending {
		if _, ok := within(p.first, p.last); ok && p.epoch == epoch {
			return 0, false, true, 0
		}
	}
	if first != kafka.NextSeq(curLast) {
		return 0, false, false, kafka.CodeOutOfOrderSequence
	}
	return 0, false, false, 0
}
