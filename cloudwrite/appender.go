package cloudwrite

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cloudwrite/wire"
	"github.com/tributary-io/tributary/ingest"
	"github.com/tributary-io/tributary/wal"
)

// Partition is a cloud partition of a stream and its ownership epoch
// (tables.Ownership), as the catalog allocated it.
type Partition struct {
	Partition int32
	Epoch     int64
}

// Resolve returns a stream's cloud partitions — allocating one for an
// existing stream that has none, creating the stream when the server's
// policy allows — or an error wrapping tributary.ErrUnknownStream.
type Resolve func(ctx context.Context, stream string) ([]Partition, error)

// partitionsTTL is how long the Appender trusts the partitions it
// resolved for a stream.
const partitionsTTL = time.Minute

// Appender is the cloud write path as the write contract every front
// door uses (tributary.Appender; the edge's is package ingest): the
// Kafka, HTTP and gRPC produce servers of a cloud server hand it their
// writes, and it submits each as one segment to the Writer.
//
// How the contract maps onto the cloud:
//
//   - Done once, after Submit: the Writer's (Enqueue); done reports the
//     sequencing of the write's WAL object, for Durable and Queued alike
//     (there is nothing before it to report).
//   - A refusal stores nothing: an unknown or dead-letter stream, a
//     partition that is not a cloud partition (ErrFenced: edge
//     partitions stay their nodes'), a full buffer (ErrBudget wrapping
//     ErrBackpressure), a closed writer; and every error done reports
//     (ErrNotWritten: the object was not put or not sequenced; a segment
//     sequencing refused). The cloud never reports ErrAfterAppend — it
//     has no replicas to wait for — so Confirm has nothing to wait for.
//   - Order: objects are sequenced in the order they are cut and a
//     write After another is sequenced only if that one was (Enqueue).
//   - Records and batches get Partition (unless Chosen), Epoch, Node (the
//     server, when empty), Offset and Timestamp (the accept time, when
//     zero); a batch's base offset is rewritten.
type Appender struct {
	w       *Writer
	resolve Resolve
	parts   sync.Map // stream → resolved
}

type resolved struct {
	parts []Partition
	at    time.Time
}

// NewAppender returns the Appender writing through w, with the
// partitions resolve gives.
func NewAppender(w *Writer, resolve Resolve) *Appender {
	return &Appender{w: w, resolve: resolve}
}

var _ tributary.Appender = (*Appender)(nil)

// partitions are stream's cloud partitions, resolved at most once per
// partitionsTTL.
func (a *Appender) partitions(ctx context.Context, stream string) ([]Partition, error) {
	if v, ok := a.parts.Load(stream); ok && time.Since(v.(resolved).at) < partitionsTTL {
		return v.(resolved).parts, nil
	}
	ps, err := a.resolve(ctx, stream)
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%s has no cloud partition: %w", stream, tributary.ErrUnknownStream)
	}
	a.parts.Store(stream, resolved{ps, time.Now()})
	return ps, nil
}

// Submit queues w to be written (tributary.Appender).
func (a *Appender) Submit(ctx context.Context, w *tributary.Write, _ tributary.Wait, done func(error)) (tributary.Ticket, error) {
	var after *Ticket
	if w.After != nil {
		t, ok := w.After.(*Ticket)
		if !ok {
			return refusedTicket(), fmt.Errorf("cloudwrite: a write follows a ticket of another appender (%T)", w.After)
		}
		after = t
	}
	seg, part, err := a.segment(ctx, w)
	if err != nil {
		return refusedTicket(), err
	}
	t, err := a.w.Enqueue(seg, after, func(o Outcome, err error) { done(settle(w, seg, part, o, err)) })
	if errors.Is(err, ErrBackpressure) {
		err = fmt.Errorf("%w: %w", tributary.ErrBudget, err)
	}
	return t, err
}

// Append is Submit, waiting for its outcome (tributary.Appender).
func (a *Appender) Append(ctx context.Context, w *tributary.Write) error {
	ch := make(chan error, 1)
	if _, err := a.Submit(ctx, w, tributary.Durable, func(err error) { ch <- err }); err != nil {
		return err
	}
	return <-ch
}

// Confirm has nothing to wait for: the cloud reports no write stored
// but unconfirmed (tributary.Appender).
func (a *Appender) Confirm(context.Context, *tributary.Record) error { return nil }

