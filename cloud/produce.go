package cloud

// The cloud write path's front doors: Kafka producers on the cloud Kafka
// listener, Pulsar producers on the cloud Pulsar listener, HTTP
// (Confluent REST v3) and gRPC ProduceService on the cloud HTTP port
// (httpapi.go). Each is the edge's front door (validation, caps,
// codecs, idempotence, the ACL's produce right) over the write contract,
// whose cloud implementation is cloudwrite.Appender: it submits each
// write as one segment to the cloudwrite.Writer, into the stream's cloud
// partition (kafkaBackend.resolve). consume.Server routes Produce and
// InitProducerId to the Kafka produce server and serves the offsets
// beyond a table's mark from the cloudwrite.Tail.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/tributary-io/tributary/cloudwrite"
	"github.com/tributary-io/tributary/cloudwrite/wire"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/ingest"
	"github.com/tributary-io/tributary/kafka/produce"
	"github.com/tributary-io/tributary/pulsar"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/uplink"
)

// ProduceConfig is the cloud write path (cloud_produce).
type ProduceConfig struct {
	// Enabled accepts Kafka producers on the cloud Kafka listener,
	// Pulsar producers on the cloud Pulsar listener and HTTP (Confluent
	// REST v3) and gRPC ProduceService producers on the cloud HTTP
	// port. Default false (the cloud server only reads).
	Enabled bool `yaml:"enabled"`
	// ServerID names this server in its WAL objects, its records' node
	// column and the table jobs' leases. Default: the host name and a
	// random suffix, new at every start (the server keeps no state).
	ServerID string `yaml:"server_id"`
	// FlushInterval: a produce request waits at most this long for its
	// WAL object to be cut. Default 250ms.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// FlushBytes: a WAL object is cut as soon as this much is
	// buffered. Default 8MiB.
	FlushBytes config.ByteSize `yaml:"flush_bytes"`
	// MaxBufferedBytes bounds what the server holds unanswered; a
	// produce beyond it gets the protocol's retriable back-pressure
	// (Kafka KAFKA_STORAGE_ERROR, Pulsar SEND_ERROR ServiceNotReady,
	// HTTP 429, gRPC RESOURCE_EXHAUSTED).
	// Default 64MiB.
	MaxBufferedBytes config.ByteSize `yaml:"max_buffered_bytes"`
	// AutoCreate creates unknown streams (and their cloud partition) on
	// Produce (Kafka) and on a producer's lookup (Pulsar). Default
	// false.
	AutoCreate bool `yaml:"auto_create"`
	// CommitInterval is how often the table job commits sequenced
	// records to the tables. Default 1s.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// Lease: a table's commit job is one server's at a time, by a lease
	// in the state database renewed every commit_interval; when its
	// server dies another takes the table over this long after. Default
	// 30s, longer than commit_interval.
	Lease time.Duration `yaml:"lease"`
	// Grace: a WAL object is deleted this long after its records are all
	// in their tables. Default 1m.
	Grace time.Duration `yaml:"grace"`
	// OrphanGrace: a WAL object never sequenced (its server died after
	// the put) is deleted when older than this; every cloud server must
	// have the same. A flush whose put and sequencing take more than half
	// of it is refused (retriable), so keep minutes in production; at
	// least 1s. Default 10m.
	OrphanGrace time.Duration `yaml:"orphan_grace"`
}

func (p *ProduceConfig) defaults() {
	if p.FlushInterval == 0 {
		p.FlushInterval = cloudwrite.DefaultFlushInterval
	}
	if p.FlushBytes == 0 {
		p.FlushBytes = cloudwrite.DefaultFlushBytes
	}
	if p.MaxBufferedBytes == 0 {
		p.MaxBufferedBytes = cloudwrite.DefaultMaxBufferedBytes
	}
	if p.CommitInterval == 0 {
		p.CommitInterval = cloudwrite.DefaultCommitInterval
	}
	if p.Lease == 0 {
		p.Lease = cloudwrite.DefaultLeaseDuration
	}
	if p.Grace == 0 {
		p.Grace = cloudwrite.DefaultCollectGrace
	}
	if p.OrphanGrace == 0 {
		p.OrphanGrace = cloudwrite.DefaultOrphanGrace
	}
}

