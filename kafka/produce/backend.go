package produce

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/kbatch"
	"github.com/tributary-io/tributary/kafka"
)

// ErrUnknownStream is returned by Backend.Topic for a stream that does not
// exist, and by Backend.EnsureStream when it does not exist and may not be
// created: the Appender's (tributary.ErrUnknownStream).
var ErrUnknownStream = tributary.ErrUnknownStream

// ErrStreamLimit is returned (wrapped) by Backend.EnsureStream when the
// catalog holds as many streams as allowed; the client gets
// POLICY_VIOLATION. It is the Appender's (tributary.ErrStreamLimit).
var ErrStreamLimit = tributary.ErrStreamLimit

// ErrNotLeader is returned (wrapped) by an Appender for a partition this
// node does not own; the client gets NOT_LEADER_OR_FOLLOWER and refreshes
// its metadata.
// It wraps tributary.ErrFenced.
var ErrNotLeader = fmt.Errorf("kafka: not the partition's leader: %w", tributary.ErrFenced)

// ErrPredecessorFailed is wrapped by the error an Appender reports for
// an append refused because the one it follows (Write.After) was not
// stored: the Appender's (tributary.ErrPredecessorFailed).
var ErrPredecessorFailed = tributary.ErrPredecessorFailed

// PartitionInfo is one partition of a stream and the node that owns it.
type PartitionInfo struct {
	Partition int32
	Leader    string // node id of the owner; "" = no owner known
	// Epoch is the owner's ownership epoch (tables.Ownership), reported as
	// the Kafka leader epoch so that clients notice a new leader.
	Epoch int64
}

// TopicInfo is a stream seen as a Kafka topic. The topic name is the stream
// name ("namespace.stream").
type TopicInfo struct {
	Stream     string
	Partitions []PartitionInfo
}

// Broker is a node reachable over the Kafka protocol. The entry for this
// node may leave Host/Port empty: the server fills in its advertised
// address.
type Broker struct {
	NodeID string
	Host   string
	Port   int32
}

// ProducerRun is a run of consecutive sequence numbers of one idempotent
// producer epoch that was appended to one partition at consecutive offsets:
// sequence FirstSeq+i was written at offset FirstOffset+i, up to LastSeq.
// One produced batch is one run; runs rebuilt from stored records may span
// several batches, which is just as good for deduplication.
// Sequences wrap from math.MaxInt32 to 0 as in Kafka.
type ProducerRun struct {
	Stream        string
	Partition     int32
	ProducerID    int64
	ProducerEpoch int16
	FirstSeq      int32
	LastSeq       int32
	FirstOffset   int64
	// Principal is who appended the run ("" = anonymous): the producer id
	// stays bound to it (producers.go).
	Principal string `json:",omitempty"`
}

// Backend is what the Kafka produce server needs from the node besides
// its tributary.Appender (the durable log): the stream/partition
// catalogue and idempotent-producer state. All methods must be safe for
// concurrent use.
type Backend interface {
	// NodeID is this node's id; partitions whose Leader is NodeID are
	// written here.
	NodeID() string
	// Brokers lists this node and its peers. Node ids are mapped to Kafka
	// int32 broker ids with BrokerID.
	Brokers() []Broker
	// Topics lists all streams.
	Topics(ctx context.Context) ([]TopicInfo, error)
	// Topic describes one stream, or returns ErrUnknownStream.
	Topic(ctx context.Context, stream string) (TopicInfo, error)
	// EnsureStream creates the stream if it does not exist (the server
	// calls it only when auto-creation is enabled) and allocates this
	// node's partition of it.
	EnsureStream(ctx context.Context, stream string) (TopicInfo, error)
	// AllocateProducerID returns a producer id never returned before by
	// any node of the cluster, across restarts.
	AllocateProducerID(ctx context.Context) (int64, error)
	// ProducerRuns returns, for every (stream, partition, producer id)
	// that appended recently, at least its last five runs, oldest first per
	// key, so that a producer retrying after a restart is still
	// deduplicated. It is called once, by Server.Start. The node derives
	// them from its unreleased WAL records (RunsFromRecords) preceded by a
	// snapshot of the runs of records it has released, which it must save
	// before (or in the same transaction as) releasing them; overlap
	// between snapshot and records is harmless.
	ProducerRuns(ctx context.Context) ([]ProducerRun, error)
}

// RunsFromRecords folds records (in offset order per partition) into
// producer runs, keeping the last keep runs per (stream, partition,
// producer id); keep <= 0 keeps all. Records that are not from Kafka or
// carry no producer id (ProducerID < 0) are skipped. A node implements
// Backend.ProducerRuns with it over its unreleased WAL records merged with
// its snapshot.
func RunsFromRecords(recs []*tributary.Record, keep int) []ProducerRun {
	es := make([]tributary.Entry, len(recs))
	for i, r := range recs {
		es[i] = tributary.Entry{Record: r}
	}
	return RunsFromEntries(es, keep)
}

// RunsFromEntries is RunsFromRecords for WAL entries (wal.ReadEntries): a
// Kafka batch entry is folded as the run of its records' sequences, read
// from the batch's header, with no record decoded.
func RunsFromEntries(es []tributary.Entry, keep int) []ProducerRun {
	type key struct {
		stream    string
		partition int32
		pid       int64
	}
	runs := make(map[key][]ProducerRun)
	var order []key
	for _, e := range es {
		// The span of consecutive records of one producer the entry holds.
		var s ProducerRun
		var source string
		switch r, v := e.Record, e.Batch; {
		case r != nil:
			s = ProducerRun{Stream: r.Stream, Partition: r.Partition, ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch,
				FirstSeq: r.Sequence, LastSeq: r.Sequence, FirstOffset: r.Offset, Principal: r.Principal}
			source = r.Source
		case v != nil && len(v.Records) >= kbatch.HeaderLen && v.Count > 0:
			b := v.Records
			base := int32(binary.BigEndian.Uint32(b[53:]))
			s = ProducerRun{Stream: v.Stream, Partition: v.Partition, ProducerID: int64(binary.BigEndian.Uint64(b[43:])),
				ProducerEpoch: int16(binary.BigEndian.Uint16(b[51:])), FirstSeq: kbatch.AddSeq(base, int32(v.Skip)),
				LastSeq: kbatch.AddSeq(base, int32(v.Skip+v.Count-1)), FirstOffset: v.Offset, Principal: v.Principal}
			source = v.Source
		default:
			continue
		}
		if source != "kafka" || s.ProducerID < 0 || s.ProducerEpoch < 0 {
			continue
		}
		k := key{s.Stream, s.Partition, s.ProducerID}
		rs, seen := runs[k]
		if !seen {
			order = append(order, k)
		}
		if n := len(rs); n > 0 {
			last := &rs[n-1]
			if last.ProducerEpoch == s.ProducerEpoch && kafka.NextSeq(last.LastSeq) == s.FirstSeq &&
				last.FirstOffset+int64(kafka.SeqDelta(last.FirstSeq, last.LastSeq))+1 == s.FirstOffset {
				last.LastSeq = s.LastSeq
				continue
			}
		}
		rs = append(rs, s)
		if keep > 0 && len(rs) > keep {
			rs = append(rs[:0], rs[len(rs)-keep:]...)
		}
		runs[k] = rs
	}
	var out []ProducerRun
	for _, k := range order {
		out = append(out, runs[k]...)
	}
	return out
}
