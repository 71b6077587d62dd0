package wal

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/tributary-io/tributary"
)

// Fenced partitions: re-admission and seals.
//
// When another node owns a partition of this WAL at a higher epoch, the
// partition's records are either already in the new owner's history (it
// copied them from its replica) or only here. ReadmitPartition settles
// that in ONE transaction, ordered with every other write: the records at
// offsets >= Start (only here) are appended, with new offsets, to a
// partition this node owns; the fenced partition is dropped; and the
// partition is sealed below the new owner's epoch. A crash leaves the old
// state (the fence is redone on restart) or the new one, never both or
// neither; an append that raced the fence is either moved by it or, once
// it is committed, refused.
//
// A seal (SealPartition, or ReadmitPartition's) is an epoch floor kept in
// the WAL's "floors" bucket after the partition is gone: an append of a
// record of an epoch below the floor is refused with ErrFenced instead of
// creating the partition anew at offset 0. Records of the floor's epoch
// or newer (this node owns the partition again) are appended as usual.

// ErrFenced refuses an append to a partition sealed at a higher epoch
// (another node owns it): nothing of the append was written. It wraps
// tributary.ErrFenced, so the front doors refuse with their "not the
// owner" code and the client retries into this node's own partition.
var ErrFenced = fmt.Errorf("wal: partition sealed: %w", tributary.ErrFenced)

// floorBucket maps a partition key to its seal: 8 bytes big-endian epoch.
var floorBucket = []byte("floors")

// Readmit describes a re-admission (ReadmitPartition).
type Readmit struct {
	Stream string
	// From is the fenced partition; Floor the epoch of its new owner:
	// nothing is done if From holds a record of Floor or newer (this node
	// owns it again), else From is dropped and sealed below Floor.
	From  int32
	Floor int64
	// Start is the first offset of the new owner's history (the table's
	// tributary.epoch_start.<From>): From's records at Start or above are
	// moved, those below it dropped.
	Start int64
	// To is a partition this node owns, at Epoch: the moved records get
	// its next offsets and Epoch; every other field is kept.
	To    int32
	Epoch int64
}

// Readmission is what ReadmitPartition did.
type Readmission struct {
	// Kept: From holds records of Floor or newer; nothing was changed.
	Kept bool
	// Moved records now at offsets [First, Next) of To; Dropped records
	// were below Start.
	Moved, Dropped int64
	First, Next    int64
}

// ReadmitPartition moves a fenced partition's records that only this
// node holds into a partition it owns, drops the rest and seals the
// fenced partition, in one transaction (see Readmit). Durable when it
// returns. A re-admitted record gets a new offset: it never reached the
// table at its old one, so no consumer saw it there. The move is not
// refused for the budget: the records are counted already, and the drop
// frees their old bytes in the same transaction (a Kafka batch entry,
// re-admitted as one record per offset, may take a little more).
//
// Deprecated: use Apply(ctx, Op{Kind: OpReadmit, Readmit: &rm}).
func (w *WAL) ReadmitPartition(rm Readmit) (Readmission, error) {
	r := w.Apply(context.Background(), Op{Kind: OpReadmit, Readmit: &rm})
	return r.Readmission, r.Err
}

// SealPartition refuses, from now on, appends of records of an epoch
// below floor to (stream, partition) with ErrFenced, unless the partition
// already holds a record of floor or newer (kept). Durable when it
// returns; the seal outlives DropPartition.
//
// Deprecated: use Apply(ctx, Op{Kind: OpSeal, Stream: …, Partition: …, Epoch: floor}).
func (w *WAL) SealPartition(stream string, partition int32, floor int64) (kept bool, err error) {
	r := w.Apply(context.Background(), Op{Kind: OpSeal, Stream: stream, Partition: partition, Epoch: floor})
	return r.Kept, r.Err
}

// Floor is the seal of (stream, partition): appends of records below
// epoch are refused; ok is false if it has none.
//
// Deprecated: use Partition's PartitionState.Floor.
func (w *WAL) Floor(stream string, partition int32) (epoch int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	epoch, ok = w.floors[pkey{stream, partition}]
	return epoch, ok
}

// floorOf is pk's seal as the group stands (committer only: the
// committer is the only writer of w.floors).
func (w *WAL) floorOf(g *group, pk pkey) int64 {
	if f, ok := g.floors[pk]; ok {
		return f
	}
	return w.floors[pk]
}

// sealed is the refusal of a record of epoch below pk's seal, or nil.
func (w *WAL) sealed(g *group, pk pkey, epoch int64) error {
	if len(w.floors) == 0 && len(g.floors) == 0 {
		return nil
	}
	if f := w.floorOf(g, pk); epoch < f {
		return fmt.Errorf("append to %s/%d at epoch %d: another node owns it from epoch %d: %w", pk.stream, pk.partition, epoch, f, ErrFenced)
	}
	return nil
}

