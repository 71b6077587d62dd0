package node

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	wire "github.com/tributary-io/tributary/kafka"

	// The Kafka produce server (edge side) whose Backend this file is;
	// named kafka here as before the split into kafka/produce.
	kafka "github.com/tributary-io/tributary/kafka/produce"
	"github.com/tributary-io/tributary/tables"
)

// kafkaBackend is the node's side of the Kafka produce server: streams as
// topics, this node's partitions as the ones it leads, the WAL as the log,
// and idempotent-producer state that outlives the WAL's records.
//
// Producer state: the records themselves carry producer id, epoch and
// sequence, so the WAL holds the state of everything not yet uploaded. Before
// the uplink releases a committed range, the runs of its records are folded
// into a snapshot file (DATA_DIR/kafka/producers.json, written atomically
// and fsynced), so a producer retrying after a restart is deduplicated even
// when its batch already left the WAL. Producer ids come from a block
// allocator persisted in DATA_DIR/kafka/producer-ids, prefixed by this
// node's broker id so that nodes never hand out the same id.
type kafkaBackend struct {
	n   *Node
	dir string

	mu    sync.Mutex
	runs  map[runKey]*savedRuns // snapshot of released runs
	idMu  sync.Mutex
	next  int64 // next producer id counter value
	limit int64 // persisted allocation limit

	topicsMu   sync.Mutex
	topicsAt   time.Time
	topicsMemo []kafka.TopicInfo
}

// savedRuns is one producer's last runs on one partition, and when they
// were last extended; entries idle for producerStateTTL are dropped.
type savedRuns struct {
	Runs []kafka.ProducerRun `json:"runs"`
	At   int64               `json:"at"` // unix seconds
}

// producerStateTTL is how long a producer's state outlives its last batch
// in the snapshot: well past the server's producer idle expiry.
const producerStateTTL = 7 * 24 * time.Hour

type runKey struct {
	stream    string
	partition int32
	pid       int64
}

const (
	producerIDBlock = 1000
	keepRuns        = 5
)

func newKafkaBackend(n *Node) (*kafkaBackend, error) {
	kb := &kafkaBackend{n: n, dir: filepath.Join(n.cfg.DataDir, "kafka"), runs: map[runKey]*savedRuns{}}
	if err := os.MkdirAll(kb.dir, 0o700); err != nil {
		return nil, fmt.Errorf("kafka state: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(kb.dir, "producers.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("kafka producer state: %w", err)
	default:
		var saved []*savedRuns
		if err := json.Unmarshal(raw, &saved); err != nil {
			return nil, fmt.Errorf("kafka producer state %s: %w", filepath.Join(kb.dir, "producers.json"), err)
		}
		for _, sr := range saved {
			if len(sr.Runs) > 0 {
				r := sr.Runs[0]
				kb.runs[runKey{r.Stream, r.Partition, r.ProducerID}] = sr
			}
		}
	}
	raw, err = os.ReadFile(filepath.Join(kb.dir, "producer-ids"))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil || len(raw) != 8:
		return nil, fmt.Errorf("kafka producer ids: bad file (%v)", err)
	default:
		kb.limit = int64(binary.BigEndian.Uint64(raw))
		kb.next = kb.limit // ids below the persisted limit may have been handed out
	}
	return kb, nil
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

func (kb *kafkaBackend) EnsureStream(ctx context.Context, stream string) (kafka.TopicInfo, error) {
	if _, err := kb.n.ingest.partition(ctx, stream); err != nil {
		return kafka.TopicInfo{}, err
	}
	kb.topicsMu.Lock()
	kb.topicsAt = time.Time{}
	kb.topicsMu.Unlock()
	return kb.Topic(ctx, stream)
}

// Append appends records the Kafka server addressed to a partition this
// node owns (its own, or one it took over); any other partition is refused
// with owner.ErrNotOwned (tributary.ErrFenced: NOT_LEADER_OR_FOLLOWER).
func (kb *kafkaBackend) Append(ctx context.Context, recs ...*tributary.Record) error {
	return kb.n.ingest.appendOwned(ctx, recs...)
}

// AllocateProducerID hands out ids from persisted blocks: the limit is
// written and fsynced before any id below it is returned, so a restart never
// repeats one. The high bits are this node's broker id.
func (kb *kafkaBackend) AllocateProducerID(ctx context.Context) (int64, error) {
	kb.idMu.Lock()
	defer kb.idMu.Unlock()
	if kb.next >= kb.limit {
		limit := kb.limit + producerIDBlock
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(limit))
		if err := writeFileSync(filepath.Join(kb.dir, "producer-ids"), b[:]); err != nil {
			return 0, fmt.Errorf("allocate producer id: %w", err)
		}
		kb.limit = limit
	}
	id := int64(wire.BrokerID(kb.n.cfg.NodeID)&0x7fff)<<40 | kb.next
	kb.next++
	return id, nil
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
	kb.mu.Lock()
	var out []kafka.ProducerRun
	for _, sr := range kb.runs {
		out = append(out, sr.Runs...)
	}
	kb.mu.Unlock()
	return append(out, kafka.RunsFromRecords(recs, keepRuns)...), nil
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
	kb.n.kafka.LoadProducerRuns(kafka.RunsFromRecords(recs, keepRuns))
}

// Releasing (uplink.ReleaseListener) folds the runs of records about to leave the
// WAL into the snapshot and persists it.
func (kb *kafkaBackend) Releasing(stream string, partition int32, recs []*tributary.Record) error {
	runs := kafka.RunsFromRecords(recs, keepRuns)
	if len(runs) == 0 {
		return nil
	}
	kb.mu.Lock()
	defer kb.mu.Unlock()
	now := time.Now()
	for _, r := range runs {
		k := runKey{r.Stream, r.Partition, r.ProducerID}
		sr := kb.runs[k]
		if sr == nil {
			sr = &savedRuns{}
			kb.runs[k] = sr
		}
		sr.Runs = append(sr.Runs, r)
		if len(sr.Runs) > keepRuns {
			sr.Runs = sr.Runs[len(sr.Runs)-keepRuns:]
		}
		sr.At = now.Unix()
	}
	all := make([]*savedRuns, 0, len(kb.runs))
	for k, sr := range kb.runs {
		if now.Sub(time.Unix(sr.At, 0)) > producerStateTTL {
			delete(kb.runs, k)
			continue
		}
		all = append(all, sr)
	}
	raw, err := json.Marshal(all)
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(kb.dir, "producers.json"), raw)
}

// writeFileSync replaces a file atomically and durably.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
