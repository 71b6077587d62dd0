package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tributary-io/tributary"
)

var be = binary.BigEndian

type opKind uint8

const (
	opAppend opKind = iota
	opAppendAt
	opRelease
	opEnsure
	opDrop
	opVerbatim
	opReadmit
	opSeal
)

// op states: an Append whose context ends may cancel its op only while it is
// still pending; once the committer has taken it, the outcome is reported.
const (
	opPending int32 = iota
	opTaken
	opCanceled
)

// op is one queued write.
type op struct {
	kind  opKind
	recs  []*tributary.Record // opAppend, opAppendAt
	batch *Batch              // opAppend of a Kafka record batch (batch.go), recs nil
	pk    pkey                // opRelease, opEnsure, opDrop, opReadmit (From), opSeal
	n     int64               // upTo, minNext, epoch bound of a drop, floor of a readmit or seal
	done  func(error)
	state atomic.Int32
	// count is set by the committer before done is called: records skipped
	// by an opAppendAt, records dropped by an opDrop (-1: kept), -1 for
	// an opSeal that kept the partition.
	count int64
	rm    *Readmit    // opReadmit (readmit.go)
	rres  Readmission // opReadmit: its outcome
	// noBudget: an opAppend of records already accepted (a readmit's),
	// not checked against the budget.
	noBudget bool
	verb     *Verbatim      // opVerbatim (verbatim.go)
	vres     VerbatimResult // opVerbatim: its outcome
	// after is the op this one follows (AppendAsyncAfter, chain.go);
	// failed is set as soon as the committer refuses or fails this op.
	after  *op
	failed atomic.Bool
}

// work is a partition's state while a group is being applied.
type work struct {
	pk      pkey
	key     []byte // encoded pkey
	st      partState
	b       *bolt.Bucket
	dirty   bool
	existed bool // known before this group

	// Entries appended in this group and not yet written as chunks: their
	// offsets are [st.next-pendOffs, st.next), their bytes arena spans.
	pend      []span
	pendBytes int
	put       [][]byte // chunk values put in this group, in offset order (for the Tap)
	putFirst  int64    // offset of put's first record
	pendOffs  int64
	jput      []jref // chunks put in the journal record (a journaled group)
	created   bool   // a journaled group: the data bucket's creation is in the record
}

// span is an entry's encoding in the committer's arena: a record (n 1)
// or a batch entry (batch true) covering n offsets, whose arena bytes are
// the entry's header and tail its record batch (the caller's Batch.Records,
// which the WAL owns until the group commits: copied once, into the chunk).
type span struct {
	start, end int
	n          int
	batch      bool
	tail       []byte
}

// size is the entry's encoded size.
func (sp *span) size() int { return sp.end - sp.start + len(sp.tail) }

// group is the state of one transaction being built.
type group struct {
	tx      *bolt.Tx // nil: a journaled group (apply.go)
	parts   map[pkey]*work
	dropped map[pkey]bool  // partitions dropped in this group (a later op may create them anew)
	floors  map[pkey]int64 // seals set in this group (readmit.go)
	bytes   int64          // total unreleased bytes, tentatively
	recs    int64
	added   int64 // records appended

	dirty      bool  // anything to write
	rejections int64 // ops refused for the budget
}

// committer is the single writer: it drains the queue into one transaction
// per round until the WAL is closed and the queue is empty.
func (w *WAL) committer() {
	defer close(w.done)
	gr := &w.grouper
	for {
		w.gather(gr)
		w.mu.Lock()
		ops := w.queue
		w.queue = nil
		closed := w.closed
		w.mu.Unlock()
		if len(ops) > 0 {
			start := time.Now()
			ops, releases := w.deferReleases(ops)
			queued := w.commit(ops)
			dur := time.Since(start)
			if len(releases) > 0 {
				w.commit(releases)
			}
			gr.ended(len(ops), queued, dur)
			continue
		}
		if closed {
			return
		}
		<-w.wake
	}
}

