package wal

import (
	"errors"
	"fmt"
)

// Header is one Kafka record header or MQTT 5 user property.
type Header struct {
	Key   string
	Value []byte
}

// Record is one accepted message. Records are self-describing: a peer holding
// a replica can upload them without the node that accepted them.
//
// The caller of Append fills every field but Offset (and Timestamp, when it
// leaves it zero); Append assigns Offset densely per (Stream, Partition).
// AppendAt stores records whose Offset is already assigned.
type Record struct {
	Stream    string // "namespace.stream"
	Partition int32  // global partition number of the stream's table
	Offset    int64  // dense per-partition offset, assigned by the WAL
	Epoch     int64  // ownership epoch of the partition when accepted
	Timestamp int64  // unix microseconds when the edge node accepted it; 0 = now

	Topic    string   // original MQTT or Kafka topic
	Key      []byte   // nil = null (MQTT has none)
	Value    []byte   // payload, byte-exact
	Headers  []Header // Kafka headers / MQTT 5 user properties, in order
	Source   string   // "mqtt" or "kafka"
	ClientID string
	Node     string

	// Producer information (Kafka idempotent producers); zero for MQTT.
	ProducerID    int64
	ProducerEpoch int16
	Sequence      int32
	// ProducerTimestamp is the Kafka record timestamp (unix ms); 0 = none.
	ProducerTimestamp int64
}

var (
	// ErrBudgetExceeded is returned by Append when the records would take the
	// WAL over its disk budget. Nothing of the refused append was written.
	ErrBudgetExceeded = errors.New("wal: disk budget exceeded")
	// ErrClosed is returned by operations on a closed WAL.
	ErrClosed = errors.New("wal: closed")
	// ErrGap is wrapped by *GapError.
	ErrGap = errors.New("wal: offset gap")
)

// GapError refuses an AppendAt whose record for (Stream, Partition) is at
// Offset while the partition's next offset is Next (< Offset): the sender
// must resend from Next.
type GapError struct {
	Stream    string
	Partition int32
	Offset    int64 // the first record that does not follow
	Next      int64 // the partition's next offset: resend from here
}

func (e *GapError) Error() string {
	return fmt.Sprintf("wal: append at %s/%d: record at offset %d but next offset is %d", e.Stream, e.Partition, e.Offset, e.Next)
}

func (e *GapError) Unwrap() error { return ErrGap }
