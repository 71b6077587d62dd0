package produce

// Produce (key 0): v3–v12.
//
// Behaviour:
//   - Only message format v2 record batches (v3+), exactly one batch per
//     partition; v13 (topic ids) is not offered.
//   - acks must be -1, 0 or 1 (else INVALID_REQUIRED_ACKS). For every acks
//     value the batch is appended to the WAL — durable, fsynced; with acks
//     1 and -1 the response is written only after that append returned.
//     With acks=0 no response is written, and a partition error closes the
//     connection (as Kafka does), so the client refreshes its metadata.
//   - Pipelined (kafka.Starter): a request's batches are decoded (its
//     partitions concurrently) and their appends queued to the WAL on the
//     connection's read goroutine, which then reads the next request while
//     these wait for their fsync; the appends of a connection reach the
//     WAL in request order and share its group commits, and the responses
//     are written in request order. An idempotent producer's batch is
//     chained to its previous one (producers.go): if that one is refused
//     (the WAL's budget, say), this one is refused too with
//     OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka answers a batch that does not
//     follow the last appended one, and nothing of it is stored; the
//     client resends both in order.
//   - A batch is checked whole (kafka.CheckBatch: CRC, decompression within
//     bounds, every record parsed) without building per-record objects, and
//     appended as ONE WAL entry (tributary.Batch: the batch uncompressed, Source
//     "kafka", Topic and Stream the topic name, ClientID the request
//     header's client id, the principal). Read from the WAL, each of its
//     records is one tributary.Record exactly as before: key/value nil vs
//     empty kept, headers in order and byte-exact, ProducerTimestamp the
//     batch's first timestamp plus the record's delta, producer id, epoch
//     and per-record sequence from the batch.
//   - Each record carries the connection's principal (Record.Principal; ""
//     for an anonymous client).
//   - Errors, per partition: INVALID_TOPIC_EXCEPTION (17) for names that are
//     not streams; TOPIC_AUTHORIZATION_FAILED (29) for every partition of a
//     topic the principal may not produce to (checked before the stream is
//     looked up or auto-created, so nothing is created, written, or told
//     about the stream's existence); INVALID_PRODUCER_ID_MAPPING (49) for a
//     batch whose producer id was handed to another principal
//     (producers.go); UNKNOWN_TOPIC_OR_PARTITION (3) for unknown streams (unless
//     auto-creation is on) or partitions; NOT_LEADER_OR_FOLLOWER (6) for a
//     partition owned by another node (the table's tributary.owner.<p>, or
//     the backend's ErrNotLeader when ownership moved after the lookup), so
//     the client refreshes Metadata and follows the partition to its new
//     leader; a partition this node took over is its own and accepted; MESSAGE_TOO_LARGE (10) for a batch
//     over MaxBatchBytes or decompressing beyond MaxDecompressedBytes;
//     CORRUPT_MESSAGE (2) for a bad CRC or undecodable batch; INVALID_RECORD
//     (87) for a valid but unacceptable batch (wrong magic, several batches,
//     control or transactional batches; transactional produce is refused
//     the same way); OUT_OF_ORDER_SEQUENCE_NUMBER (45) and
//     INVALID_PRODUCER_EPOCH (47) from idempotence (see producers.go).
//   - Back-pressure: when the WAL refuses an append for its disk budget
//     (tributary.ReasonBudget) the partition gets KAFKA_STORAGE_ERROR (56) and
//     the response's throttle time is set to BackpressureThrottle. 56 is
//     retriable in kgo (which refreshes metadata first), librdkafka, sarama
//     and the Java client (TestBackpressureRetriedByClients), and an
//     idempotent producer keeps its sequence since nothing was written. THROTTLING_QUOTA_EXCEEDED
//     is only defined for admin requests, and NOT_ENOUGH_REPLICAS would
//     misname the cause. When too few replicas could store the batch
//     (tributary.ReasonReplication, cluster.replication_policy refuse) it
//     gets NOT_ENOUGH_REPLICAS (19), retriable in every client. Other
//     append failures get 56 too: nothing was written, so a retry is safe.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
)

// partResult is the outcome of producing one partition.
type partResult struct {
	code       int16
	msg        string
	baseOffset int64
	throttle   bool
}