// deferReleases takes the releases out of a group that also appends, to
// be committed in a transaction of their own right after it: deleting
// released chunks (and freeing their pages) then never lengthens the
// commit that acknowledgements wait for.
//
// Moved after the group, a release must release exactly what it would
// have in its place: it clamps upTo to the partition's next offset, which
// after the group counts the appends queued before it — and also those
// queued after it. So a release followed in the group by an append to
// the same partition stays where it is. Ensures and drops release
// everything below their offset themselves, so a release moved after
// them is a no-op, as it would be before them; a release of a partition
// unknown by then is a no-op either way.
func (w *WAL) deferReleases(ops []*op) (rest, releases []*op) {
	appends := false
	for _, o := range ops {
		if o.kind == opAppend || o.kind == opAppendAt || o.kind == opVerbatim || o.kind == opReadmit {
			appends = true
			break
		}
	}
	if !appends {
		return ops, nil
	}
	later := map[pkey]bool{} // partitions appended to after position i
	keep := make([]bool, len(ops))
	n := 0
	for i := len(ops) - 1; i >= 0; i-- {
		o := ops[i]
		switch o.kind {
		case opAppend, opAppendAt:
			for _, r := range o.recs {
				later[pkey{r.Stream, r.Partition}] = true
			}
		case opReadmit:
			// It moves records out of From into To: a release of
			// either queued before it stays before it.
			later[o.pk] = true
			later[pkey{o.pk.stream, o.rm.To}] = true
		case opVerbatim:
			later[o.pk] = true
			if o.batch != nil {
				later[pkey{o.batch.Stream, o.batch.Partition}] = true
			}
		case opRelease:
			if !later[o.pk] {
				keep[i] = true
				n++
			}
		}
	}
	if n == 0 {
		return ops, nil
	}
	rest = make([]*op, 0, len(ops)-n)
	releases = make([]*op, 0, n)
	for i, o := range ops {
		if keep[i] {
			releases = append(releases, o)
		} else {
			rest = append(rest, o)
		}
	}
	return rest, releases
}