// setFloor seals pk below floor in the group's transaction (a seal only
// rises).
func (w *WAL) setFloor(g *group, pk pkey, floor int64) error {
	if floor <= w.floorOf(g, pk) {
		return nil
	}
	if g.tx == nil {
		return errNeedsTx
	}
	b, err := g.tx.CreateBucketIfNotExists(floorBucket)
	if err != nil {
		return fmt.Errorf("floors: %w", err)
	}
	if err := b.Put(encodePKey(pk), be.AppendUint64(nil, uint64(floor))); err != nil {
		return fmt.Errorf("put floor %s/%d: %w", pk.stream, pk.partition, err)
	}
	if g.floors == nil {
		g.floors = map[pkey]int64{}
	}
	g.floors[pk] = floor
	return nil
}

// loadFloors reads the seals (recovery).
func (w *WAL) loadFloors(tx *bolt.Tx) error {
	b := tx.Bucket(floorBucket)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		pk, ok := decodePKey(k)
		if !ok || len(v) != 8 {
			return fmt.Errorf("%w: floor entry %x", ErrCorrupt, k)
		}
		w.floors[pk] = int64(be.Uint64(v))
		return nil
	})
}

// applySeal is SealPartition in the committer.
func (w *WAL) applySeal(g *group, o *op) error {
	wk := w.part(g, o.pk)
	if !wk.existed && !wk.dirty {
		delete(g.parts, o.pk)
	} else if wk.st.epoch >= o.n {
		o.count = -1
		return nil
	}
	return w.setFloor(g, o.pk, o.n)
}

// applyReadmit is ReadmitPartition in the committer: read From's records
// (those appended earlier in this group included), append those at Start
// or above to To, drop From and seal it. A refusal of the append (To
// sealed) leaves everything as it was.
func (w *WAL) applyReadmit(g *group, o *op) (opErr, txErr error) {
	rm := o.rm
	wk := w.part(g, o.pk)
	if !wk.existed && !wk.dirty {
		delete(g.parts, o.pk) // unknown: nothing to move, but sealed all the same
		return nil, w.setFloor(g, o.pk, rm.Floor)
	}
	if wk.st.epoch >= rm.Floor {
		o.rres.Kept = true
		return nil, nil
	}
	if g.tx == nil {
		return nil, errNeedsTx
	}
	if err := w.flush(g, wk); err != nil {
		return nil, err
	}
	var moved []*tributary.Record
	if from := max(wk.st.released, rm.Start); from < wk.st.next {
		b, err := w.bucket(g, wk)
		if err != nil {
			return nil, err
		}
		err = scanChunks(boltCursor(b), from, wk.st.next, 0, 0, func(rb []byte, e *batchEntry, pos int64, skip, n int) error {
			if e != nil {
				rs, err := e.records(skip, n)
				if err != nil {
					return fmt.Errorf("offset %d: %w", pos, err)
				}
				for _, r := range rs {
					moved = append(moved, cloneRecord(r))
				}
				return nil
			}
			r, err := DecodeRecord(rb)
			if err != nil {
				return fmt.Errorf("offset %d: %w", pos, err)
			}
			moved = append(moved, cloneRecord(r))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("readmit %s/%d: %w", rm.Stream, rm.From, err)
		}
	}
	if len(moved) > 0 {
		for _, r := range moved {
			r.Partition, r.Epoch, r.Offset = rm.To, rm.Epoch, 0
		}
		sub := &op{kind: opAppend, recs: moved, noBudget: true}
		if opErr, err := w.applyAppend(g, sub); opErr != nil || err != nil {
			return opErr, err
		}
		o.rres.Moved = int64(len(moved))
		o.rres.First, o.rres.Next = moved[0].Offset, moved[len(moved)-1].Offset+1
	}
	total := wk.st.next - wk.st.released
	if _, err := w.drop(g, wk); err != nil {
		return nil, err
	}
	o.rres.Dropped = total - o.rres.Moved
	return nil, w.setFloor(g, o.pk, rm.Floor)
}

// cloneRecord copies r so that nothing of it aliases the transaction's
// pages or the committer's buffers.
func cloneRecord(r *tributary.Record) *tributary.Record {
	c := *r
	c.Key = bytes.Clone(r.Key)
	c.Value = bytes.Clone(r.Value)
	if len(r.Headers) > 0 {
		c.Headers = make([]tributary.Header, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = tributary.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
	}
	return &c
}
