package wal

import (
	"context"
	"fmt"

	"github.com/tributary-io/tributary"
)

// One verb for every write: Submit queues an Op and reports its Result
// once (Apply waits for it), as pebble's DB.Apply(batch, opts) takes
// every write. The older verbs (Append, AppendAsync, AppendAt, …,
// ReleaseAsync) are thin wrappers over it, kept while callers move.

// Kind is what an Op writes.
type Kind uint8

const (
	// OpAppend appends Records at their partitions' next offsets (dense,
	// in slice order; a zero Timestamp is set to now), or the Kafka
	// record batch Batch as one entry. After, if set, names an append
	// this one must follow (AppendAsyncAfter's rule: refused with
	// ErrPredecessorFailed unless that one was stored).
	OpAppend Kind = iota + 1
	// OpAppendAt stores Records at the offsets they carry (a replica, a
	// takeover): below the partition's next offset skipped (Result.Skipped),
	// at it appended, above it refused whole with a *GapError; see
	// AppendAt.
	OpAppendAt
	// OpVerbatim stores Verbatim's chunks as they are (Result.Verbatim);
	// see AppendVerbatimAsync.
	OpVerbatim
	// OpRelease deletes Stream/Partition's records below Offset.
	OpRelease
	// OpEnsure moves Stream/Partition's next offset up to at least
	// Offset, creating the partition; see EnsurePartition.
	OpEnsure
	// OpDrop forgets Stream/Partition if its epoch is below Epoch
	// (math.MaxInt64: whatever it is); Result.Dropped, or Result.Kept.
	OpDrop
	// OpSeal refuses appends below epoch Epoch to Stream/Partition from
	// now on, unless it holds a record of Epoch or newer (Result.Kept).
	OpSeal
	// OpReadmit re-admits a fenced partition (Readmit;
	// Result.Readmission); see ReadmitPartition.
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
	// the committer (or from Submit's caller when the op is refused at
	// once). It must not block long.
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
