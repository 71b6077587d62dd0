package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The applier: journaled groups go into bbolt off the acknowledgement
// path, many groups to one transaction (see the package doc, "Journal").

// jseqKey holds, in the meta bucket, the sequence number of the last
// journal record whose writes the bbolt file holds (8 bytes, big
// endian); like formatKey it cannot be a partition key.
var jseqKey = []byte("\x00jseq")

const (
	// applyEvery is how long the applier lets journaled groups gather
	// before it commits them, unless applyBytes of them wait or a
	// writer needs bbolt to hold them (drain).
	applyEvery = 5 * time.Millisecond
	applyBytes = 8 << 20
	// maxPending bounds the journaled bytes bbolt does not hold yet:
	// beyond it the committer waits for the applier.
	maxPending = 64 << 20
	// journalMaxGroup is the payload size from which a group goes to
	// bbolt directly (fastGroup).
	journalMaxGroup = 1 << 20
)

// errApplyPaused is a drain's error while the applier is held (tests).
var errApplyPaused = errors.New("wal: the applier is paused")

// jgroup is a journaled group waiting for bbolt.
type jgroup struct {
	seq uint64
	rec []byte // the sealed journal record
}

// pendChunk is a chunk of a journaled group bbolt does not hold yet.
type pendChunk struct {
	seq    uint64
	first  int64
	key, v []byte // alias the group's journal record
}

// pendPart is a partition's share of the journaled groups bbolt does not
// hold yet: its state after the last of them and their chunks in offset
// order.
type pendPart struct {
	seq    uint64 // the last group that wrote the partition
	st     partState
	chunks []pendChunk
}

// applyState is the applier's and the overlay's state (embedded in WAL).
type applyState struct {
	amu      sync.Mutex
	acond    *sync.Cond // signalled when applied, aerr or the queue change
	aq       []jgroup   // journaled, not yet in bbolt
	aqBytes  int
	jseq     uint64 // last journaled (committer; read by drains under amu)
	applied  uint64 // last that bbolt holds durably
	aerr     error  // the applier's commit failed: it stops
	aclosing bool
	apaused  bool // tests: hold every group (a crash between journal and bbolt)
	aurgent  bool // a drain waits
	aidle    bool // the applier sleeps until kicked
	acrashed bool // tests: a simulated crash, nothing more reaches bbolt
	applies  int64
	akick    chan struct{}
	adone    chan struct{}
	pending  map[pkey]*pendPart // under amu
	journal  *journal           // committer only
	rec      []byte             // committer only: the record being built
	recCap   int
}

// pendingOf returns a snapshot of pk's pending chunks and state (nil if
// bbolt holds all of pk's acknowledged records). Taken before the read
// transaction begins, it covers every group the transaction lacks.
func (w *WAL) pendingOf(pk pkey) *pendPart {
	w.amu.Lock()
	defer w.amu.Unlock()
	p := w.pending[pk]
	if p == nil {
		return nil
	}
	c := *p
	c.chunks = p.chunks[:len(p.chunks):len(p.chunks)]
	return &c
}

// journaled hands a journaled group to the applier and its chunks to the
// overlay; called by the committer before the group's outcomes are
// reported, so that readers see its records once they are acknowledged.
func (w *WAL) journaled(g *group, seq uint64, rec []byte) {
	w.amu.Lock()
	defer w.amu.Unlock()
	w.jseq = seq
	w.aq = append(w.aq, jgroup{seq: seq, rec: rec})
	w.aqBytes += len(rec)
	for pk, wk := range g.parts {
		if !wk.dirty {
			continue
		}
		p := w.pending[pk]
		if p == nil {
			p = &pendPart{}
			w.pending[pk] = p
		}
		p.seq, p.st = seq, wk.st
		for _, c := range wk.jput {
			k := rec[c.key : c.key+8 : c.key+8]
			p.chunks = append(p.chunks, pendChunk{seq: seq, first: int64(be.Uint64(k)), key: k, v: rec[c.val:c.end:c.end]})
		}
	}
	if w.aidle || w.aqBytes >= applyBytes {
		w.kickApplier()
	}
}

func (w *WAL) kickApplier() {
	select {
	case w.akick <- struct{}{}:
	default:
	}
}

// drainApplier waits until bbolt holds every journaled group (committer,
// before a group that reads or deletes in bbolt).
func (w *WAL) drainApplier() error {
	w.amu.Lock()
	defer w.amu.Unlock()
	for w.applied < w.jseq && w.aerr == nil {
		if w.apaused || w.acrashed {
			return errApplyPaused
		}
		w.aurgent = true
		w.kickApplier()
		w.acond.Wait()
	}
	return w.aerr
}

// throttle waits while too many journaled bytes wait for bbolt.
func (w *WAL) throttle() {
	w.amu.Lock()
	defer w.amu.Unlock()
	for w.aqBytes >= maxPending && w.aerr == nil && !w.apaused && !w.acrashed {
		w.aurgent = true
		w.kickApplier()
		w.acond.Wait()
	}
}

