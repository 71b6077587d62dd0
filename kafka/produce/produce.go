package produce

// Produce (key 0): v3–v12.
//
// Behaviour:
//   - Only message format v2 record batches (v3+), exactly one batch per
//     partition; v13 (topic ids) is not offered.
//   - acks must be -1, 0 or 1 (else INVALID_REQUIRED_ACKS). For every acks
//     value the batch is appended to the WAL — durable, fsynced — before the
//     next request of the connection is read; with acks 1 and -1 the
//     response is written only after that append returned. With acks=0 no
//     response is written, and a partition error closes the connection (as
//     Kafka does), so the client refreshes its metadata.
//   - Partitions of one request are appended concurrently, so they share
//     WAL group commits.
//   - Each record becomes one tributary.Record (Source "kafka", Topic and Stream the
//     topic name, ClientID the request header's client id, key/value nil
//     vs empty kept, headers in order and byte-exact, ProducerTimestamp the
//     batch's first timestamp plus the record's delta, producer id, epoch and
//     per-record sequence from the batch).
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

func (s *Server) handleProduce(ctx context.Context, req *kafka.Request, r *kmsg.ProduceRequest) (kmsg.Response, bool) {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	type slot struct {
		topic     string
		partition int32
		res       partResult
	}
	var slots [][]slot // per topic, per partition
	reqErr := partResult{}
	switch {
	case r.Acks != -1 && r.Acks != 0 && r.Acks != 1:
		reqErr = partResult{code: kafka.CodeInvalidRequiredAcks, msg: fmt.Sprintf("acks %d: want -1, 0 or 1", r.Acks)}
	case r.TransactionID != nil:
		reqErr = partResult{code: kafka.CodeInvalidRecord, msg: "transactional produce is not supported"}
	}

	topics := make(map[string]topicLookup) // per request: one lookup per topic
	var wg sync.WaitGroup
	for _, rt := range r.Topics {
		ps := make([]slot, len(rt.Partitions))
		slots = append(slots, ps)
		var tl topicLookup
		if reqErr.code == 0 {
			var ok bool
			if tl, ok = topics[rt.Topic]; !ok {
				tl = s.produceTopic(ctx, req, rt.Topic)
				topics[rt.Topic] = tl
			}
		}
		for i, rp := range rt.Partitions {
			ps[i].topic, ps[i].partition = rt.Topic, rp.Partition
			if reqErr.code != 0 {
				ps[i].res = reqErr
				continue
			}
			if res, ok := s.checkPartition(tl, rp); !ok {
				ps[i].res = res
				continue
			}
			wg.Add(1)
			go func(sl *slot, records []byte) {
				defer wg.Done()
				sl.res = s.producePartition(ctx, req, sl.topic, sl.partition, records)
			}(&ps[i], rp.Records)
		}
	}
	wg.Wait()

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

// topicLookup is a topic's info or the error code for all its partitions.
type topicLookup struct {
	info TopicInfo
	code int16
	msg  string
}

func (s *Server) produceTopic(ctx context.Context, req *kafka.Request, topic string) topicLookup {
	if _, _, err := tributary.ParseStream(topic); err != nil {
		return topicLookup{code: kafka.CodeInvalidTopic, msg: err.Error()}
	}
	if !req.Authorize(auth.Produce, topic, "") { // before the lookup: existence is not told, nothing is created
		return topicLookup{code: kafka.CodeTopicAuthorizationFailed, msg: "not authorized to produce to " + topic}
	}
	ti, code, _ := s.lookupTopic(ctx, topic, s.cfg.AutoCreate)
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

// producePartition decodes one batch, checks idempotence and appends it.
func (s *Server) producePartition(ctx context.Context, req *kafka.Request, topic string, partition int32, raw []byte) (res partResult) {
	clientID := req.ClientID
	start := time.Now()
	defer func() {
		if res.code == 0 {
			s.latency.Observe(time.Since(start).Seconds())
		}
	}()
	// Room for the decompressed records first: an uncompressed batch is as
	// large as sent, a compressed one may reach MaxDecompressedBytes.
	reserve := s.cfg.MaxDecompressedBytes
	if len(raw) > 22 && raw[22]&0x07 == 0 {
		reserve = min(reserve, int64(len(raw)))
	}
	if err := s.decoding.Acquire(ctx, reserve); err != nil {
		return partResult{code: kafka.CodeKafkaStorageError, msg: "shutting down"}
	}
	b, err := kafka.ParseBatch(raw, kafka.BatchLimits{MaxDecompressed: s.cfg.MaxDecompressedBytes, MaxHeadersPerRecord: s.cfg.MaxHeadersPerRecord})
	if err == nil && int64(b.BodyBytes) < reserve {
		s.decoding.Release(reserve - int64(b.BodyBytes))
		reserve = int64(b.BodyBytes)
	}
	defer s.decoding.Release(reserve)
	if err != nil {
		s.log.Info("kafka: refusing batch", "head", fmt.Sprintf("%x", raw[:min(len(raw), 80)]), "client", clientID, "stream", topic, "partition", partition, "err", err)
		return partResult{code: batchErrorCode(err), msg: err.Error()}
	}
	if b.Idempotent() && !s.prod.claim(b.ProducerID, req.Principal.Name) {
		s.log.Warn("kafka: refusing a producer id bound to another principal", "producer_id", b.ProducerID,
			"principal", req.Principal.String(), "client", clientID, "stream", topic, "partition", partition)
		return partResult{code: kafka.CodeInvalidProducerIDMapping, msg: fmt.Sprintf("producer id %d was not assigned to this principal", b.ProducerID)}
	}
	recs := s.walRecords(clientID, req.Principal.Name, topic, partition, b)
	if !b.Idempotent() {
		return s.appendBatch(ctx, recs)
	}
	e := s.prod.lock(producerKey{topic, partition, b.ProducerID})
	defer e.mu.Unlock()
	last := b.LastSequence()
	off, dup, code := e.check(b.ProducerEpoch, b.BaseSequence, last)
	switch {
	case code != 0:
		return partResult{code: code, msg: fmt.Sprintf("producer %d epoch %d sequences %d-%d: known epoch %d, last sequence %d",
			b.ProducerID, b.ProducerEpoch, b.BaseSequence, last, e.epoch, e.lastSeq)}
	case dup:
		s.stats.dups.Add(1)
		return partResult{baseOffset: off}
	}
	res = s.appendBatch(ctx, recs)
	if res.code == 0 {
		e.add(ProducerRun{Stream: topic, Partition: partition, ProducerID: b.ProducerID, ProducerEpoch: b.ProducerEpoch,
			FirstSeq: b.BaseSequence, LastSeq: last, FirstOffset: res.baseOffset, Principal: req.Principal.Name})
	}
	return res
}

// LoadProducerRuns folds runs (oldest first per key) into the
// idempotent-producer state. A node that took a partition over loads the
// runs of the records it copied from the previous owner, so that a producer
// which follows the partition here and retries a batch the previous owner
// had appended gets the original offset rather than a second copy.
func (s *Server) LoadProducerRuns(runs []ProducerRun) { s.prod.load(runs) }

func (s *Server) appendBatch(ctx context.Context, recs []*tributary.Record) partResult {
	if err := s.b.Append(ctx, recs...); err != nil {
		switch tributary.ReasonOf(err) {
		case tributary.ReasonFenced:
			return partResult{code: kafka.CodeNotLeaderOrFollower, msg: err.Error()}
		case tributary.ReasonBudget:
			s.stats.backpressured.Add(1)
			return partResult{code: kafka.CodeKafkaStorageError, msg: "edge WAL disk budget exhausted, retry later", throttle: true}
		case tributary.ReasonReplication:
			s.stats.backpressured.Add(1)
			return partResult{code: kafka.CodeNotEnoughReplicas, msg: "too few edge replicas to store the batch, retry later", throttle: true}
		}
		s.log.Warn("kafka append", "stream", recs[0].Stream, "partition", recs[0].Partition, "err", err)
		return partResult{code: kafka.CodeKafkaStorageError, msg: "append failed: " + err.Error()}
	}
	s.stats.batches.Add(1)
	s.stats.records.Add(int64(len(recs)))
	return partResult{baseOffset: recs[0].Offset}
}

func (s *Server) walRecords(clientID, principal, topic string, partition int32, b *kafka.Batch) []*tributary.Record {
	recs := make([]*tributary.Record, len(b.Records))
	node := s.b.NodeID()
	for i := range b.Records {
		br := &b.Records[i]
		rec := &tributary.Record{
			Stream:            topic,
			Partition:         partition,
			Topic:             topic,
			Key:               br.Key,
			Value:             br.Value,
			Headers:           br.Headers,
			Source:            "kafka",
			ClientID:          clientID,
			Principal:         principal,
			Node:              node,
			ProducerID:        b.ProducerID,
			ProducerEpoch:     b.ProducerEpoch,
			Sequence:          -1,
			ProducerTimestamp: b.FirstTimestamp + br.TimestampDelta,
		}
		if b.Idempotent() {
			rec.Sequence = kafka.AddSeq(b.BaseSequence, int32(i))
		}
		recs[i] = rec
	}
	return recs
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
