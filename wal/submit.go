package wal

import (
	"context"
	"fmt"

	"github.com/tributary-io/tributary"
)

// Two verbs take every write, as pebble's DB.Apply(batch, opts) does:
// Submit queues an Op and reports its Result once through Op.Done; Apply
// waits for it. Ops are applied in the order they are submitted, by one
// committer goroutine, many to a group commit (one journal write and
// fdatasync, see journal.go). Every Kind is durable when its Result is
// reported with a nil Err; on an error nothing of the op was written.

// Kind is what an Op writes.
type Kind uint8

const (
	// OpAppend makes Records durable and assigns each its Offset, densely
	// per (Stream, Partition) in slice order; a zero Timestamp is set to
	// time.Now().UnixMicro(). On an error their Offset and Timestamp may
	// have been changed. A budget that would be exceeded refuses it with
	// ErrBudgetExceeded.
	//
	// With Batch (and no Records) it stores a Kafka record batch as one
	// entry covering its records' consecutive offsets (batch.go); on
	// success Batch.Offset is the first record's offset.
	//
	// After, if set, names an append this one must follow (a producer's
	// consecutive batches: the second is meaningless without the first).
	// When this one is applied After's outcome is known: if it failed, was
	// refused or was canceled, this append is refused whole with
	// ErrPredecessorFailed — in the same group commit as well as in a
	// later one. A zero After (or one that succeeded) imposes nothing.
	OpAppend Kind = iota + 1
	// OpAppendAt stores Records whose Stream, Partition, Offset and Epoch
	// the partition's owner assigned (a replica storing the owner's
	// records, a node copying them after a takeover); every other field is
	// stored as given (a zero Timestamp is set to now). Per (Stream,
	// Partition), in slice order, a record's Offset is compared with the
	// partition's next offset (as left by everything committed or queued
	// before it, earlier records of the op included):
	//
	//   - below it: already stored (a resend): skipped, counted in
	//     Result.Skipped; its content is not compared;
	//   - equal: appended, and next moves on by one;
	//   - above it: a gap: the whole op is refused with a *GapError
	//     (errors.Is ErrGap) carrying the partition's next offset, from
	//     which the sender resends.
	//
	// A partition that does not exist (never created, or dropped) is
	// created at the Offset of its first record in the op, so a replica
	// can start anywhere (the table's high-water mark); OpEnsure moves an
	// existing empty partition forward instead of sending a gap. The
	// budget is checked as for OpAppend. Consecutive ranges of a partition
	// may be submitted back to back.
	OpAppendAt
	// OpVerbatim stores Verbatim's chunks (checksums checked, offsets
	// taken from their headers) at the end of its partition, as a
	// replica stores the owner's (verbatim.go, invariants 3 and 4): chunks
	// (or records of a chunk) below the partition's next offset are
	// skipped; a chunk that starts above it refuses the op with a
	// *GapError (any drop of invariant 4 is kept); the budget is checked
	// as for OpAppend; a partition that does not exist is created at the
	// first chunk's offset. Result.Verbatim says what it did.
	OpVerbatim
	// OpRelease deletes Stream/Partition's records with offsets below
	// Offset, freeing their budget. It is idempotent; an Offset beyond
	// Next is clamped to Next; an unknown partition is a no-op.
	OpRelease
	// OpEnsure moves Stream/Partition's next offset up to at least
	// Offset, creating the partition if needed: for a table's committed
	// high-water mark ahead of a fresh or lost WAL. When it moves Next
	// forward, the partition's unreleased records (all below Offset,
	// hence already in the table) are released.
	OpEnsure
	// OpDrop forgets Stream/Partition entirely if its Epoch (the highest
	// epoch of any record ever appended to it) is below Epoch
	// (math.MaxInt64: whatever it is): its unreleased records are deleted
	// without being uploaded (Result.Dropped counts them), its Next,
	// Released and Epoch are forgotten, and its budget is freed. It is for
	// a partition this node was fenced out of. It is decided in the
	// committer in order with every other write: a partition that
	// meanwhile received records of Epoch or newer (this node took it
	// over again) is kept, and Result.Kept reports it. A later OpAppend
	// starts the partition again at offset 0, a later OpAppendAt at its
	// first record's offset; an unknown partition is a no-op.
	OpDrop
	// OpSeal refuses, from now on, appends of records of an epoch below
	// Epoch to Stream/Partition with ErrFenced, unless the partition
	// already holds a record of Epoch or newer (Result.Kept). The seal
	// outlives OpDrop; PartitionState.Floor reports it.
	OpSeal
	// OpReadmit moves a fenced partition's records that only this node
	// holds into a partition it owns, drops the rest and seals the fenced
	// partition, in one transaction (see Readmit; Result.Readmission). A
	// re-admitted record gets a new offset: it never reached the table at
	// its old one, so no consumer saw it there. It is not refused for the
	// budget: the records are counted already, and the drop frees their
	// old bytes in the same transaction.
	OpReadmit
)

