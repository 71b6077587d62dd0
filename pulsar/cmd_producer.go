package pulsar

// PRODUCER → PRODUCER_SUCCESS or ERROR; CLOSE_PRODUCER → SUCCESS.
//
// With Config.Produce (the cloud write path) a producer writes one
// partition of a stream: the topic resolves as the consumer side's
// (persistent://<catalog>/<namespace>/<stream>-partition-N, or the
// topic itself for a single-partition stream), and N must be one the
// write path writes (a cloud partition: an edge node's partitions stay
// its own, NotAllowedError). The principal needs auth.Produce on the
// stream, checked before the stream is looked up (AuthorizationError;
// existence is not told, nothing is created). An unknown stream is
// TopicNotFound, unless the write path creates it (cloud_produce.
// auto_create). A producer without a name gets a unique one; a named
// producer is told the last sequence id stored for its name on the
// partition (last_sequence_id), so that it resumes after it and its
// resends are deduplicated (cmd_send.go). A producer id already in use
// on the connection, or a name already producing to the partition on
// this server, is ProducerBusy; more than MaxProducersPerConn producers
// TooManyRequests. Without Config.Produce every PRODUCER is
// NotAllowedError: the server only reads.

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/pulsar/pb"
)

// ProduceBackend is the write path Pulsar producers write through (the
// cloud server's: cloudwrite.Appender and its state database).
type ProduceBackend interface {
	tributary.Appender
	// Partitions returns the partitions of stream that producers may
	// write, allocating or creating them as the write path's policy
	// allows; an error wraps tributary.ErrUnknownStream for a stream
	// that may not be written.
	Partitions(ctx context.Context, stream string) ([]int32, error)
	// LastSequence returns the last sequence id stored for the named
	// producer on the partition, -1 if none (tributary.Dedup).
	LastSequence(ctx context.Context, stream string, partition int32, producer string) (int64, error)
}

// producer is one PRODUCER of a connection.
type producer struct {
	id    uint64
	name  string
	topic topicName
	full  string // the topic partition's full name

	mu      sync.Mutex
	last    tributary.Ticket // the previous SEND's write: the next follows it
	pending []*pendingSend   // in SEND order; answered from the front
	broken  bool             // a SEND failed: later ones fail too until the client reconnects
	closed  bool
}

// key names a producer's partition and name on this server.
func (p *producer) key() string {
	return fmt.Sprintf("%s\x00%d\x00%s", p.topic.stream, p.topic.partition, p.name)
}

func (c *conn) handleProducer(ctx context.Context, cmd *pb.CommandProducer) {
	req := cmd.GetRequestId()
	be := c.s.cfg.Produce
	if be == nil {
		c.sendError(req, pb.ServerError_NotAllowedError,
			"topic "+cmd.GetTopic()+" is read-only here: this Pulsar server serves consumers; produce at an edge node over MQTT or Kafka, or turn on cloud_produce")
		return
	}
	c.pmu.Lock()
	_, busy := c.producers[cmd.GetProducerId()]
	n := len(c.producers)
	c.pmu.Unlock()
	switch {
	case busy:
		c.sendError(req, pb.ServerError_ProducerBusy, fmt.Sprintf("producer id %d is already in use on this connection", cmd.GetProducerId()))
		return
	case n >= c.s.cfg.MaxProducersPerConn:
		c.sendError(req, pb.ServerError_TooManyRequests, fmt.Sprintf("at most %d producers on one connection", c.s.cfg.MaxProducersPerConn))
		return
	}
	t, err := c.producerTopic(ctx, cmd.GetTopic())
	if err != nil {
		c.sendError(req, errorCode(err), fmt.Sprintf("producer on %s: %v", cmd.GetTopic(), err))
		return
	}
	p := &producer{id: cmd.GetProducerId(), name: cmd.GetProducerName(), topic: t, full: t.String(c.s.cfg.Catalog)}
	if p.name == "" {
		p.name = fmt.Sprintf("%s-%d", c.s.instance, c.s.producerSeq.Add(1))
	}
	last, err := be.LastSequence(ctx, t.stream, t.partition, p.name)
	if err != nil {
		c.sendError(req, pb.ServerError_ServiceNotReady, fmt.Sprintf("producer %s on %s: %v", p.name, p.full, err))
		return
	}
	if !c.s.claimProducer(p.key()) {
		c.sendError(req, pb.ServerError_ProducerBusy, fmt.Sprintf("producer %s is already producing to %s", p.name, p.full))
		return
	}
	c.pmu.Lock()
	c.producers[p.id] = p
	c.pmu.Unlock()
	c.log.Debug("pulsar producer", "topic", p.full, "producer", p.name, "last_sequence_id", last)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
		RequestId: proto.Uint64(req), ProducerName: proto.String(p.name), LastSequenceId: proto.Int64(last),
		ProducerReady: proto.Bool(true)}})
}

// producerTopic resolves a producer's topic to a partition the write
// path writes.
func (c *conn) producerTopic(ctx context.Context, name string) (topicName, error) {
	t, err := c.s.parseTopic(name)
	if err != nil {
		return t, err
	}
	if err := c.authorizeAction(auth.Produce, t.stream); err != nil {
		return t, err
	}
	parts, err := c.s.cfg.Produce.Partitions(ctx, t.stream)
	if err != nil {
		return t, fmt.Errorf("topic %s: %w", name, err)
	}
	n, err := c.s.producePartitionCount(ctx, t.stream, parts)
	if err != nil {
		return t, fmt.Errorf("topic %s: %w", name, err)
	}
	if t, err = inTopic(t, name, n, "produce"); err != nil {
		return t, err
	}
	if !slices.Contains(parts, t.partition) {
		return t, fmt.Errorf("%w: partition %d of %s is an edge node's: produce to partition %v", ErrNotAllowed, t.partition, t.stream, parts)
	}
	return t, nil
}

// producePartitionCount is the stream's partition count as the consumer
// side counts it (server.partitions), and at least one beyond every
// partition the write path writes (a partition just allocated may not be
// in the table's metadata the reader holds yet).
func (s *Server) producePartitionCount(ctx context.Context, stream string, parts []int32) (int32, error) {
	n, err := s.partitions(ctx, stream)
	if err != nil && len(parts) == 0 {
		return 0, err
	}
	for _, p := range parts {
		n = max(n, p+1)
	}
	return max(n, 1), nil
}

// handleCloseProducer answers SUCCESS; the producer's SENDs in flight
// are still answered (before the SUCCESS when they are done first).
func (c *conn) handleCloseProducer(cmd *pb.CommandCloseProducer) {
	c.pmu.Lock()
	p := c.producers[cmd.GetProducerId()]
	delete(c.producers, cmd.GetProducerId())
	c.pmu.Unlock()
	if p != nil {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		c.s.releaseProducer(p.key())
	}
	c.sendSuccess(cmd.GetRequestId())
}

// dropProducers forgets every producer of a closing connection.
func (c *conn) dropProducers() {
	c.pmu.Lock()
	ps := c.producers
	c.producers = map[uint64]*producer{}
	c.pmu.Unlock()
	for _, p := range ps {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		c.s.releaseProducer(p.key())
	}
}

// claimProducer takes a producer name on a partition for this server;
// false when another connection holds it.
func (s *Server) claimProducer(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.producerNames[key]; ok {
		return false
	}
	s.producerNames[key] = struct{}{}
	return true
}

func (s *Server) releaseProducer(key string) {
	s.mu.Lock()
	delete(s.producerNames, key)
	s.mu.Unlock()
}
