// Package ingest is the edge node's write path: the tributary.Appender
// behind every front door (MQTT, Kafka produce, the HTTP and gRPC
// produce APIs). A write is admitted, stamped with its partition and
// ownership epoch (owner.Book), checked against the replicas, appended to
// the WAL and, when durable, reported once the replicas hold it.
//
// # Invariants
//
//   - Admitted before stamped. A dead-letter stream is refused for every
//     door (CheckWritable); a stream unknown here is created only when
//     the operator configured it (Config.Streams), or when AutoCreate
//     allows and fewer than MaxStreams exist; else it must exist in the
//     catalog. Nothing of a refused write is stored.
//   - Stamped by the book. A record reaches the WAL with this node's own
//     partition of its stream (or the one the caller chose, which the
//     book must say this node writes: else ErrFenced) and that
//     partition's epoch.
//   - Refused before appended, where the cluster would refuse anyway: the
//     lease says a peer may take this node's partitions over, or (Durable
//     only) the refuse policy lacks replicas (replica.CanReplicate).
//   - Acknowledged only when replicated. A Durable write's done (or
//     Append) reports nil once the WAL fsynced it and the replicas
//     confirmed it as the policy requires; a failure after the fsync
//     wraps tributary.ErrAfterAppend. Queued writes only notify the
//     replicas.
//   - Bounded. Record bytes submitted and not yet committed are capped
//     (maxQueuedBytes): Submit waits beyond it (back-pressure).
//   - One place for the WAL. Every append verb of package wal is called
//     from wal.go, nowhere else in the node's write path.
//
// Its metrics are its own (Collectors): messages and bytes made durable
// by protocol and stream, and the replication and lease figures of the
// replicas it waits for.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/owner"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// Config is the write path's policy.
type Config struct {
	// Node is this node's id, stamped on records that carry none.
	Node string
	// AutoCreate lets a write create a stream a client names
	// (kafka.auto_create); without it the stream must exist.
	AutoCreate bool
	// MaxStreams caps the streams a client's write may create
	// (kafka.max_streams); <= 0 is no cap.
	MaxStreams int
	// Streams are the streams the operator configured (the MQTT routes'
	// and default stream): created on first write whatever AutoCreate
	// and MaxStreams say.
	Streams []string
	// RefuseUntilReplicating refuses Durable writes (ErrNotReplicated)
	// until Replicate is called: the refuse policy in a cluster.
	RefuseUntilReplicating bool
}

// Ingest is the edge's tributary.Appender.
type Ingest struct {
	cfg        Config
	wal        *wal.WAL
	book       *owner.Book
	cat        *tables.Catalog
	configured map[string]bool
	admitted   sync.Map            // streams admitted once (string → struct{})
	queued     *semaphore.Weighted // record bytes submitted, not yet committed
	count      streamCounters
	repl       replication
}

var _ tributary.Appender = (*Ingest)(nil)

// New returns the write path over w, stamped by book; cat answers
// whether a stream exists and how many there are.
func New(cfg Config, w *wal.WAL, book *owner.Book, cat *tables.Catalog) *Ingest {
	in := &Ingest{cfg: cfg, wal: w, book: book, cat: cat, configured: map[string]bool{},
		queued: semaphore.NewWeighted(maxQueuedBytes)}
	for _, s := range cfg.Streams {
		in.configured[s] = true
	}
	in.repl.refuseUntilStarted.Store(cfg.RefuseUntilReplicating)
	return in
}

// maxQueuedBytes bounds the record bytes submitted and not yet durable;
// beyond it Submit waits (back-pressure on the connection). A Kafka batch
// is bounded by the Kafka server's own kafka.max_inflight_bytes instead.
const maxQueuedBytes = 32 << 20

// recordCost is what a record counts against maxQueuedBytes.
func recordCost(recs []*tributary.Record) int64 {
	var n int64
	for _, r := range recs {
		n += int64(len(r.Value)) + 256
	}
	return n
}

// refused is the Ticket of a write refused before it reached the WAL.
type refused struct{}