// Op is one write to the WAL. The WAL owns its Records, Batch, Verbatim
// and their bytes until the Result is reported.
type Op struct {
	Kind      Kind
	Records   []*tributary.Record // OpAppend, OpAppendAt
	Batch     *Batch              // OpAppend of a Kafka record batch (Records nil)
	Verbatim  *Verbatim           // OpVerbatim
	Readmit   *Readmit            // OpReadmit
	Stream    string              // OpRelease, OpEnsure, OpDrop, OpSeal
	Partition int32               // OpRelease, OpEnsure, OpDrop, OpSeal
	Offset    int64               // OpRelease: up to; OpEnsure: the least next offset
	Epoch     int64               // OpDrop: drop below it; OpSeal: the floor
	After     Ticket              // OpAppend: the append it follows
	// Done, for Submit, is called exactly once with the outcome: from
	// the committer (or from Submit's caller, before Submit returns, when
	// the op is refused at once). It must not block long.
	Done func(Result)
}

// Result is an Op's outcome. Err is nil once the op is durable; on an
// error nothing of the op was written.
type Result struct {
	Err         error
	Skipped     int64          // OpAppendAt: records already stored
	Dropped     int64          // OpDrop: unreleased records dropped
	Kept        bool           // OpDrop, OpSeal: the partition holds a record of Epoch or newer
	Verbatim    VerbatimResult // OpVerbatim
	Readmission Readmission    // OpReadmit
}

// Submit queues o and returns a Ticket naming it (for a later append's
// After); o.Done is called exactly once with its Result. Ops are applied
// in the order they are submitted, many to one group commit.
func (w *WAL) Submit(o Op) Ticket {
	in, err := w.build(&o)
	if in == nil {
		if o.Done != nil {
			o.Done(Result{Err: err})
		}
		return Ticket{}
	}
	done := o.Done
	if done == nil {
		done = func(Result) {}
	}
	in.done = func(err error) {
		if err != nil {
			in.failed.Store(true)
		}
		done(result(&o, in, err))
	}
	if err != nil {
		in.done(err)
		return Ticket{in}
	}
	if err := w.enqueue(in); err != nil {
		in.done(err)
	}
	return Ticket{in}
}

// Apply is Submit waiting for the Result. If ctx ends before the
// committer has taken the op, Apply returns ctx's error and the op is
// never applied; once taken, it waits for its outcome (one group's worth
// of time). o.Done is ignored.
func (w *WAL) Apply(ctx context.Context, o Op) Result {
	if err := ctx.Err(); err != nil {
		return Result{Err: err}
	}
	ch := make(chan Result, 1)
	o.Done = func(r Result) { ch <- r }
	t := w.Submit(o)
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		if t.o != nil && t.o.state.CompareAndSwap(opPending, opCanceled) {
			t.o.failed.Store(true)
			return Result{Err: ctx.Err()}
		}
		return <-ch
	}
}