// gather holds the next group back until the writers of the last one are
// back (see grouper), or until gr's wait has passed since the last commit
// ended. It never waits for writers already queued, and a lone writer
// (target 1) never waits at all: its own arrival is the target.
func (w *WAL) gather(gr *grouper) {
	target, wait := gr.target()
	if target <= 0 {
		return
	}
	deadline := gr.end.Add(wait)
	for {
		w.mu.Lock()
		n, closed := len(w.queue), w.closed
		w.mu.Unlock()
		if n == 0 || closed {
			return // nothing to commit yet: the committer sleeps on wake
		}
		if n >= target {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			gr.late++
			return
		}
		t := time.NewTimer(left)
		select {
		case <-w.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// commit applies ops in one transaction and reports each op's outcome. It
// returns how many ops were queued when the transaction ended, before the
// outcomes were reported (after, the queue also holds the ops of writers
// that came back at once).
func (w *WAL) commit(ops []*op) (queued int) {
	start := time.Now()
	live := ops[:0]
	for _, o := range ops {
		if o.state.CompareAndSwap(opPending, opTaken) {
			live = append(live, o)
		}
	}
	if len(live) == 0 {
		return 0
	}
	results := make([]error, len(live))
	fast := w.fastGroup(live)
	var err error
	if fast {
		w.throttle()
	} else {
		err = w.drainApplier()
	}
	var g *group
	var rejections int64
	if err == nil {
		g, rejections, err = w.apply(live, results, fast)
	}
	if err != nil {
		if w.tapped {
			w.breakDown(err)
		}
		w.log.Error("wal commit failed", "ops", len(live), "err", err)
		w.mu.Lock()
		w.stats.CommitErrors++
		w.stats.Ops += int64(len(live))
		queued = len(w.queue)
		w.mu.Unlock()
		for _, o := range live {
			o.failed.Store(true)
			o.done(err)
		}
		return queued
	}
	committed := g != nil
	w.mu.Lock()
	if committed {
		for pk := range g.dropped {
			delete(w.parts, pk)
		}
		for pk, f := range g.floors {
			w.floors[pk] = f
		}
		for pk, wk := range g.parts {
			if wk.dirty {
				st := wk.st
				w.parts[pk] = &st
			}
		}
		w.bytes = g.bytes
		w.recs = g.recs
		w.stats.Commits++
		if !w.opts.NoSync {
			w.stats.Fsyncs++
		}
		w.stats.AppendedRecords += g.added
		w.stats.LastCommitDuration = time.Since(start)
		w.stats.LastCommitOps = len(live)
		w.stats.MaxCommitOps = max(w.stats.MaxCommitOps, len(live))
	}
	w.stats.Ops += int64(len(live))
	w.stats.BudgetRejections += rejections
	queued = len(w.queue)
	w.mu.Unlock()
	if committed {
		w.metrics.observe(time.Since(start), len(live))
	}
	if committed && g.added > 0 {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	for i, o := range live {
		o.done(results[i])
	}
	return queued
}

// apply runs ops in one transaction, filling results with per-op errors. It
// returns the committed group (nil if nothing needed writing) or a
// transaction error, in which case nothing was written.
func (w *WAL) apply(ops []*op, results []error, journaled bool) (*group, int64, error) {
	if journaled {
		return w.applyJournaled(ops, results)
	}
	tx, err := w.db.Begin(true)
	if err != nil {
		return nil, 0, fmt.Errorf("begin: %w", err)
	}
	defer w.releaseArena()
	g := &group{tx: tx, parts: make(map[pkey]*work)}
	if err := w.applyOps(g, ops, results); err != nil {
		tx.Rollback()
		return nil, 0, err
	}
	if !g.dirty {
		tx.Rollback()
		return nil, g.rejections, nil
	}
	w.tapped = false
	w.tapGroup(g)
	if err := tx.Commit(); err != nil {
		return nil, 0, fmt.Errorf("commit: %w", err)
	}
	return g, g.rejections, nil
}

// applyJournaled is apply for a group without transaction: its writes
// go into one journal record, written and synced before apply returns,
// and to the applier, which puts them into bbolt later (apply.go).
func (w *WAL) applyJournaled(ops []*op, results []error) (*group, int64, error) {
	defer w.releaseArena()
	g := &group{parts: make(map[pkey]*work)}
	w.rec = beginRecord(make([]byte, 0, max(4096, w.recCap+w.recCap/4)))
	if err := w.applyOps(g, ops, results); err != nil {
		return nil, 0, err
	}
	if !g.dirty {
		return nil, g.rejections, nil
	}
	w.tapped = false
	w.tapGroup(g)
	seq := w.jseq + 1
	sealRecord(w.rec, seq)
	w.amu.Lock()
	applied := w.applied
	w.amu.Unlock()
	if err := w.journal.write(w.rec, seq, applied); err != nil {
		// What is on the journal's tail is unknown now: nothing may be
		// appended after it in this incarnation.
		w.breakDown(err)
		return nil, 0, err
	}
	w.recCap = len(w.rec)
	w.journaled(g, seq, w.rec)
	w.rec = nil
	return g, g.rejections, nil
}

// fastGroup tells whether ops only append (records, batches, verbatim
// chunks of the partition's incarnation), so that the group needs no
// read of bbolt and goes to the journal, and are smaller than
// journalMaxGroup: a larger group (a Kafka producer's flood) is
// committed to bbolt at once, whose two syncs it amortizes, rather than
// written twice, to the journal and then to bbolt.
func (w *WAL) fastGroup(ops []*op) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	size := 0
	for _, o := range ops {
		switch o.kind {
		case opAppend, opAppendAt:
			if o.noBudget {
				return false
			}
			if o.batch != nil {
				size += len(o.batch.Records)
			}
			for _, r := range o.recs {
				size += len(r.Value) + len(r.Key)
			}
		case opVerbatim:
			for _, c := range o.verb.Chunks {
				size += len(c)
			}
			if inc := o.verb.Incarnation; inc > 0 {
				st := w.parts[o.pk]
				if st == nil || inc > st.tag {
					return false // its tag changes, which may truncate
				}
			}
		default:
			return false
		}
	}
	return size < journalMaxGroup
}

// applyOps applies ops to g, filling results with per-op errors; an error
// is the group's (nothing of it may be written).
func (w *WAL) applyOps(g *group, ops []*op, results []error) error {
	var err error
	w.mu.Lock()
	g.bytes, g.recs = w.bytes, w.recs
	w.mu.Unlock()
	for i, o := range ops {
		var opErr error
		switch o.kind {
		case opAppend, opAppendAt:
			if o.batch != nil {
				opErr, err = w.applyBatch(g, o)
			} else {
				opErr, err = w.applyAppend(g, o)
			}
		case opRelease:
			err = w.applyRelease(g, o)
		case opEnsure:
			err = w.applyEnsure(g, o)
		case opDrop:
			err = w.applyDrop(g, o)
		case opVerbatim:
			opErr, err = w.applyVerbatim(g, o)
		case opReadmit:
			opErr, err = w.applyReadmit(g, o)
		case opSeal:
			err = w.applySeal(g, o)
		}
		if err != nil {
			return err
		}
		if errors.Is(opErr, ErrBudgetExceeded) {
			g.rejections++
		}
		if opErr != nil {
			o.failed.Store(true) // before a later op of the group that follows it is applied
		}
		results[i] = opErr
	}
	g.dirty = len(g.dropped) > 0 || len(g.floors) > 0
	for _, wk := range g.parts {
		if !wk.dirty {
			continue
		}
		if err := w.flush(g, wk); err != nil {
			return err
		}
		g.dirty = true
		if _, err := w.bucket(g, wk); err != nil {
			return err
		}
		if err := w.put(g, metaBucket, wk.key, encodeMeta(&wk.st)); err != nil {
			return fmt.Errorf("put meta: %w", err)
		}
	}
	return nil
}

// part returns the working state of pk, loading the committed state on first
// use; ok is false for an unknown partition (which gets a zero state).
func (w *WAL) part(g *group, pk pkey) *work {
	if wk, ok := g.parts[pk]; ok {
		return wk
	}
	wk := &work{pk: pk, key: encodePKey(pk)}
	w.mu.Lock()
	if st, ok := w.parts[pk]; ok && !g.dropped[pk] {
		wk.st = *st
		wk.existed = true
	}
	w.mu.Unlock()
	g.parts[pk] = wk
	return wk
}

// bucket returns wk's data bucket in g's transaction; in a journaled
// group (no transaction) it records the bucket's creation instead and
// returns nil.
func (w *WAL) bucket(g *group, wk *work) (*bolt.Bucket, error) {
	if g.tx == nil {
		if !wk.created {
			w.rec = appendCreate(w.rec, dataName(wk.key))
			wk.created = true
		}
		return nil, nil
	}
	if wk.b != nil {
		return wk.b, nil
	}
	b, err := g.tx.CreateBucketIfNotExists(dataName(wk.key))
	if err != nil {
		return nil, fmt.Errorf("create bucket %s/%d: %w", wk.pk.stream, wk.pk.partition, err)
	}
	b.FillPercent = 1.0 // keys only ever grow: pack pages full
	wk.b = b
	return b, nil
}

type undo struct {
	wk   *work
	st   partState
	pend int   // len(wk.pend)
	size int   // wk.pendBytes
	offs int64 // wk.pendOffs
}

// applyAppend encodes o's records with tentative offsets, checks the budget
// and adds them to their partitions' pending records, which flush writes as
// chunks. It returns a per-op error (the op is refused, nothing of it kept)
// or a transaction error.
//
// An opAppend assigns each record its partition's next offset. An
// opAppendAt keeps the records' offsets: a record below its partition's
// next offset is skipped (counted in o.count), one at it is appended, one
// above it refuses the whole op with a *GapError. A partition the op
// creates starts at the offset of its first record in the op.
func (w *WAL) applyAppend(g *group, o *op) (opErr, txErr error) {
	if predecessorFailed(o) {
		return ErrPredecessorFailed, nil
	}
	now := time.Now().UnixMicro()
	var undos []undo
	start := len(w.arena)
	var size, added int64
	refuse := func(err error) (error, error) {
		for _, u := range undos {
			u.wk.st = u.st
			u.wk.pend = u.wk.pend[:u.pend]
			u.wk.pendBytes = u.size
			u.wk.pendOffs = u.offs
		}
		w.arena = w.arena[:start]
		o.count = 0
		return err, nil
	}
	for _, r := range o.recs {
		wk := w.part(g, pkey{r.Stream, r.Partition})
		seen := false
		for _, u := range undos {
			if u.wk == wk {
				seen = true
				break
			}
		}
		if !seen {
			undos = append(undos, undo{wk, wk.st, len(wk.pend), wk.pendBytes, wk.pendOffs})
			if o.kind == opAppendAt && !wk.existed && !wk.dirty {
				wk.st.next, wk.st.released = r.Offset, r.Offset // created at its first record
			}
		}
		if err := w.sealed(g, wk.pk, r.Epoch); err != nil {
			return refuse(err)
		}
		if o.kind == opAppendAt {
			switch {
			case r.Offset < wk.st.next:
				o.count++
				continue
			case r.Offset > wk.st.next:
				return refuse(&GapError{Stream: r.Stream, Partition: r.Partition, Offset: r.Offset, Next: wk.st.next})
			}
		}
		if r.Timestamp == 0 {
			r.Timestamp = now
		}
		r.Offset = wk.st.next
		if wk.st.next == wk.st.released {
			wk.st.oldest = r.Timestamp
		}
		wk.st.next++
		wk.st.epoch = max(wk.st.epoch, r.Epoch)
		before := len(w.arena)
		w.arena = EncodeRecord(w.arena, r)
		n := len(w.arena) - before
		wk.pend = append(wk.pend, span{start: before, end: len(w.arena), n: 1})
		wk.pendBytes += n
		wk.pendOffs++
		wk.st.bytes += int64(n)
		size += int64(n)
		added++
	}
	if w.opts.MaxBytes > 0 && g.bytes+size > w.opts.MaxBytes && !o.noBudget {
		return refuse(fmt.Errorf("append %d records of %d bytes with %d of %d bytes used: %w",
			added, size, g.bytes, w.opts.MaxBytes, ErrBudgetExceeded))
	}
	for _, u := range undos {
		if u.wk.st == u.st {
			continue // every record of the partition skipped
		}
		u.wk.dirty = true
		if len(u.wk.pend) >= maxChunkRecords || u.wk.pendBytes >= maxChunkBytes {
			if err := w.flush(g, u.wk); err != nil {
				return nil, err
			}
		}
	}
	g.bytes += size
	g.recs += added
	g.added += added
	return nil, nil
}

// flush writes wk's pending records as chunks of at most maxChunkRecords
// records and maxChunkBytes record bytes (a larger record gets a chunk of
// its own).
func (w *WAL) flush(g *group, wk *work) error {
	if len(wk.pend) == 0 {
		return nil
	}
	first := wk.st.next - wk.pendOffs
	var recs, tails [][]byte
	var ns []int
	for i := 0; i < len(wk.pend); {
		recs, tails, ns = recs[:0], tails[:0], ns[:0]
		size, offs, v2 := 0, 0, false
		for j := i; j < len(wk.pend) && len(recs) < maxChunkRecords; j++ {
			sp := &wk.pend[j]
			if len(recs) > 0 && size+sp.size() > maxChunkBytes {
				break
			}
			recs = append(recs, w.arena[sp.start:sp.end])
			tails = append(tails, sp.tail)
			ns = append(ns, sp.n)
			size += sp.size()
			offs += sp.n
			v2 = v2 || sp.batch
		}
		// bbolt keeps value slices until commit: the chunk arena is not
		// reused before then (releaseArena runs after the transaction); if
		// it grows, earlier chunks keep the old array.
		start := len(w.chunks)
		if v2 {
			w.chunks = encodeChunkParts(w.chunks, first, recs, tails, ns)
		} else {
			w.chunks = encodeChunk(w.chunks, first, recs)
		}
		v := w.chunks[start:len(w.chunks):len(w.chunks)]
		if err := w.putChunk(g, wk, offsetKey(first), v); err != nil {
			return fmt.Errorf("put %s/%d@%d: %w", wk.pk.stream, wk.pk.partition, first, err)
		}
		wk.noteput(first, v)
		i += len(recs)
		first += int64(offs)
	}
	wk.pend = wk.pend[:0]
	wk.pendBytes = 0
	wk.pendOffs = 0
	return nil
}

// applyBatch is applyAppend for a Kafka record batch (batch.go): one
// entry covering the batch's records, at the partition's next offset.
func (w *WAL) applyBatch(g *group, o *op) (opErr, txErr error) {
	if predecessorFailed(o) {
		return ErrPredecessorFailed, nil
	}
	b := o.batch
	wk := w.part(g, pkey{b.Stream, b.Partition})
	if err := w.sealed(g, wk.pk, b.Epoch); err != nil {
		if !wk.existed && !wk.dirty {
			delete(g.parts, wk.pk)
		}
		return err, nil
	}
	if b.Timestamp == 0 {
		b.Timestamp = time.Now().UnixMicro()
	}
	b.Offset = wk.st.next
	n := b.count()
	start := len(w.arena)
	w.arena = appendBatchHeader(w.arena, b)
	size := int64(len(w.arena) - start + len(b.Records))
	if w.opts.MaxBytes > 0 && g.bytes+size > w.opts.MaxBytes {
		w.arena = w.arena[:start]
		return fmt.Errorf("append a batch of %d records of %d bytes with %d of %d bytes used: %w",
			n, size, g.bytes, w.opts.MaxBytes, ErrBudgetExceeded), nil
	}
	if wk.st.next == wk.st.released {
		wk.st.oldest = b.Timestamp
	}
	wk.st.next += int64(n)
	wk.st.epoch = max(wk.st.epoch, b.Epoch)
	wk.st.bytes += size
	be.PutUint64(b.Records, uint64(b.Offset)) // the CRC-32C does not cover it
	wk.pend = append(wk.pend, span{start: start, end: len(w.arena), n: n, batch: true, tail: b.Records})
	wk.pendBytes += int(size)
	wk.pendOffs += int64(n)
	wk.dirty = true
	if len(wk.pend) >= maxChunkRecords || wk.pendBytes >= maxChunkBytes {
		if err := w.flush(g, wk); err != nil {
			return nil, err
		}
	}
	g.bytes += size
	g.recs += int64(n)
	g.added += int64(n)
	return nil, nil
}

// releaseArena forgets the encoding buffer after a transaction; a buffer
// that grew very large is dropped rather than kept.
func (w *WAL) releaseArena() {
	if cap(w.arena) > 16<<20 {
		w.arena = nil
	}
	w.arena = w.arena[:0]
	if cap(w.chunks) > 16<<20 {
		w.chunks = nil
	}
	w.chunks = w.chunks[:0]
}

func (w *WAL) applyRelease(g *group, o *op) error {
	wk := w.part(g, o.pk)
	if !wk.existed && !wk.dirty {
		delete(g.parts, o.pk) // unknown partition: nothing to release
		return nil
	}
	upTo := min(o.n, wk.st.next)
	if upTo <= wk.st.released {
		return nil
	}
	if o.n > wk.st.next {
		w.log.Warn("wal release beyond next offset", "stream", o.pk.stream, "partition", o.pk.partition, "up_to", o.n, "next", wk.st.next)
	}
	return w.deleteRange(g, wk, upTo)
}

// deleteRange releases records [released, upTo) of wk: it deletes the
// chunks that end at or before upTo and updates wk's state. A chunk that
// straddles upTo stays; its records below upTo are released all the same
// (readers never return offsets below Released), and the bytes freed are
// the sizes of exactly the records released, taken from the chunk headers.
func (w *WAL) deleteRange(g *group, wk *work, upTo int64) error {
	if g.tx == nil {
		return errNeedsTx
	}
	if err := w.flush(g, wk); err != nil {
		return err
	}
	b, err := w.bucket(g, wk)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		return fmt.Errorf("release %s/%d up to %d: %w", wk.pk.stream, wk.pk.partition, upTo, err)
	}
	var freed int64
	var doomed [][]byte
	var oldest int64
	haveOldest := false
	pos := wk.st.released
	c := b.Cursor()
	for k, v := c.First(); k != nil && pos < upTo; k, v = c.Next() {
		ch, err := decodeChunkAt(k, v)
		if err != nil {
			return fail(err)
		}
		if ch.first > pos || ch.end() <= pos {
			return fail(fmt.Errorf("%w: chunk [%d, %d) where offset %d was expected", ErrCorrupt, ch.first, ch.end(), pos))
		}
		stop := min(ch.end(), upTo)
		freed += ch.size(int(pos-ch.first), int(stop-ch.first))
		pos = stop
		if ch.end() <= upTo {
			doomed = append(doomed, append([]byte(nil), k...))
		} else {
			if oldest, err = ch.timestampAt(upTo - ch.first); err != nil {
				return fail(err)
			}
			haveOldest = true
		}
	}
	if pos != upTo {
		return fail(fmt.Errorf("%w: records end at %d", ErrCorrupt, pos))
	}
	if upTo < wk.st.next && !haveOldest {
		// upTo is the first offset of a chunk: the oldest record starts it.
		k, v := c.Seek(offsetKey(upTo))
		ch, err := decodeChunkAt(k, v)
		if err != nil || ch.first != upTo {
			return fail(fmt.Errorf("%w: no chunk at offset %d (%v)", ErrCorrupt, upTo, err))
		}
		if oldest, err = ch.timestampAt(0); err != nil {
			return fail(err)
		}
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return fail(err)
		}
	}
	g.bytes -= freed
	g.recs -= upTo - wk.st.released
	wk.st.bytes -= freed
	wk.st.released = upTo
	wk.st.oldest = 0
	if upTo < wk.st.next {
		wk.st.oldest = oldest
	}
	wk.dirty = true
	return nil
}

func (w *WAL) applyEnsure(g *group, o *op) error {
	wk := w.part(g, o.pk)
	if !wk.existed && !wk.dirty {
		wk.dirty = true // a new partition is recorded even at offset 0
	}
	if o.n <= wk.st.next {
		return nil
	}
	if err := w.deleteRange(g, wk, wk.st.next); err != nil {
		return err
	}
	wk.st.next = o.n
	wk.st.released = o.n
	wk.dirty = true
	return nil
}

// applyDrop forgets a partition: its records, released or not, its data
// bucket and its meta entry, in the group's transaction.
func (w *WAL) applyDrop(g *group, o *op) error {
	wk := w.part(g, o.pk)
	delete(g.parts, o.pk)
	if !wk.existed && !wk.dirty {
		return nil // unknown partition
	}
	if wk.st.epoch >= o.n {
		g.parts[o.pk] = wk // kept (DropPartitionBelow)
		o.count = -1
		return nil
	}
	n, err := w.drop(g, wk)
	o.count = n
	return err
}

// drop deletes wk's partition in the group's transaction and returns how
// many unreleased records it held.
func (w *WAL) drop(g *group, wk *work) (int64, error) {
	pk := wk.pk
	if g.tx == nil {
		return 0, errNeedsTx
	}
	delete(g.parts, pk)
	if err := g.tx.DeleteBucket(dataName(wk.key)); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
		return 0, fmt.Errorf("drop %s/%d: %w", pk.stream, pk.partition, err)
	}
	if err := g.tx.Bucket(metaBucket).Delete(wk.key); err != nil {
		return 0, fmt.Errorf("drop %s/%d: %w", pk.stream, pk.partition, err)
	}
	n := wk.st.next - wk.st.released
	g.bytes -= wk.st.bytes
	g.recs -= n
	if g.dropped == nil {
		g.dropped = map[pkey]bool{}
	}
	g.dropped[pk] = true
	return n, nil
}