// Submit admits, stamps and checks w, then queues it for the WAL's next
// group commit (tributary.Appender).
func (in *Ingest) Submit(ctx context.Context, w *tributary.Write, wait tributary.Wait, done func(error)) (tributary.Ticket, error) {
	after, err := predecessor(w.After)
	if err != nil {
		return refused{}, err
	}
	if err := in.prepare(ctx, w, wait); err != nil {
		return refused{}, err
	}
	if w.Batch != nil {
		return in.queueBatch(ctx, after, w.Batch, wait, done), nil
	}
	n := recordCost(w.Records)
	if err := in.queued.Acquire(ctx, n); err != nil {
		return refused{}, err
	}
	return in.queueRecords(after, w.Records, n, wait, done), nil
}

// Append makes w durable and replicated before it returns
// (tributary.Appender).
func (in *Ingest) Append(ctx context.Context, w *tributary.Write) error {
	if w.Batch != nil || w.After != nil {
		ch := make(chan error, 1)
		if _, err := in.Submit(ctx, w, tributary.Durable, func(err error) { ch <- err }); err != nil {
			return err
		}
		return <-ch
	}
	if err := in.prepare(ctx, w, tributary.Durable); err != nil {
		return err
	}
	if err := in.appendRecords(ctx, w.Records); err != nil {
		return err
	}
	in.count.add(w.Records)
	return in.repl.wait(ctx, w.Records) // its errors wrap tributary.ErrAfterAppend
}

// Confirm waits again for the replicas of a record a write stored and
// reported failed (tributary.Appender). A record of a partition another
// node owns now (fenced) is confirmed too: durable here, it reaches the
// table once either way — copied by the new owner (below its epoch's
// start) or re-admitted by this node's uplink into a partition of its
// own — so its re-send must not be refused for good.
func (in *Ingest) Confirm(ctx context.Context, rec *tributary.Record) error {
	err := in.repl.wait(ctx, []*tributary.Record{rec}) // its errors wrap tributary.ErrAfterAppend
	if errors.Is(err, tributary.ErrFenced) {
		return nil
	}
	return err
}

// prepare admits w's stream, stamps w and refuses it where the cluster
// would: everything before the WAL.
func (in *Ingest) prepare(ctx context.Context, w *tributary.Write, wait tributary.Wait) error {
	if (w.Batch == nil) == (len(w.Records) == 0) {
		return errors.New("ingest: a write holds records or a batch")
	}
	if err := in.admit(ctx, w.Stream()); err != nil {
		return err
	}
	if b := w.Batch; b != nil {
		if !w.Chosen {
			p, _, err := in.book.Own(ctx, b.Stream)
			if err != nil {
				return err
			}
			b.Partition = p
		}
		e, err := in.book.Writable(ctx, b.Stream, b.Partition)
		if err != nil {
			return err
		}
		b.Epoch, b.Node = e, in.cfg.Node
		if wait == tributary.Queued {
			return in.repl.mayWrite()
		}
		return in.repl.check(b.Stream, b.Partition)
	}
	var err error
	if w.Chosen {
		err = in.stampChosen(ctx, w.Records)
	} else {
		err = in.stampOwn(ctx, w.Records)
	}
	if err != nil {
		return err
	}
	if wait == tributary.Queued {
		return in.repl.mayWrite()
	}
	return in.repl.checkRecs(w.Records)
}

// stampOwn sets each record's partition (this node's own of its
// stream), epoch and node (where empty).
func (in *Ingest) stampOwn(ctx context.Context, recs []*tributary.Record) error {
	for _, r := range recs {
		p, e, err := in.book.Own(ctx, r.Stream)
		if err != nil {
			return err
		}
		r.Partition, r.Epoch = p, e
		if r.Node == "" {
			r.Node = in.cfg.Node
		}
	}
	return nil
}

// stampChosen stamps records whose partition the caller chose with this
// node's epoch of it, or refuses a partition this node does not own
// (owner.ErrNotOwned, owner.ErrAdopting: tributary.ErrFenced).
func (in *Ingest) stampChosen(ctx context.Context, recs []*tributary.Record) error {
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
		r.Epoch, r.Node = e, in.cfg.Node
	}
	return nil
}

// predecessor is the WAL ticket of the write a Write follows.
func predecessor(t tributary.Ticket) (wal.Ticket, error) {
	switch t := t.(type) {
	case nil:
		return wal.Ticket{}, nil
	case wal.Ticket:
		return t, nil
	case refused:
		return wal.Ticket{}, fmt.Errorf("append after a refused one: %w", tributary.ErrPredecessorFailed)
	default:
		return wal.Ticket{}, fmt.Errorf("ingest: a ticket of another appender (%T)", t)
	}
}
