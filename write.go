package tributary

import (
	"context"
	"encoding/binary"
	"errors"
)

// Appender is the write path every front door uses: MQTT, Kafka produce
// and the HTTP and gRPC produce APIs hand it what a client sent and
// answer the client from its outcome. The edge's is package ingest
// (owner book, WAL, replicas); another implementation may stand behind
// the same contract.
//
// # Invariants
//
//   - Done once, after Submit. Submit either returns an error — nothing
//     of the write was stored and done is never called — or returns nil
//     and calls done exactly once, never from inside Submit (a caller
//     may hold a lock across Submit that done takes), with nil when the
//     write got as far as its Wait asks, else why not. done runs on
//     another goroutine, the appender's commit goroutine for one, and
//     may run as soon as the write is queued, before the caller has seen
//     Submit return: it must not block, and what it reads of the caller's
//     state the caller must have set before calling Submit.
//   - A refusal stores nothing. An error that does not wrap
//     ErrAfterAppend means nothing of the write was stored (ReasonOf
//     names a refusal: back-pressure, ErrFenced, ErrUnauthorized), so the
//     client may retry it.
//   - Stored but unconfirmed is ErrAfterAppend. A Durable write whose
//     records were stored but not confirmed by the replicas as the policy
//     requires reports an error wrapping ErrAfterAppend (and the cause).
//     Its records' Partition, Offset and Epoch are set; Confirm waits for
//     them again, so a client's re-send is acknowledged, not stored twice.
//   - Order. The writes of one goroutine are applied in the order it
//     called Submit (or Append); a write After another is stored only if that one was
//     (else it is refused whole with an error wrapping
//     ErrPredecessorFailed), in the same or a later commit.
//   - Admission. A write to a dead-letter stream is refused
//     (ErrUnknownStream). A stream that does not exist is created when the
//     appender's policy allows, else ErrUnknownStream, or ErrStreamLimit
//     past its cap on streams.
//   - The appender owns a Write (its records, the batch's bytes) until
//     done is called or Submit returned an error; it writes only the
//     fields named on Write, and never a record's Value.
type Appender interface {
	// Submit queues w and returns without waiting for its commit; it
	// may block for back-pressure (until ctx is done). The Ticket names
	// w, also a w refused at once, for a later write's After.
	Submit(ctx context.Context, w *Write, wait Wait, done func(error)) (Ticket, error)
	// Append is Submit with Durable, waiting for done; when ctx ends
	// before the write was taken for a commit it returns ctx's error and
	// nothing is stored.
	Append(ctx context.Context, w *Write) error
	// Confirm waits again, up to ctx, for the replicas of a record a
	// Durable write stored and reported failed with ErrAfterAppend (rec
	// with the Stream, Partition, Offset and Epoch the write set). It
	// returns nil once rec is as durable as a successful Append makes
	// records, also when the policy no longer requires the replicas or
	// the partition moved to another node (the record reaches the table
	// either way); its errors wrap ErrAfterAppend.
	Confirm(ctx context.Context, rec *Record) error
}

// Write is one submission to an Appender: records, or one Kafka record
// batch, of one stream and one partition.
//
// The front door fills the records' Stream, Topic, Key, Value, Headers,
// Source, ClientID, Principal and producer fields (the batch's Stream,
// Topic, Source, ClientID, Principal and Records). The appender sets
// Partition (unless Chosen), Epoch, Node (when empty), Offset and
// Timestamp (when zero).
type Write struct {
	Records []*Record // or
	Batch   *Batch
	// Chosen: the records' (batch's) Partition is the caller's choice
	// (Kafka produce, a producer naming a partition); a partition this
	// node does not write is refused with an error wrapping ErrFenced.
	// Else the appender picks its own partition of the stream.
	Chosen bool
	// After is the Ticket of an earlier Submit this write follows (an
	// idempotent Kafka producer's previous batch); nil follows none.
	After Ticket
	// Dedup, when set, names the write by its producer's sequence ids
	// (a Pulsar producer) for an appender that keeps producer state
	// (the cloud's; the edge's has no Pulsar producers).
	Dedup *Dedup
}

// Dedup names a write by its producer's sequence ids. A write whose
// Last is at or below the last one stored for Producer on the
// partition is a resend: it is not stored again and done reports
// success with the records' offsets those of the original — when the
// resend is of the producer's last stored write; an older one is not
// known any more and gets offsets -1 (as Apache Pulsar answers such a
// resend with message id -1:-1). Sequence ids only need to grow: a gap
// is no error.
type Dedup struct {
	Producer    string // producer name, unique per stream
	First, Last int64  // sequence ids of the write, First <= Last
}

// WriteTo is a Write of recs (of one stream) to partition p, the
// caller's choice, or to the appender's own partition when p < 0.
func WriteTo(p int32, recs ...*Record) *Write {
	if p >= 0 {
		for _, r := range recs {
			r.Partition = p
		}
	}
	return &Write{Records: recs, Chosen: p >= 0}
}

// Stream is the stream w writes to.
func (w *Write) Stream() string {
	if w.Batch != nil {
		return w.Batch.Stream
	}
	if len(w.Records) > 0 {
		return w.Records[0].Stream
	}
	return ""
}

// Wait is how far a write must get before Submit's done reports it.
type Wait uint8

const (
	// Durable: stored durably (fsynced) and, in a cluster, confirmed by
	// the replicas the policy requires: what an acknowledgement may
	// promise (MQTT QoS 1 and 2, Kafka produce, HTTP and gRPC produce).
	// A partition whose replicas are known missing under the refuse
	// policy is refused at once (ErrNotReplicated).
	Durable Wait = iota
	// Queued: done reports the local commit; the replicas are sent the
	// records but not waited for, and never refuse them (MQTT QoS 0,
	// which has nothing to acknowledge).
	Queued
)

// Ticket names a submitted write for a later write to follow
// (Write.After). Its value is the appender's own; nil names none.
type Ticket any

// Batch is a Kafka record batch stored as one entry covering its
// records' consecutive offsets; read back, it is a BatchView.
type Batch struct {
	Stream    string
	Partition int32
	Epoch     int64 // partition ownership epoch
	Topic     string
	Source    string // "kafka"
	ClientID  string
	Node      string
	Principal string
	// Records is an uncompressed message format v2 record batch
	// (attributes' codec 0) the caller has validated: every record
	// parses and its count field is right. The appender owns it until
	// done and rewrites its base offset.
	Records []byte
	// Offset (of the first record) and Timestamp (accept time, unix
	// micros; a zero one is set to now) are set by the appender.
	Offset    int64
	Timestamp int64
}

// batchHeaderLen is the length of a v2 record batch's header, whose
// last field (at 57) is the record count.
const batchHeaderLen = 61

// Count is the number of records of b (0 when Records is shorter than a
// batch header).
func (b *Batch) Count() int {
	if len(b.Records) < batchHeaderLen {
		return 0
	}
	return int(int32(binary.BigEndian.Uint32(b.Records[57:])))
}

// Errors of admission and order (see Appender).
var (
	// ErrUnknownStream: the stream does not exist and may not be
	// created (or is a dead-letter stream, written by the uplink only).
	ErrUnknownStream = errors.New("unknown stream")
	// ErrStreamLimit (wrapped): creating the stream would pass the
	// appender's cap on streams.
	ErrStreamLimit = errors.New("stream limit reached")
	// ErrPredecessorFailed (wrapped): the write named by After was not
	// stored, so this one was not either.
	ErrPredecessorFailed = errors.New("an earlier write this one follows was not stored")
)