// StartRequest (kafka.Starter) starts a Produce request on the connection's read
// goroutine: see startProduce. Every other request is Handle's.
func (s *Server) StartRequest(ctx context.Context, req *kafka.Request) (func() (kmsg.Response, bool), bool) {
	r, ok := req.Body.(*kmsg.ProduceRequest)
	if !ok {
		return nil, false
	}
	return s.startProduce(ctx, req, r), true
}

func (s *Server) handleProduce(ctx context.Context, req *kafka.Request, r *kmsg.ProduceRequest) (kmsg.Response, bool) {
	return s.startProduce(ctx, req, r)()
}

// produceSlot is one partition of a Produce request and its outcome.
type produceSlot struct {
	topic     string
	partition int32
	res       partResult
	batch     *kafka.Batch // checked, to be appended
	stored    []byte       // the batch uncompressed, as the WAL stores it
	reserve   int64        // decoding bytes held until the append ends
}

// startProduce looks the request's topics up, decodes its partitions'
// batches (concurrently) and queues their appends in partition order
// before it returns, so that the appends of a connection's pipelined
// requests reach the WAL in request order; the returned finish waits
// for them and builds the response.
func (s *Server) startProduce(ctx context.Context, req *kafka.Request, r *kmsg.ProduceRequest) func() (kmsg.Response, bool) {
	start := time.Now()
	var slots [][]produceSlot // per topic, per partition
	reqErr := partResult{}
	switch {
	case r.Acks != -1 && r.Acks != 0 && r.Acks != 1:
		reqErr = partResult{code: kafka.CodeInvalidRequiredAcks, msg: fmt.Sprintf("acks %d: want -1, 0 or 1", r.Acks)}
	case r.TransactionID != nil:
		reqErr = partResult{code: kafka.CodeInvalidRecord, msg: "transactional produce is not supported"}
	}

	topics := make(map[string]topicLookup) // per request: one lookup per topic
	var decoded sync.WaitGroup
	for _, rt := range r.Topics {
		ps := make([]produceSlot, len(rt.Partitions))
		slots = append(slots, ps)
		var tl topicLookup
		if reqErr.code == 0 {
			var ok bool
			if tl, ok = topics[rt.Topic]; !ok {
				tl = s.produceTopic(ctx, req, rt.Topic, true)
				topics[rt.Topic] = tl
			}
		}
		for i, rp := range rt.Partitions {
			ps[i].topic, ps[i].partition = rt.Topic, rp.Partition
			if reqErr.code != 0 {
				ps[i].res = reqErr
				continue
			}
			res, ok := s.checkPartition(tl, rp)
			if !ok && tl.cached && (res.code == kafka.CodeNotLeaderOrFollower || res.code == kafka.CodeUnknownTopicOrPartition) {
				// Refused from a remembered lookup: look again (the
				// partition may have moved here, or been added).
				tl = s.produceTopic(ctx, req, rt.Topic, false)
				topics[rt.Topic] = tl
				res, ok = s.checkPartition(tl, rp)
			}
			if !ok {
				ps[i].res = res
				continue
			}
			decoded.Add(1)
			go func(sl *produceSlot, records []byte) {
				defer decoded.Done()
				s.decodePartition(ctx, req, sl, records)
			}(&ps[i], rp.Records)
		}
	}
	decoded.Wait()
	var appended sync.WaitGroup
	for ti := range slots {
		for i := range slots[ti] {
			if sl := &slots[ti][i]; sl.batch != nil {
				appended.Add(1)
				s.appendPartition(ctx, req, sl, start, appended.Done)
			}
		}
	}
	return func() (kmsg.Response, bool) {
		appended.Wait()
		return s.produceResponse(r, slots)
	}
}