func (p *ProduceConfig) validate(bad func(field, format string, args ...any)) {
	if p.FlushInterval < time.Millisecond || p.FlushInterval > time.Minute {
		bad("cloud_produce.flush_interval", "%v: want 1ms to 1m", p.FlushInterval)
	}
	if p.FlushBytes < 1<<10 || p.FlushBytes > wire.MaxObjectBytes/2 {
		bad("cloud_produce.flush_bytes", "%d: want 1KiB to 128MiB", p.FlushBytes)
	}
	if p.MaxBufferedBytes < p.FlushBytes {
		bad("cloud_produce.max_buffered_bytes", "%d: want at least flush_bytes", p.MaxBufferedBytes)
	}
	if p.CommitInterval <= 0 || p.Grace <= 0 {
		bad("cloud_produce.commit_interval", "commit_interval and grace must be positive")
	}
	if p.Lease <= p.CommitInterval {
		bad("cloud_produce.lease", "%v: want longer than commit_interval %v", p.Lease, p.CommitInterval)
	}
	if p.OrphanGrace < time.Second {
		bad("cloud_produce.orphan_grace", "%v: want at least 1s (longer than a put and a sequencing)", p.OrphanGrace)
	}
}

// writePath is the cloud write path of a server.
type writePath struct {
	st     *cloudwrite.State
	bucket *uplink.BlobBucket
	w      *cloudwrite.Writer
	app    *cloudwrite.Appender // the write contract over w, every front door's
	tail   *cloudwrite.Tail
	commit *cloudwrite.Committer
	kafka  *kafkaProducer
	pulsar pulsarProducer
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Server) openWritePath(ctx context.Context) (*writePath, error) {
	if s.cfg.Produce.ServerID == "" {
		h, _ := os.Hostname()
		var r [4]byte
		rand.Read(r[:])
		s.cfg.Produce.ServerID = fmt.Sprintf("cloud-%s-%s", h, hex.EncodeToString(r[:]))
	}
	pc := s.cfg.Produce
	st, err := cloudwrite.OpenState(s.cfg.State.URI)
	if err != nil {
		return nil, err
	}
	b, err := uplink.OpenBucket(ctx, s.cfg.Catalog.Warehouse, s.cfg.Storage.Stores())
	if err != nil {
		st.Close()
		return nil, err
	}
	store := cloudwrite.BucketStore{B: b}
	log := s.log.With("component", "cloud-write")
	wp := &writePath{st: st, bucket: b, done: make(chan struct{})}
	pause, pauseSkip := testPause(log)
	wp.w = cloudwrite.NewWriter(cloudwrite.Config{Server: pc.ServerID, FlushInterval: pc.FlushInterval, FlushBytes: int(pc.FlushBytes),
		MaxBufferedBytes: int64(pc.MaxBufferedBytes), OrphanGrace: pc.OrphanGrace, Logger: log, Metrics: s.cwm,
		TestPause: pause, TestPauseSkip: pauseSkip}, st, store)
	wp.tail = cloudwrite.NewTail(st, store, 0)
	wp.commit = cloudwrite.NewCommitter(cloudwrite.CommitConfig{Server: pc.ServerID, Interval: pc.CommitInterval, Lease: pc.Lease,
		Grace: pc.Grace, OrphanGrace: pc.OrphanGrace, Logger: log, Put: b.WriteAll}, s.cat, st, wp.tail, store)
	kcfg := s.kafkaConfig()
	kb := &kafkaBackend{s: s, wp: wp}
	wp.app = cloudwrite.NewAppender(wp.w, kb.resolve)
	ps, err := produce.NewServer(produce.Config{Config: kcfg, AutoCreate: pc.AutoCreate}, kb, wp.app)
	if err != nil {
		wp.close()
		return nil, err
	}
	wp.kafka = &kafkaProducer{Server: ps, kb: kb, autoCreate: pc.AutoCreate}
	wp.pulsar = pulsarProducer{Appender: wp.app, kb: kb}
	cctx, cancel := context.WithCancel(context.Background())
	wp.cancel = cancel
	go func() {
		defer close(wp.done)
		wp.commit.Run(cctx)
	}()
	return wp, nil
}