// build checks o and returns its internal op; an error with a nil op
// refuses it before an op exists, one with an op refuses that op (so a
// Ticket names a failed append).
func (w *WAL) build(o *Op) (*op, error) {
	switch o.Kind {
	case OpAppend:
		in := &op{kind: opAppend, recs: o.Records, batch: o.Batch, after: o.After.o}
		if o.Batch != nil {
			if len(o.Records) > 0 {
				return in, fmt.Errorf("append: %w: both records and a batch", ErrInvalid)
			}
			if err := checkBatch(o.Batch); err != nil {
				return in, fmt.Errorf("append batch: %w", err)
			}
		}
		return in, nil
	case OpAppendAt:
		return &op{kind: opAppendAt, recs: o.Records}, nil
	case OpVerbatim:
		if o.Verbatim == nil {
			return nil, fmt.Errorf("append verbatim: %w: no chunks", ErrInvalid)
		}
		if err := checkVerbatim(o.Verbatim); err != nil {
			return nil, err
		}
		return &op{kind: opVerbatim, pk: pkey{o.Verbatim.Stream, o.Verbatim.Partition}, verb: o.Verbatim}, nil
	case OpRelease:
		return &op{kind: opRelease, pk: pkey{o.Stream, o.Partition}, n: o.Offset}, nil
	case OpEnsure:
		if err := checkStream(o.Stream); err != nil {
			return nil, fmt.Errorf("ensure partition: %w", err)
		}
		if o.Offset < 0 {
			return nil, fmt.Errorf("ensure partition %s/%d: %w: negative offset %d", o.Stream, o.Partition, ErrInvalid, o.Offset)
		}
		return &op{kind: opEnsure, pk: pkey{o.Stream, o.Partition}, n: o.Offset}, nil
	case OpDrop:
		if err := checkStream(o.Stream); err != nil {
			return nil, fmt.Errorf("drop partition: %w", err)
		}
		return &op{kind: opDrop, pk: pkey{o.Stream, o.Partition}, n: o.Epoch}, nil
	case OpSeal:
		if err := checkStream(o.Stream); err != nil {
			return nil, fmt.Errorf("seal partition: %w", err)
		}
		return &op{kind: opSeal, pk: pkey{o.Stream, o.Partition}, n: o.Epoch}, nil
	case OpReadmit:
		rm := o.Readmit
		if rm == nil {
			return nil, fmt.Errorf("readmit: %w: no Readmit", ErrInvalid)
		}
		if err := checkStream(rm.Stream); err != nil {
			return nil, fmt.Errorf("readmit: %w", err)
		}
		if rm.To == rm.From {
			return nil, fmt.Errorf("readmit %s/%d: %w: into itself", rm.Stream, rm.From, ErrInvalid)
		}
		return &op{kind: opReadmit, pk: pkey{rm.Stream, rm.From}, n: rm.Floor, rm: rm}, nil
	}
	return nil, fmt.Errorf("submit: %w: op kind %d", ErrInvalid, o.Kind)
}

// result is the Result of in, an op built from o, with error err.
func result(o *Op, in *op, err error) Result {
	r := Result{Err: err}
	switch o.Kind {
	case OpAppendAt:
		if err == nil {
			r.Skipped = in.count
		}
	case OpVerbatim:
		r.Verbatim = in.vres
	case OpDrop:
		if err == nil {
			if in.count < 0 {
				r.Kept = true
			} else {
				r.Dropped = in.count
			}
		}
	case OpSeal:
		r.Kept = err == nil && in.count < 0
	case OpReadmit:
		if err == nil {
			r.Readmission = in.rres
		}
	}
	return r
}

// checkVerbatim checks a verbatim append's chunks: their checksums, and
// that they continue each other.
func checkVerbatim(v *Verbatim) error {
	if err := checkStream(v.Stream); err != nil {
		return fmt.Errorf("append verbatim: %w", err)
	}
	var prev int64 = -1
	for i, c := range v.Chunks {
		ch, err := decodeChunk(c)
		if err != nil {
			return fmt.Errorf("append verbatim %s/%d: chunk %d: %w", v.Stream, v.Partition, i, err)
		}
		if prev >= 0 && ch.first != prev {
			return fmt.Errorf("append verbatim %s/%d: %w: chunk %d starts at %d, not %d", v.Stream, v.Partition, ErrCorrupt, i, ch.first, prev)
		}
		prev = ch.end()
	}
	return nil
}