// applier commits journaled groups to bbolt until closed and drained.
// It lets groups gather for applyEvery after its last commit, unless a
// drain waits, applyBytes wait or the WAL closes.
func (w *WAL) applier() {
	defer close(w.adone)
	var last time.Time
	for {
		w.amu.Lock()
		if w.aerr != nil || w.acrashed || (w.aclosing && (len(w.aq) == 0 || w.apaused)) {
			w.amu.Unlock()
			return
		}
		if len(w.aq) == 0 || w.apaused {
			w.aidle = true
			w.amu.Unlock()
			<-w.akick
			continue
		}
		w.aidle = false
		urgent := w.aurgent || w.aclosing || w.aqBytes >= applyBytes
		if wait := time.Until(last.Add(applyEvery)); !urgent && wait > 0 {
			w.amu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-w.akick:
			}
			t.Stop()
			w.amu.Lock()
			if !w.aurgent && !w.aclosing && w.aqBytes < applyBytes && time.Until(last.Add(applyEvery)) > 0 {
				w.amu.Unlock()
				continue
			}
		}
		if w.apaused || w.acrashed {
			w.amu.Unlock()
			continue
		}
		batch := w.aq
		w.aq = nil
		w.aurgent = false
		w.amu.Unlock()

		err := w.db.Update(func(tx *bolt.Tx) error {
			for _, jg := range batch {
				if err := applyRecord(tx, jg.rec[journalHeader:]); err != nil {
					return fmt.Errorf("journal record %d: %w", jg.seq, err)
				}
			}
			return tx.Bucket(metaBucket).Put(jseqKey, be.AppendUint64(nil, batch[len(batch)-1].seq))
		})
		last = time.Now()
		w.amu.Lock()
		if err != nil {
			w.aerr = fmt.Errorf("%w: applying the journal to bbolt: %v", ErrBroken, err)
			w.aq = append(batch, w.aq...)
			w.acond.Broadcast()
			w.amu.Unlock()
			w.breakDown(err)
			return
		}
		seq := batch[len(batch)-1].seq
		w.applied = seq
		n := 0
		for _, jg := range batch {
			n += len(jg.rec)
		}
		w.aqBytes -= n
		for pk, p := range w.pending {
			if p.seq <= seq {
				delete(w.pending, pk)
				continue
			}
			k := 0
			for k < len(p.chunks) && p.chunks[k].seq <= seq {
				k++
			}
			if k > 0 {
				p.chunks = append([]pendChunk(nil), p.chunks[k:]...)
			}
		}
		w.applies++
		w.acond.Broadcast()
		w.amu.Unlock()
	}
}

// stopApplier lets the applier put what is journaled into bbolt (crash:
// not) and waits for it to end.
func (w *WAL) stopApplier(crash bool) {
	w.amu.Lock()
	w.aclosing = true
	w.acrashed = w.acrashed || crash
	w.amu.Unlock()
	w.kickApplier()
	<-w.adone
}

// applyRecord applies a journal record's mutations in tx.
func applyRecord(tx *bolt.Tx, payload []byte) error {
	var b *bolt.Bucket
	var bname []byte
	return eachMutation(payload, func(m mutation) error {
		if b == nil || !bytes.Equal(bname, m.bucket) {
			var err error
			if b, err = tx.CreateBucketIfNotExists(m.bucket); err != nil {
				return fmt.Errorf("bucket %q: %w", m.bucket, err)
			}
			if m.bucket[0] == 'd' {
				b.FillPercent = 1.0 // data: keys only ever grow
			}
			bname = m.bucket
		}
		if m.create {
			return nil
		}
		return b.Put(m.key, m.val)
	})
}

// replayJournal applies the journal's records past bbolt's jseq (a
// crash after they were synced and before bbolt held them) in one
// transaction and returns the last sequence number bbolt now holds.
func (w *WAL) replayJournal() (uint64, error) {
	var after uint64
	if err := w.db.View(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(metaBucket); meta != nil {
			if v := meta.Get(jseqKey); len(v) == 8 {
				after = be.Uint64(v)
			} else if v != nil {
				return fmt.Errorf("%w: journal sequence of %d bytes", ErrCorrupt, len(v))
			}
		}
		return nil
	}); err != nil {
		return 0, err
	}
	recs, last, torn, err := readJournal(w.opts.Path, after)
	if err != nil {
		return 0, fmt.Errorf("journal: %w", err)
	}
	if torn {
		w.log.Debug("wal journal: replay ended at a torn or stale record", "last", last)
	}
	if len(recs) == 0 {
		return after, nil
	}
	err = w.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if err := checkFormat(meta); err != nil {
			return err
		}
		for _, rec := range recs {
			if err := applyRecord(tx, rec[journalHeader:]); err != nil {
				return fmt.Errorf("journal record %d: %w", binary.LittleEndian.Uint64(rec[8:]), err)
			}
		}
		return meta.Put(jseqKey, be.AppendUint64(nil, last))
	})
	if err != nil {
		return 0, fmt.Errorf("journal replay: %w", err)
	}
	w.log.Info("wal journal replayed", "records", len(recs), "from", after+1, "to", last)
	return last, nil
}

// jref locates a chunk put in the record being built.
type jref struct{ key, val, end int }

// put records a write of the group being applied: into its transaction
// (a group that reads or deletes), or into the journal record.
func (w *WAL) put(g *group, bucket, key, val []byte) error {
	if g.tx != nil {
		b, err := g.tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return b.Put(key, val)
	}
	w.rec = appendPut(w.rec, bucket, key, val)
	return nil
}

// putChunk is put of a chunk of wk.
func (w *WAL) putChunk(g *group, wk *work, key, val []byte) error {
	if g.tx != nil {
		b, err := w.bucket(g, wk)
		if err != nil {
			return err
		}
		return b.Put(key, val)
	}
	w.rec = appendPut(w.rec, dataName(wk.key), key, nil)
	w.rec = w.rec[:len(w.rec)-1] // the value's length, then the value
	w.rec = binary.AppendUvarint(w.rec, uint64(len(val)))
	vstart := len(w.rec)
	w.rec = append(w.rec, val...)
	wk.jput = append(wk.jput, jref{key: vstart - uvarintLen(uint64(len(val))) - len(key), val: vstart, end: len(w.rec)})
	return nil
}

// errNeedsTx is an internal error: a journaled group reached a write that
// needs a transaction (fastGroup let an op through that it must not).
var errNeedsTx = errors.New("wal: internal error: a journaled group needs a transaction")
