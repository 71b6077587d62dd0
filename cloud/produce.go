package cloud

// The cloud write path's front door: Kafka producers on the cloud Kafka
// listener. The request handling is kafka/produce's (validation, caps,
// codecs, idempotence, the ACL's produce right), over kafkaBackend, which
// hands each partition's batch to the cloudwrite.Writer; consume.Server
// routes Produce and InitProducerId to it and serves the offsets beyond
// a table's mark from the cloudwrite.Tail.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cloudwrite"
	"github.com/tributary-io/tributary/cloudwrite/wire"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/grpcapi"
	"github.com/tributary-io/tributary/httpapi"
	"github.com/tributary-io/tributary/internal/kbatch"
	"github.com/tributary-io/tributary/kafka/produce"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/uplink"
	"github.com/tributary-io/tributary/wal"
)

// ProduceConfig is the cloud write path (cloud_produce).
type ProduceConfig struct {
	// Enabled accepts Kafka producers on the cloud Kafka listener.
	// Default false (the cloud server only reads).
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
	// produce beyond it gets a retriable KAFKA_STORAGE_ERROR.
	// Default 64MiB.
	MaxBufferedBytes config.ByteSize `yaml:"max_buffered_bytes"`
	// AutoCreate creates unknown streams (and their cloud partition) on
	// Produce. Default false.
	AutoCreate bool `yaml:"auto_create"`
	// CommitInterval is how often the table job commits sequenced
	// records to the tables. Default 1s.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// Grace: a WAL object is deleted this long after its records are all
	// in their tables. Default 1m.
	Grace time.Duration `yaml:"grace"`
	// OrphanGrace: a WAL object never sequenced (its server died after
	// the put) is deleted when older than this; every cloud server must
	// have the same. Default 10m.
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
	if p.OrphanGrace < time.Minute {
		bad("cloud_produce.orphan_grace", "%v: want at least 1m (longer than a put and a sequencing)", p.OrphanGrace)
	}
}