// segment admits w and turns it into a segment of its partition.
func (a *Appender) segment(ctx context.Context, w *tributary.Write) (*wire.Segment, Partition, error) {
	if (w.Batch == nil) == (len(w.Records) == 0) {
		return nil, Partition{}, errors.New("cloudwrite: a write holds records or a batch")
	}
	stream := w.Stream()
	if err := ingest.CheckWritable(stream); err != nil {
		return nil, Partition{}, err
	}
	ps, err := a.partitions(ctx, stream)
	if err != nil {
		return nil, Partition{}, err
	}
	part := ps[0]
	if w.Chosen {
		want := int32(-1)
		if w.Batch != nil {
			want = w.Batch.Partition
		} else {
			want = w.Records[0].Partition
		}
		found := false
		for _, p := range ps {
			if p.Partition == want {
				part, found = p, true
			}
		}
		if !found {
			return nil, Partition{}, fmt.Errorf("%s partition %d is not a cloud partition: %w", stream, want, tributary.ErrFenced)
		}
	}
	if b := w.Batch; b != nil {
		if w.Dedup != nil {
			return nil, Partition{}, errors.New("cloudwrite: a named producer writes records, not a batch")
		}
		n := b.Count()
		if n <= 0 {
			return nil, Partition{}, fmt.Errorf("cloudwrite: a batch of %d bytes and %d records", len(b.Records), n)
		}
		b.Partition = part.Partition
		recs, err := (*wal.Batch)(b).Decode(0)
		if err != nil {
			return nil, Partition{}, err
		}
		h := b.Records
		seg := &wire.Segment{Stream: stream, Partition: part.Partition, Topic: b.Topic, Source: b.Source, ClientID: b.ClientID,
			Principal: b.Principal, Records: recs,
			ProducerID:    int64(binary.BigEndian.Uint64(h[43:])),
			ProducerEpoch: int16(binary.BigEndian.Uint16(h[51:])),
			BaseSequence:  int32(binary.BigEndian.Uint32(h[53:]))}
		if seg.ProducerID < 0 {
			seg.ProducerID = -1
		}
		return seg, part, nil
	}
	r0 := w.Records[0]
	for _, r := range w.Records {
		if r.Stream != stream {
			return nil, Partition{}, fmt.Errorf("cloudwrite: one write to streams %s and %s", stream, r.Stream)
		}
	}
	seg := &wire.Segment{Stream: stream, Partition: part.Partition, ProducerID: -1, Topic: r0.Topic, Source: r0.Source,
		ClientID: r0.ClientID, Principal: r0.Principal, Records: w.Records, Dedup: w.Dedup}
	if d := w.Dedup; d != nil && (d.Producer == "" || d.First > d.Last) {
		return nil, Partition{}, fmt.Errorf("cloudwrite: producer %q sequence ids %d to %d", d.Producer, d.First, d.Last)
	}
	if seg.Topic == "" {
		seg.Topic = stream
	}
	return seg, part, nil
}

// settle sets what the appender sets on a sequenced write and returns
// the write's outcome.
func settle(w *tributary.Write, seg *wire.Segment, part Partition, o Outcome, err error) error {
	switch {
	case err != nil:
		return err
	case errors.Is(o.Err, ErrOutOfOrder):
		// The producer's previous batch was not sequenced (Kafka
		// OUT_OF_ORDER_SEQUENCE_NUMBER): resent in order, both land.
		return fmt.Errorf("%w: %v", tributary.ErrPredecessorFailed, o.Err)
	case o.Err != nil:
		return o.Err
	}
	if b := w.Batch; b != nil {
		b.Partition, b.Epoch, b.Offset = part.Partition, part.Epoch, o.First
		b.Timestamp = seg.Records[0].Timestamp
		if b.Node == "" {
			b.Node = seg.Node
		}
		binary.BigEndian.PutUint64(b.Records, uint64(o.First))
		return nil
	}
	for i, r := range w.Records {
		r.Partition, r.Epoch, r.Offset = part.Partition, part.Epoch, o.First+int64(i)
		if o.First < 0 { // a resend older than the producer's last write (tributary.Dedup)
			r.Offset = -1
		}
		if r.Node == "" {
			r.Node = seg.Node
		}
	}
	return nil
}
