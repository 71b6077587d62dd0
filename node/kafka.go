package node

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/ingest"

	// The Kafka produce server (edge side) whose Backend this file is;
	// named kafka here as before the split into kafka/produce.
	kafka "github.com/tributary-io/tributary/kafka/produce"
	"github.com/tributary-io/tributary/tables"
)

// kafkaBackend is the node's side of the Kafka produce server besides
// its Appender (the write path): streams as topics, this node's
// partitions as the ones it leads (owner.Book). Idempotent producers' state past the WAL and producer ids are
// the produce side's own (kafka.ProducerStore, in DATA_DIR/kafka).
type kafkaBackend struct {
	n     *Node
	store *kafka.ProducerStore

	topicsMu   sync.Mutex
	topicsAt   time.Time
	topicsMemo []kafka.TopicInfo
}

func newKafkaBackend(n *Node) (*kafkaBackend, error) {
	st, err := kafka.OpenProducerStore(filepath.Join(n.cfg.DataDir, "kafka"))
	if err != nil {
		return nil, err
	}
	return &kafkaBackend{n: n, store: st}, nil
}

func (kb *kafkaBackend) NodeID() string { return kb.n.cfg.NodeID }

// Brokers is this node and, in a gossip cluster, every live peer with its
// gossiped Kafka address, so Metadata names peers as the leaders of their
// partitions.
func (kb *kafkaBackend) Brokers() []kafka.Broker { return kb.n.clusterBrokers() }

// topicInfo describes a stream from its table: every allocated partition,
// the node that owns it now and its ownership epoch.
func (kb *kafkaBackend) topicInfo(stream string, t *table.Table) kafka.TopicInfo {
	ti := kafka.TopicInfo{Stream: stream}
	for p, o := range tables.Owners(t) {
		ti.Partitions = append(ti.Partitions, kafka.PartitionInfo{Partition: p, Leader: o.Node, Epoch: o.Epoch})
	}
	sort.Slice(ti.Partitions, func(i, j int) bool { return ti.Partitions[i].Partition < ti.Partitions[j].Partition })
	return ti
}

// known is what this node knows without the catalog: the partitions it writes.
func (kb *kafkaBackend) known(stream string) (kafka.TopicInfo, bool) {
	ps, ok := kb.n.book.Owned()[stream]
	if !ok {
		return kafka.TopicInfo{}, false
	}
	ti := kafka.TopicInfo{Stream: stream}
	for p, e := range ps {
		ti.Partitions = append(ti.Partitions, kafka.PartitionInfo{Partition: p, Leader: kb.n.cfg.NodeID, Epoch: e})
	}
	sort.Slice(ti.Partitions, func(i, j int) bool { return ti.Partitions[i].Partition < ti.Partitions[j].Partition })
	return ti, true
}

func (kb *kafkaBackend) Topics(ctx context.Context) ([]kafka.TopicInfo, error) {
	kb.topicsMu.Lock()
	defer kb.topicsMu.Unlock()
	if time.Since(kb.topicsAt) < time.Second {
		return kb.topicsMemo, nil
	}
	streams, err := kb.n.cat.ListStreams(ctx)
	if err != nil {
		// Catalog unreachable: serve what this node writes.
		var out []kafka.TopicInfo
		for s := range kb.n.book.Streams() {
			ti, _ := kb.known(s)
			out = append(out, ti)
		}
		return out, nil
	}
	var out []kafka.TopicInfo
	for _, s := range streams {
		if ingest.CheckWritable(s) != nil {
			continue // dead-letter tables are written by the uplink only
		}
		t, err := kb.n.cat.LoadTable(ctx, s)
		if err != nil {
			continue
		}
		out = append(out, kb.topicInfo(s, t))
	}
	kb.topicsAt, kb.topicsMemo = time.Now(), out
	return out, nil
}

func (kb *kafkaBackend) Topic(ctx context.Context, stream string) (kafka.TopicInfo, error) {
	if err := ingest.CheckWritable(stream); err != nil {
		return kafka.TopicInfo{}, err // a dead-letter table, written by the uplink only
	}
	if ti, ok := kb.known(stream); ok {
		// This node's own partition is authoritative for producing here;
		// peers' partitions come from the catalog when it answers.
		if t, err := kb.n.cat.LoadTable(ctx, stream); err == nil {
			return kb.topicInfo(stream, t), nil
		}
		return ti, nil
	}
	t, err := kb.n.cat.LoadTable(ctx, stream)
	if errors.Is(err, tables.ErrNoSuchStream) {
		return kafka.TopicInfo{}, kafka.ErrUnknownStream
	}
	if err != nil {
		return kafka.TopicInfo{}, err
	}
	return kb.topicInfo(stream, t), nil
}

// EnsureStream creates the stream and this node's partition of it, as
// the write path allows (ingest.Ingest.Ensure: kafka.max_streams).
func (kb *kafkaBackend) EnsureStream(ctx context.Context, stream string) (kafka.TopicInfo, error) {
	if err := kb.n.ingest.Ensure(ctx, stream); err != nil {
		return kafka.TopicInfo{}, err
	}
	kb.topicsMu.Lock()
	kb.topicsAt = time.Time{}
	kb.topicsMu.Unlock()
	return kb.Topic(ctx, stream)
}

// AllocateProducerID returns an unguessable producer id
// (kafka.ProducerStore).
func (kb *kafkaBackend) AllocateProducerID(ctx context.Context) (int64, error) {
	return kb.store.AllocateProducerID()
}

// ProducerRuns merges the released-runs snapshot with the runs of the
// unreleased Kafka records in the WAL.
func (kb *kafkaBackend) ProducerRuns(ctx context.Context) ([]kafka.ProducerRun, error) {
	var recs []*tributary.Record
	for _, p := range kb.n.wal.Partitions() {
		if p.Next == p.Released {
			continue
		}
		rs, err := kb.n.wal.Read(p.Stream, p.Partition, p.Released, 0, 0)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rs...)
	}
	return append(kb.store.SavedRuns(), kafka.RunsFromRecords(recs, kafka.KeepRuns)...), nil
}

// adopted loads the idempotent producers' runs of a partition this node
// took over from the records it holds of it (those copied from the
// previous owner), so retries that follow the partition here are
// deduplicated.
func (kb *kafkaBackend) Adopted(stream string, p int32) {
	if kb.n.kafka == nil {
		return
	}
	st, ok := kb.n.wal.Partition(stream, p)
	if !ok || st.Next == st.Released {
		return
	}
	recs, err := kb.n.wal.Read(stream, p, st.Released, 0, 0)
	if err != nil {
		kb.n.log.Warn("kafka: producer state of an adopted partition", "stream", stream, "partition", p, "err", err)
		return
	}
	kb.n.kafka.LoadProducerRuns(kafka.RunsFromRecords(recs, kafka.KeepRuns))
}