// recordTimestamp decodes the timestamp of an encoded record.
func recordTimestamp(v []byte) (int64, error) {
	r, err := DecodeRecord(v)
	if err != nil {
		return 0, err
	}
	return r.Timestamp, nil
}

// metaLen is the size of a meta entry: next, released, unreleased bytes
// and the highest epoch of any record ever appended. Entries written before
// epochs existed are 24 bytes long and read as epoch 0.
const (
	metaLen   = 32
	metaLenV0 = 24
)

func encodeMeta(st *partState) []byte {
	v := make([]byte, metaLen)
	be.PutUint64(v[0:], uint64(st.next))
	be.PutUint64(v[8:], uint64(st.released))
	be.PutUint64(v[16:], uint64(st.bytes))
	be.PutUint64(v[24:], uint64(st.epoch))
	return v
}

// decodeMeta decodes a meta entry (oldest is not stored).
func decodeMeta(v []byte) (partState, bool) {
	if len(v) != metaLen && len(v) != metaLenV0 {
		return partState{}, false
	}
	st := partState{next: int64(be.Uint64(v[0:])), released: int64(be.Uint64(v[8:])), bytes: int64(be.Uint64(v[16:]))}
	if len(v) == metaLen {
		st.epoch = int64(be.Uint64(v[24:]))
	}
	return st, true
}

func offsetKey(off int64) []byte {
	var k [8]byte
	be.PutUint64(k[:], uint64(off))
	return k[:]
}

func encodePKey(pk pkey) []byte {
	k := binary.AppendUvarint(nil, uint64(len(pk.stream)))
	k = append(k, pk.stream...)
	return be.AppendUint32(k, uint32(pk.partition))
}

func decodePKey(k []byte) (pkey, bool) {
	n, m := binary.Uvarint(k)
	if m <= 0 || n > uint64(len(k)-m) || uint64(len(k)-m)-n != 4 {
		return pkey{}, false
	}
	return pkey{stream: string(k[m : m+int(n)]), partition: int32(be.Uint32(k[m+int(n):]))}, true
}

func dataName(pkey []byte) []byte {
	return append([]byte("d"), pkey...)
}
