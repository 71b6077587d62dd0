package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/wal"
)

// The WAL's append verbs (Submit and Apply of wal.OpAppend), called from
// this file only.

// appendRecords makes recs durable (fsynced) before it returns.
func (in *Ingest) appendRecords(ctx context.Context, recs []*tributary.Record) error {
	return in.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: recs}).Err
}

// queueRecords queues recs (stamped, n bytes of the queue's bound held)
// after the append after names; done reports them as wait asks.
func (in *Ingest) queueRecords(after wal.Ticket, recs []*tributary.Record, n int64, wait tributary.Wait, done func(error)) tributary.Ticket {
	var returned atomic.Bool
	committed := func(err error) {
		in.queued.Release(n)
		err = walErr(err)
		if err != nil {
			done(err)
			return
		}
		in.count.add(recs)
		if wait == tributary.Queued {
			in.repl.notify(recs)
			done(nil)
			return
		}
		// The replicas got the records while the WAL fsynced them (its
		// Tap); their answer completes the write.
		in.repl.waitAsync(recs, done) // its errors wrap tributary.ErrAfterAppend
	}
	cb := func(r wal.Result) {
		if !returned.Load() {
			go committed(r.Err) // refused at once, inside the WAL's call: never from inside Submit
			return
		}
		committed(r.Err) // on the WAL's committer
	}
	t := in.wal.Submit(wal.Op{Kind: wal.OpAppend, Records: recs, After: after, Done: cb})
	returned.Store(true)
	return t
}

// queueBatch queues a Kafka record batch (stamped) as one WAL entry after
// the append after names; done reports it as wait asks.
func (in *Ingest) queueBatch(ctx context.Context, after wal.Ticket, b *tributary.Batch, wait tributary.Wait, done func(error)) tributary.Ticket {
	wb := (*wal.Batch)(b) // the same fields: the WAL's own form of a batch
	var returned atomic.Bool
	t := in.wal.Submit(wal.Op{Kind: wal.OpAppend, Batch: wb, After: after, Done: func(r wal.Result) {
		err := walErr(r.Err)
		if err == nil {
			in.count.addBatch(b)
		}
		// Replication needs the partition, its last offset and epoch.
		last := []*tributary.Record{{Stream: b.Stream, Partition: b.Partition, Offset: b.Offset + int64(b.Count()) - 1, Epoch: b.Epoch}}
		switch {
		case err == nil && wait == tributary.Queued:
			in.repl.notify(last)
		case err == nil && in.repl.r.Load() != nil:
			go func() { // never on the WAL's committer
				done(in.repl.wait(ctx, last)) // tributary.ErrAfterAppend on a failure
			}()
			return
		}
		if returned.Load() {
			done(err) // on the committer
		} else {
			go done(err) // refused at once, inside Submit
		}
	}})
	returned.Store(true)
	return t
}

// walErr is err with the contract's sentinel for a refused predecessor.
func walErr(err error) error {
	if errors.Is(err, wal.ErrPredecessorFailed) && !errors.Is(err, tributary.ErrPredecessorFailed) {
		return fmt.Errorf("%w: %w", tributary.ErrPredecessorFailed, err)
	}
	return err
}

// batchRecords decodes b's records from index skip on, as stored.
func batchRecords(b *tributary.Batch, skip int) ([]*tributary.Record, error) {
	return (*wal.Batch)(b).Decode(skip)
}

// batchValueBytes is the sum of b's records' value sizes.
func batchValueBytes(b *tributary.Batch) int64 { return (*wal.Batch)(b).ValueBytes() }