// testPause is the flush pipeline's test pause point and the flushes
// let through first, from the environment (cloudwrite.TestPauseEnv,
// tests only); "" when unset or not a point.
func testPause(log *slog.Logger) (string, int) {
	v := os.Getenv(cloudwrite.TestPauseEnv)
	if v == "" {
		return "", 0
	}
	p, skip, ok := cloudwrite.ParseTestPause(v)
	if !ok {
		log.Error("ignoring a bad test pause point", "env", cloudwrite.TestPauseEnv, "value", v)
		return "", 0
	}
	log.Warn("test hook: cloud write flushes block at a point until the process is killed", "env", cloudwrite.TestPauseEnv, "point", p, "after", skip)
	return p, skip
}

// close answers what is buffered, stops the table job and closes the
// state and the bucket.
func (wp *writePath) close() {
	if wp.w != nil {
		wp.w.Close()
	}
	if wp.cancel != nil {
		wp.cancel()
		<-wp.done
	}
	wp.st.Close()
	wp.bucket.Close()
}

// pulsarProducer is the cloud Pulsar server's write path
// (pulsar.ProduceBackend): the write contract, the stream's cloud
// partitions as the Kafka side resolves them (allocated for an existing
// stream, the stream created with cloud_produce.auto_create), and the
// named producers' state in the state database.
type pulsarProducer struct {
	*cloudwrite.Appender
	kb *kafkaBackend
}

func (pp pulsarProducer) Partitions(ctx context.Context, stream string) ([]int32, error) {
	if err := ingest.CheckWritable(stream); err != nil {
		return nil, err
	}
	ps, err := pp.kb.resolve(ctx, stream)
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(ps))
	for i, p := range ps {
		out[i] = p.Partition
	}
	return out, nil
}

func (pp pulsarProducer) LastSequence(ctx context.Context, stream string, p int32, producer string) (int64, error) {
	return pp.kb.wp.st.LastSequence(ctx, stream, p, producer)
}

var _ pulsar.ProduceBackend = pulsarProducer{}

// kafkaProducer is the produce side of the cloud Kafka listener
// (consume.Producer).
type kafkaProducer struct {
	*produce.Server
	kb         *kafkaBackend
	autoCreate bool
}

// EnsurePartition gives an existing stream its cloud partition, and
// creates a missing one when create and cloud_produce.auto_create.
func (kp *kafkaProducer) EnsurePartition(ctx context.Context, stream string, create bool) (bool, error) {
	owners, err := kp.kb.s.cat.Owners(ctx, stream)
	switch {
	case errors.Is(err, tables.ErrNoSuchStream):
		if !create || !kp.autoCreate {
			return false, nil
		}
	case err != nil:
		return false, err
	case len(kp.kb.topicInfo(stream, owners).Partitions) > 0:
		return false, nil
	}
	_, err = kp.kb.EnsureStream(ctx, stream)
	return err == nil, err
}

// kafkaBackend is the cloud's produce.Backend: a stream's cloud
// partitions (allocated to cloudwrite.DefaultCloudPartitions in the
// catalog), all of them led by this server — any cloud server accepts
// any of them —, written through the Writer.
type kafkaBackend struct {
	s  *Server
	wp *writePath
}

func (kb *kafkaBackend) NodeID() string { return kb.s.cfg.Produce.ServerID }

func (kb *kafkaBackend) Brokers() []produce.Broker { return []produce.Broker{{NodeID: kb.NodeID()}} }

