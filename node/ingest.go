package node

import (
	"context"
	"errors"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/owner"
	"github.com/tributary-io/tributary/wal"
)

// ingest is the Sink of the protocol front doors: it stamps each record
// with its partition and ownership epoch (owner.Book), appends it to the
// WAL and waits for the replicas where the cluster requires it.
type ingest struct {
	node  string
	wal   *wal.WAL
	book  *owner.Book
	async *semaphore.Weighted // bytes queued by AppendAsync
	count streamCounters      // durable messages and bytes by protocol and stream
	repl  replication         // WAL replication to peers (cluster only)
}

func newIngest(node string, w *wal.WAL, book *owner.Book) *ingest {
	return &ingest{node: node, wal: w, book: book, async: semaphore.NewWeighted(maxAsyncBytes)}
}

// Append resolves partitions and makes the records durable.
func (in *ingest) Append(ctx context.Context, recs ...*tributary.Record) error {
	for _, r := range recs {
		if err := in.stamp(ctx, r); err != nil {
			return err
		}
	}
	return in.append(ctx, recs)
}

func (in *ingest) append(ctx context.Context, recs []*tributary.Record) error {
	if err := in.repl.checkRecs(recs); err != nil {
		return err
	}
	if err := in.wal.Append(ctx, recs...); err != nil {
		return err
	}
	in.count.add(recs)
	return in.repl.wait(ctx, recs) // its errors wrap tributary.ErrAfterAppend
}

// Confirm waits again for the replicas of a record an append stored and
// reported failed (tributary.ErrAfterAppend); rec needs the Stream,
// Partition, Offset and Epoch that append set. It returns nil once the
// replicas hold it as the policy requires (at once when it no longer
// requires them), so the MQTT front door acknowledges a client's re-send
// of it without appending it twice.
//
// A record of a partition another node owns now (fenced) is confirmed
// too: durable here, it reaches the table once either way — copied by the
// new owner (below its epoch's start) or re-admitted by this node's
// uplink into a partition of its own — so its re-send must not be
// refused for good.
func (in *ingest) Confirm(ctx context.Context, rec *tributary.Record) error {
	err := in.repl.wait(ctx, []*tributary.Record{rec}) // its errors wrap tributary.ErrAfterAppend
	if errors.Is(err, tributary.ErrFenced) {
		return nil
	}
	return err
}

// stamp sets a record's partition (this node's own), epoch and node.
func (in *ingest) stamp(ctx context.Context, r *tributary.Record) error {
	p, e, err := in.book.Own(ctx, r.Stream)
	if err != nil {
		return err
	}
	r.Partition, r.Epoch = p, e
	if r.Node == "" {
		r.Node = in.node
	}
	return nil
}

// partition returns this node's own partition of stream.
func (in *ingest) partition(ctx context.Context, stream string) (int32, error) {
	p, _, err := in.book.Own(ctx, stream)
	return p, err
}

// appendOwned appends records whose partition the caller chose (Kafka
// produce), stamping each with this node's epoch of its partition; a
// partition this node does not own is refused (owner.ErrNotOwned,
// owner.ErrAdopting) and nothing is appended.
func (in *ingest) appendOwned(ctx context.Context, recs ...*tributary.Record) error {
	if err := in.stampOwned(ctx, recs); err != nil {
		return err
	}
	return in.append(ctx, recs)
}

// stampOwned stamps records whose partition the caller chose with this
// node's epoch of it, or refuses a partition this node does not own.
func (in *ingest) stampOwned(ctx context.Context, recs []*tributary.Record) error {
	var last struct {
		stream string
		p      int32
	}
	var e int64
	for i, r := range recs {
		if i == 0 || r.Stream != last.stream || r.Partition != last.p {
			var err error
			if e, err = in.book.Writable(ctx, r.Stream, r.Partition); err != nil {
				return err
			}
			last.stream, last.p = r.Stream, r.Partition
		}
		r.Epoch, r.Node = e, in.node
	}
	return nil
}

// appendBatchAsync appends a Kafka record batch to a partition the
// caller chose (Kafka produce) as one WAL entry, queued after the append
// after names (wal.AppendBatchAsyncAfter): it stamps it with this node's
// epoch of the partition and checks at once (an error: nothing queued,
// done not called; a partition this node does not own is refused with
// owner.ErrNotOwned, owner.ErrAdopting) and calls done, never before it
// returns, once the batch is as durable as Append makes records.
func (in *ingest) appendBatchAsync(ctx context.Context, after wal.Ticket, b *wal.Batch, done func(error)) (wal.Ticket, error) {
	e, err := in.book.Writable(ctx, b.Stream, b.Partition)
	if err != nil {
		return wal.Ticket{}, err
	}
	b.Epoch, b.Node = e, in.node
	if err := in.repl.check(b.Stream, b.Partition); err != nil {
		return wal.Ticket{}, err
	}
	var queued atomic.Bool
	t := in.wal.AppendBatchAsyncAfter(after, b, func(err error) {
		if err == nil {
			in.count.addBatch(b)
		}
		if err != nil || in.repl.r.Load() == nil {
			if err == nil || queued.Load() {
				done(err) // on the committer
			} else {
				go done(err) // refused at once, inside AppendBatchAsyncAfter
			}
			return
		}
		// Replication needs the partition, its last offset and epoch.
		last := []*tributary.Record{{Stream: b.Stream, Partition: b.Partition, Offset: b.Offset + int64(b.Count()) - 1, Epoch: b.Epoch}}
		go func() { // never on the WAL's committer
			done(in.repl.wait(ctx, last)) // ErrAfterAppend on a failure
		}()
	})
	queued.Store(true)
	return t, nil
}

// maxAsyncBytes bounds the payload bytes queued by AppendAsync and not yet
// durable; beyond it AppendAsync waits (back-pressure on the connection).
const maxAsyncBytes = 32 << 20

// AppendAsync resolves the partition and queues the record for the next
// group commit without waiting for it (QoS 0).
func (in *ingest) AppendAsync(ctx context.Context, r *tributary.Record, done func(error)) error {
	if err := in.stamp(ctx, r); err != nil {
		return err
	}
	if err := in.repl.mayWrite(); err != nil {
		return err
	}
	n := int64(len(r.Value)) + 256
	if err := in.async.Acquire(ctx, n); err != nil {
		return err
	}
	in.wal.AppendAsync([]*tributary.Record{r}, func(err error) {
		in.async.Release(n)
		if err == nil {
			in.count.add([]*tributary.Record{r})
			in.repl.notify([]*tributary.Record{r})
		}
		done(err)
	})
	return nil
}

// AppendPipelined queues a QoS 1/2 record and calls done once it is as
// durable as Append makes it: fsynced in the WAL and, in a cluster,
// replicated as the policy requires. The MQTT front door acknowledges
// from done, so one connection can have many records in one group commit.
func (in *ingest) AppendPipelined(ctx context.Context, r *tributary.Record, done func(error)) error {
	if err := in.stamp(ctx, r); err != nil {
		return err
	}
	if err := in.repl.check(r.Stream, r.Partition); err != nil {
		return err
	}
	n := int64(len(r.Value)) + 256
	if err := in.async.Acquire(ctx, n); err != nil {
		return err
	}
	recs := []*tributary.Record{r}
	in.wal.AppendAsync(recs, func(err error) {
		in.async.Release(n)
		if err != nil {
			done(err)
			return
		}
		in.count.add(recs)
		// The replicas got the records while the WAL fsynced them (its
		// Tap); their answer completes the acknowledgement.
		in.repl.waitAsync(recs, done) // its errors wrap tributary.ErrAfterAppend
	})
	return nil
}