func (s *Server) produceResponse(r *kmsg.ProduceRequest, slots [][]produceSlot) (kmsg.Response, bool) {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	anyErr := false
	for ti, rt := range r.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for _, sl := range slots[ti] {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = sl.partition
			sp.ErrorCode = sl.res.code
			sp.BaseOffset = -1
			sp.LogAppendTime = -1
			sp.LogStartOffset = -1
			if sl.res.code == 0 {
				sp.BaseOffset = sl.res.baseOffset
			} else {
				anyErr = true
				s.stats.partErrs.Add(1)
				if sl.res.msg != "" && r.Version >= 8 {
					sp.ErrorMessage = kmsg.StringPtr(sl.res.msg)
				}
			}
			if sl.res.throttle {
				resp.ThrottleMillis = int32(s.cfg.BackpressureThrottle.Milliseconds())
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if r.Acks == 0 {
		return nil, anyErr
	}
	return resp, false
}

// topicCache remembers the topics Produce found for topicCacheTTL: looking
// a stream up reads its table's metadata from the catalog (measured at a
// fifth of the node's CPU under load, once per request), while the
// partitions' owners change rarely, and an append to a partition this node
// no longer owns is refused by the backend (NOT_LEADER_OR_FOLLOWER) all
// the same; a partition refused from a cached lookup (owned elsewhere,
// unknown) is looked up again, so a partition that moved here is taken at
// once. Metadata requests are not served from it.
type topicCache struct {
	mu sync.Mutex
	m  map[string]cachedTopic
}

type cachedTopic struct {
	info TopicInfo
	at   time.Time
}

// topicCacheTTL is how long a Produce topic lookup is reused;
// topicCacheMax bounds the entries (beyond, the cache starts again).
const (
	topicCacheTTL = time.Second
	topicCacheMax = 4096
)

func (c *topicCache) get(topic string) (TopicInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[topic]
	if !ok || time.Since(e.at) > topicCacheTTL {
		return TopicInfo{}, false
	}
	return e.info, true
}

func (c *topicCache) put(topic string, ti TopicInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= topicCacheMax {
		c.m = make(map[string]cachedTopic)
	}
	c.m[topic] = cachedTopic{info: ti, at: time.Now()}
}

// topicLookup is a topic's info or the error code for all its partitions.
type topicLookup struct {
	info   TopicInfo
	code   int16
	msg    string
	cached bool // info comes from s.topics
}

// produceTopic looks topic up for Produce, from s.topics when cached
// allows (a refusal from a cached lookup is looked up again).
func (s *Server) produceTopic(ctx context.Context, req *kafka.Request, topic string, cached bool) topicLookup {
	if _, _, err := tributary.ParseStream(topic); err != nil {
		return topicLookup{code: kafka.CodeInvalidTopic, msg: err.Error()}
	}
	if !req.Authorize(auth.Produce, topic, "") { // before the lookup: existence is not told, nothing is created
		return topicLookup{code: kafka.CodeTopicAuthorizationFailed, msg: "not authorized to produce to " + topic}
	}
	if ti, ok := s.topics.get(topic); ok && cached {
		return topicLookup{info: ti, cached: true}
	}
	ti, code, _ := s.lookupTopic(ctx, topic, s.cfg.AutoCreate)
	if code == 0 {
		s.topics.put(topic, ti)
	}
	var msg string
	switch code {
	case kafka.CodeUnknownTopicOrPartition:
		msg = fmt.Sprintf("stream %q does not exist", topic)
		if !s.cfg.AutoCreate {
			msg += " (auto-creation is off)"
		}
	case kafka.CodeUnknownServerError:
		msg = "stream lookup failed"
	}
	return topicLookup{info: ti, code: code, msg: msg}
}

// checkPartition validates ownership and size before any decoding.
func (s *Server) checkPartition(tl topicLookup, rp kmsg.ProduceRequestTopicPartition) (partResult, bool) {
	if tl.code != 0 {
		return partResult{code: tl.code, msg: tl.msg}, false
	}
	var owner *PartitionInfo
	for i := range tl.info.Partitions {
		if tl.info.Partitions[i].Partition == rp.Partition {
			owner = &tl.info.Partitions[i]
			break
		}
	}
	switch {
	case owner == nil:
		return partResult{code: kafka.CodeUnknownTopicOrPartition, msg: fmt.Sprintf("partition %d does not exist", rp.Partition)}, false
	case owner.Leader != s.b.NodeID():
		return partResult{code: kafka.CodeNotLeaderOrFollower, msg: fmt.Sprintf("partition %d is owned by node %q", rp.Partition, owner.Leader)}, false
	case len(rp.Records) > int(s.cfg.MaxBatchBytes):
		return partResult{code: kafka.CodeMessageTooLarge, msg: fmt.Sprintf("batch of %d bytes exceeds %d", len(rp.Records), s.cfg.MaxBatchBytes)}, false
	}
	return partResult{}, true
}

// decodePartition decodes one partition's batch into sl.batch, holding
// its decompressed size in the decoding budget (sl.reserve, released when
// its append ends), or sets sl.res to the refusal.
func (s *Server) decodePartition(ctx context.Context, req *kafka.Request, sl *produceSlot, raw []byte) {
	// Room for the decompressed records first: an uncompressed batch is as
	// large as sent, a compressed one may reach MaxDecompressedBytes.
	reserve := s.cfg.MaxDecompressedBytes
	if len(raw) > 22 && raw[22]&0x07 == 0 {
		reserve = min(reserve, int64(len(raw)))
	}
	if err := s.decoding.Acquire(ctx, reserve); err != nil {
		sl.res = partResult{code: kafka.CodeKafkaStorageError, msg: "shutting down"}
		return
	}
	b, stored, err := kafka.CheckBatch(raw, kafka.BatchLimits{MaxDecompressed: s.cfg.MaxDecompressedBytes, MaxHeadersPerRecord: s.cfg.MaxHeadersPerRecord})
	if err != nil {
		s.decoding.Release(reserve)
		s.log.Info("kafka: refusing batch", "head", fmt.Sprintf("%x", raw[:min(len(raw), 80)]), "client", req.ClientID, "stream", sl.topic, "partition", sl.partition, "err", err)
		sl.res = partResult{code: batchErrorCode(err), msg: err.Error()}
		return
	}
	if int64(b.BodyBytes) < reserve {
		s.decoding.Release(reserve - int64(b.BodyBytes))
		reserve = int64(b.BodyBytes)
	}
	sl.batch, sl.stored, sl.reserve = b, stored, reserve
}

// appendPartition checks a decoded batch's idempotence and queues its
// append; done is called once sl.res holds the outcome. It runs on the
// connection's read goroutine, in request and partition order.
//
// An idempotent producer's sequence range is reserved (producerEntry's
// pending runs) before the append is queued, under the entry's lock, and
// the append is chained to the producer's previous one (Backend's
// Write.After), so that a batch is never stored unless the one before it
// was; the lock is not held while the append waits for its fsync. The
// batch carries producer id, epoch and sequences, so the idempotence
// state is written in the same transaction as the data.
func (s *Server) appendPartition(ctx context.Context, req *kafka.Request, sl *produceSlot, start time.Time, done func()) {
	b := sl.batch
	finish := func(res partResult) {
		s.decoding.Release(sl.reserve)
		sl.batch, sl.stored, sl.res = nil, nil, res
		if res.code == 0 {
			s.latency.Observe(time.Since(start).Seconds())
		}
		done()
	}
	if b.Idempotent() && !s.prod.claim(b.ProducerID, req.Principal.Name) {
		s.log.Warn("kafka: refusing a producer id bound to another principal", "producer_id", b.ProducerID,
			"principal", req.Principal.String(), "client", req.ClientID, "stream", sl.topic, "partition", sl.partition)
		finish(partResult{code: kafka.CodeInvalidProducerIDMapping, msg: fmt.Sprintf("producer id %d was not assigned to this principal", b.ProducerID)})
		return
	}
	wb := &tributary.Batch{Stream: sl.topic, Partition: sl.partition, Topic: sl.topic, Source: "kafka",
		ClientID: req.ClientID, Principal: req.Principal.Name, Records: sl.stored}
	if !b.Idempotent() {
		s.submit(ctx, nil, wb, func(err error) { finish(s.appendResult(wb, err)) })
		return
	}
	e := s.prod.lock(producerKey{sl.topic, sl.partition, b.ProducerID})
	defer e.mu.Unlock()
	last := b.LastSequence()
	off, dup, inflight, code := e.check(b.ProducerEpoch, b.BaseSequence, last)
	switch {
	case code != 0:
		finish(partResult{code: code, msg: fmt.Sprintf("producer %d epoch %d sequences %d-%d: known epoch %d, last sequence %d",
			b.ProducerID, b.ProducerEpoch, b.BaseSequence, last, e.epoch, e.lastSeq)})
		return
	case dup:
		s.stats.dups.Add(1)
		finish(partResult{baseOffset: off})
		return
	case inflight:
		// A resend (from another connection) of a batch still being
		// written: retriable, and the retry finds it appended.
		finish(partResult{code: kafka.CodeKafkaStorageError, msg: fmt.Sprintf("producer %d sequences %d-%d are being written, retry", b.ProducerID, b.BaseSequence, last)})
		return
	}
	run := ProducerRun{Stream: sl.topic, Partition: sl.partition, ProducerID: b.ProducerID, ProducerEpoch: b.ProducerEpoch,
		FirstSeq: b.BaseSequence, LastSeq: last, Principal: req.Principal.Name}
	p := e.reserve(run)
	p.ticket = s.submit(ctx, e.tail, wb, func(err error) {
		// Stored, even if the replicas did not confirm it: the run is
		// recorded, so the client's retry is answered as a duplicate.
		stored := err == nil || errors.Is(err, tributary.ErrAfterAppend)
		e.mu.Lock()
		if stored {
			run.FirstOffset = wb.Offset
		}
		e.settle(p, run, stored)
		e.mu.Unlock()
		finish(s.appendResult(wb, err))
	})
	e.tail = p.ticket
}

// submit queues the append of b to its partition after the one after
// names; done gets its outcome, never before submit returns (also for a
// refusal at once: it takes the producer's lock, which the caller holds).
func (s *Server) submit(ctx context.Context, after tributary.Ticket, b *tributary.Batch, done func(error)) tributary.Ticket {
	t, err := s.a.Submit(ctx, &tributary.Write{Batch: b, Chosen: true, After: after}, tributary.Durable, done)
	if err != nil {
		go done(err)
	}
	return t
}

// LoadProducerRuns folds runs (oldest first per key) into the
// idempotent-producer state. A node that took a partition over loads the
// runs of the records it copied from the previous owner, so that a producer
// which follows the partition here and retries a batch the previous owner
// had appended gets the original offset rather than a second copy.
func (s *Server) LoadProducerRuns(runs []ProducerRun) { s.prod.load(runs) }

// appendResult is a partition's outcome of its append.
func (s *Server) appendResult(b *tributary.Batch, err error) partResult {
	if err != nil {
		if errors.Is(err, ErrPredecessorFailed) {
			// The producer's previous batch was refused, so this one is
			// out of sequence, as Kafka answers it; the client resends
			// both in order.
			return partResult{code: kafka.CodeOutOfOrderSequence, msg: "the producer's previous batch was not appended"}
		}
		if tributary.ReasonOf(err) == tributary.ReasonFenced {
			// Owned by another node now, even if a replica said so only
			// after the WAL stored the batch: the client follows the
			// partition to its new leader (docs/cluster.md "Refusal codes").
			return partResult{code: kafka.CodeNotLeaderOrFollower, msg: err.Error()}
		}
		if errors.Is(err, tributary.ErrAfterAppend) {
			// Stored here and to be uploaded, but not on enough replicas:
			// Kafka's answer for a write the leader kept. A retry of an
			// idempotent producer's batch finds it stored (the run was
			// recorded); anything else retried is stored again, as with
			// Kafka.
			s.stats.backpressured.Add(1)
			s.log.Warn("kafka append stored but not replicated", "stream", b.Stream, "partition", b.Partition, "err", err)
			return partResult{code: kafka.CodeNotEnoughReplicasAfterAppend, msg: "stored on this node but on too few edge replicas: " + err.Error(), throttle: true}
		}
		switch tributary.ReasonOf(err) {
		case tributary.ReasonBudget:
			s.stats.backpressured.Add(1)
			return partResult{code: kafka.CodeKafkaStorageError, msg: "edge WAL disk budget exhausted, retry later", throttle: true}
		case tributary.ReasonReplication:
			s.stats.backpressured.Add(1)
			return partResult{code: kafka.CodeNotEnoughReplicas, msg: "too few edge replicas to store the batch, retry later", throttle: true}
		}
		s.log.Warn("kafka append", "stream", b.Stream, "partition", b.Partition, "err", err)
		return partResult{code: kafka.CodeKafkaStorageError, msg: "append failed: " + err.Error()}
	}
	s.stats.batches.Add(1)
	s.stats.records.Add(int64(b.Count()))
	return partResult{baseOffset: b.Offset}
}

func batchErrorCode(err error) int16 {
	switch {
	case errors.Is(err, kafka.ErrBatchTooLarge):
		return kafka.CodeMessageTooLarge
	case errors.Is(err, kafka.ErrInvalidBatch):
		return kafka.CodeInvalidRecord
	default:
		return kafka.CodeCorruptMessage
	}
}