// writePath is the cloud write path of a server.
type writePath struct {
	st     *cloudwrite.State
	bucket *uplink.BlobBucket
	w      *cloudwrite.Writer
	tail   *cloudwrite.Tail
	commit *cloudwrite.Committer
	kafka  *kafkaProducer
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
	st, err := cloudwrite.OpenState(s.cfg.Catalog.URI)
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
	wp.w = cloudwrite.NewWriter(cloudwrite.Config{Server: pc.ServerID, FlushInterval: pc.FlushInterval, FlushBytes: int(pc.FlushBytes),
		MaxBufferedBytes: int64(pc.MaxBufferedBytes), OrphanGrace: pc.OrphanGrace, Logger: log, Metrics: s.cwm}, st, store)
	wp.tail = cloudwrite.NewTail(st, store, 0)
	wp.commit = cloudwrite.NewCommitter(cloudwrite.CommitConfig{Server: pc.ServerID, Interval: pc.CommitInterval,
		Grace: pc.Grace, OrphanGrace: pc.OrphanGrace, Logger: log, Put: b.WriteAll}, s.cat, st, wp.tail, store)
	kcfg := s.kafkaConfig()
	kb := &kafkaBackend{s: s, wp: wp}
	ps, err := produce.NewServer(produce.Config{Config: kcfg, AutoCreate: pc.AutoCreate}, kb)
	if err != nil {
		wp.close()
		return nil, err
	}
	wp.kafka = &kafkaProducer{Server: ps, kb: kb, autoCreate: pc.AutoCreate}
	cctx, cancel := context.WithCancel(context.Background())
	wp.cancel = cancel
	go func() {
		defer close(wp.done)
		wp.commit.Run(cctx)
	}()
	return wp, nil
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

// AppendAsync hands b's records to the Writer; done is called once the
// WAL object holding them is sequenced. A retry the state database
// recognises (another server sequenced it) is answered with the original
// offset. Appends need no chaining: objects are sequenced in the order
// they are cut, and the state database refuses a batch whose
// predecessor was not sequenced as out of order.
func (kb *kafkaBackend) AppendAsync(ctx context.Context, _ produce.Ticket, b *wal.Batch, done func(error)) produce.Ticket {
	recs, err := b.Decode(0)
	if err != nil {
		go done(err)
		return nil
	}
	seg := &wire.Segment{Stream: b.Stream, Partition: b.Partition, ProducerID: -1, Topic: b.Topic, Source: "kafka",
		ClientID: b.ClientID, Principal: b.Principal}
	if h := b.Records; len(h) >= kbatch.HeaderLen {
		seg.ProducerID = int64(binary.BigEndian.Uint64(h[43:]))
		seg.ProducerEpoch = int16(binary.BigEndian.Uint16(h[51:]))
		seg.BaseSequence = int32(binary.BigEndian.Uint32(h[53:]))
	}
	for _, r := range recs {
		r.Timestamp = 0 // the accept time is the sequencing server's
	}
	seg.Records = recs
	kb.wp.w.Submit(seg, func(o cloudwrite.Outcome, err error) {
		switch {
		case errors.Is(err, cloudwrite.ErrBackpressure):
			done(fmt.Errorf("%w: %w", tributary.ErrBudget, err)) // KAFKA_STORAGE_ERROR with a throttle
		case err != nil:
			done(err)
		case errors.Is(o.Err, cloudwrite.ErrOutOfOrder):
			done(fmt.Errorf("%w: %v", produce.ErrPredecessorFailed, o.Err))
		case o.Err != nil:
			done(o.Err)
		default:
			b.Offset = o.First
			done(nil)
		}
	})
	return nil
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

// produce writes the records of an HTTP or gRPC producer: into the
// stream's cloud partition (partition < 0), or the cloud partition named,
// allocating it (and creating the stream with cloud_produce.auto_create)
// first; it returns once they are sequenced, each record's Partition,
// Offset and Timestamp set. Nothing is visible on an error.
func (wp *writePath) produce(ctx context.Context, stream string, partition int32, recs []*tributary.Record) error {
	ti, err := wp.kafka.kb.Topic(ctx, stream)
	if errors.Is(err, produce.ErrUnknownStream) && wp.kafka.autoCreate {
		ti, err = wp.kafka.kb.EnsureStream(ctx, stream)
	}
	if err != nil {
		return err
	}
	if partition < 0 && len(ti.Partitions) > 0 {
		partition = ti.Partitions[0].Partition
	}
	found := false
	for _, p := range ti.Partitions {
		found = found || p.Partition == partition
	}
	if !found {
		return fmt.Errorf("%s partition %d is not a cloud partition: %w", stream, partition, tributary.ErrFenced)
	}
	if len(recs) == 0 {
		return nil
	}
	r0 := recs[0]
	seg := &wire.Segment{Stream: stream, Partition: partition, ProducerID: -1, Topic: r0.Topic, Source: r0.Source,
		ClientID: r0.ClientID, Principal: r0.Principal, Records: recs}
	if seg.Topic == "" {
		seg.Topic = stream
	}
	type res struct {
		o   cloudwrite.Outcome
		err error
	}
	ch := make(chan res, 1)
	wp.w.Submit(seg, func(o cloudwrite.Outcome, err error) { ch <- res{o, err} })
	var r res
	select {
	case r = <-ch:
	case <-ctx.Done():
		return ctx.Err() // the records may still be sequenced: as with a lost answer
	}
	switch {
	case errors.Is(r.err, cloudwrite.ErrBackpressure):
		return fmt.Errorf("%w: %w", tributary.ErrBudget, r.err)
	case r.err != nil:
		return r.err
	}
	for i, rec := range recs {
		rec.Stream, rec.Partition, rec.Offset = stream, partition, r.o.First+int64(i)
	}
	return nil
}

// httpSink and grpcSink are the write path as the HTTP and gRPC produce
// APIs' sinks.
type httpSink struct{ wp *writePath }

func (s httpSink) Produce(ctx context.Context, stream string, partition int32, recs []*tributary.Record) error {
	err := s.wp.produce(ctx, stream, partition, recs)
	if errors.Is(err, produce.ErrUnknownStream) {
		return httpapi.ErrUnknownStream
	}
	return err
}

type grpcSink struct{ wp *writePath }

func (s grpcSink) Produce(ctx context.Context, stream string, partition int32, recs []*tributary.Record) error {
	err := s.wp.produce(ctx, stream, partition, recs)
	if errors.Is(err, produce.ErrUnknownStream) {
		return grpcapi.ErrUnknownStream
	}
	return err
}