// topicInfo lists the stream's cloud partitions.
func (kb *kafkaBackend) topicInfo(stream string, owners map[int32]tables.Ownership) produce.TopicInfo {
	ti := produce.TopicInfo{Stream: stream}
	for p, o := range owners {
		if o.Node == cloudwrite.DefaultCloudPartitions {
			ti.Partitions = append(ti.Partitions, produce.PartitionInfo{Partition: p, Leader: kb.NodeID(), Epoch: o.Epoch})
		}
	}
	sort.Slice(ti.Partitions, func(i, j int) bool { return ti.Partitions[i].Partition < ti.Partitions[j].Partition })
	return ti
}

func (kb *kafkaBackend) Topics(ctx context.Context) ([]produce.TopicInfo, error) {
	names, err := kb.s.cat.ListStreams(ctx)
	if err != nil {
		return nil, err
	}
	var out []produce.TopicInfo
	for _, n := range names {
		ti, err := kb.Topic(ctx, n)
		if err == nil {
			out = append(out, ti)
		}
	}
	return out, nil
}

func (kb *kafkaBackend) Topic(ctx context.Context, stream string) (produce.TopicInfo, error) {
	owners, err := kb.s.cat.Owners(ctx, stream)
	if errors.Is(err, tables.ErrNoSuchStream) {
		return produce.TopicInfo{}, produce.ErrUnknownStream
	}
	if err != nil {
		return produce.TopicInfo{}, err
	}
	ti := kb.topicInfo(stream, owners)
	if len(ti.Partitions) == 0 {
		// The stream exists (an edge's): give it its cloud partition.
		return kb.EnsureStream(ctx, stream)
	}
	return ti, nil
}

// EnsureStream creates the stream if missing and allocates its cloud
// partition through the catalog, as an edge node allocates its own.
func (kb *kafkaBackend) EnsureStream(ctx context.Context, stream string) (produce.TopicInfo, error) {
	if _, err := kb.s.cat.AllocatePartition(ctx, stream, cloudwrite.DefaultCloudPartitions); err != nil {
		return produce.TopicInfo{}, err
	}
	owners, err := kb.s.cat.Owners(ctx, stream)
	if err != nil {
		return produce.TopicInfo{}, err
	}
	return kb.topicInfo(stream, owners), nil
}

// AllocateProducerID takes the next id of the state database's counter,
// shared by every cloud server. Cloud and edge ids may coincide: the
// cloud's producer state is its own (cloudwrite.State).
func (kb *kafkaBackend) AllocateProducerID(ctx context.Context) (int64, error) {
	return kb.wp.st.NextID(ctx, "kafka-producer-id", 1)
}

// ProducerRuns is empty: the cloud's idempotence state is in the state
// database, checked when each object is sequenced.
func (kb *kafkaBackend) ProducerRuns(context.Context) ([]produce.ProducerRun, error) { return nil, nil }

var _ produce.Backend = (*kafkaBackend)(nil)

// resolve gives a stream its cloud partitions (cloudwrite.Resolve):
// allocated for an existing stream that has none, and the stream created
// first with cloud_produce.auto_create.
func (kb *kafkaBackend) resolve(ctx context.Context, stream string) ([]cloudwrite.Partition, error) {
	ti, err := kb.Topic(ctx, stream)
	if errors.Is(err, produce.ErrUnknownStream) && kb.s.cfg.Produce.AutoCreate {
		ti, err = kb.EnsureStream(ctx, stream)
	}
	if errors.Is(err, produce.ErrUnknownStream) {
		return nil, fmt.Errorf("%s: %w", stream, err)
	}
	if err != nil {
		return nil, err
	}
	ps := make([]cloudwrite.Partition, len(ti.Partitions))
	for i, p := range ti.Partitions {
		ps[i] = cloudwrite.Partition{Partition: p.Partition, Epoch: p.Epoch}
	}
	return ps, nil
}
