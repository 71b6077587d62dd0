package consume

// Fetch (key 1), consume side: v4–v12.
//
// v4 is the first version carrying record batches only; v13+ names topics
// by id and is not offered (v12 is the newest version with names; Metadata
// still hands out stable ids derived from the names). Fetch sessions
// (v7+) are not kept: every response has session id 0, which tells
// clients to send full requests.
//
// Behaviour, per partition:
//   - A topic the principal may not consume (auth.Consume) is
//     TOPIC_AUTHORIZATION_FAILED (29) for each of its partitions, decided
//     (and audited) once per request.
//   - The stream's table (cached at most MetadataMaxAge) gives the
//     high-water mark, the partition's committed mark: nothing at or above
//     it is served. LastStableOffset is the same mark (there are no
//     transactions), LogStartOffset the earliest offset in the table.
//   - A fetch offset below the earliest offset is OFFSET_OUT_OF_RANGE; at
//     or beyond the mark, the partition is empty (no error) and the
//     request long-polls.
//   - Records come from the data file whose offset range covers the fetch
//     offset and the row group holding it (tables.Reader), encoded once
//     per row group as uncompressed record batches v2 of up to 128 KiB
//     with the original key, value and headers, and the producer
//     timestamp if set, else the acceptance time in ms, and cached
//     (batches.go, BatchCacheBytes; a scan cannot flush it). A fetch returns whole batches from
//     the one holding the fetch offset: its first batch may start before
//     that offset, and the client skips the records before it, as with a
//     Kafka broker.
//   - Partition max bytes and the request's max bytes bound the batches,
//     except that the first non-empty partition returns at least one
//     batch (KIP-74).
//   - When the response has fewer than MinBytes, the request waits up to
//     MaxWaitMillis, re-reading table metadata every 100 ms, and answers as
//     soon as a new snapshot brings data to any of its partitions.

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/tables"
)

// view loads one partition's state, or returns a Kafka error code.
func (cs *Server) view(ctx context.Context, topic string, p int32) (*tables.Partition, int16) {
	stream, ok := streamOf(topic)
	if !ok {
		return nil, kafka.CodeUnknownTopicOrPartition
	}
	v, err := cs.tc.Partition(ctx, stream, p)
	switch {
	case errors.Is(err, tables.ErrNoSuchStream), errors.Is(err, tables.ErrNoSuchPartition):
		return nil, kafka.CodeUnknownTopicOrPartition
	case err != nil:
		cs.log.Warn("kafka: load partition", "stream", stream, "partition", p, "err", err)
		return nil, kafka.CodeUnknownServerError
	}
	return v, 0
}

func (cs *Server) handleFetch(ctx context.Context, req *kafka.Request, r *kmsg.FetchRequest) kmsg.Response {
	denied := deniedTopics(req, r.Topics, func(t kmsg.FetchRequestTopic) string { return t.Topic })
	wait := time.Duration(r.MaxWaitMillis) * time.Millisecond
	deadline := time.Now().Add(min(wait, 5*time.Minute))
	for {
		resp, n, errs := cs.fetchOnce(ctx, r, denied, req.Remote)
		if n > 0 || errs || n >= int(r.MinBytes) || !time.Now().Before(deadline) {
			return resp
		}
		// Long poll: wake up every metadata tick (or at the deadline)
		// and look again; the table cache reloads at most that often.
		tick := min(cs.ccfg.MetadataMaxAge, time.Until(deadline))
		select {
		case <-ctx.Done():
			return resp
		case <-time.After(tick):
		}
	}
}

// fetchOnce answers the request from the tables as they are now and
// returns the number of record bytes in it and whether any partition has
// an error.
// reader names the connection, for the batch cache's policy.
func (cs *Server) fetchOnce(ctx context.Context, r *kmsg.FetchRequest, denied map[string]bool, reader string) (resp *kmsg.FetchResponse, total int, errs bool) {
	resp = r.ResponseKind().(*kmsg.FetchResponse)
	maxBytes := int(r.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	for _, rt := range r.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			sp.PreferredReadReplica = -1
			sp.RecordBatches = []byte{} // empty, not null: librdkafka rejects a null record set
			v, code := cs.view(ctx, rt.Topic, rp.Partition)
			if denied[rt.Topic] {
				v, code = nil, kafka.CodeTopicAuthorizationFailed
			}
			if code != 0 {
				sp.ErrorCode = code
				errs = true
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			end := cs.end(ctx, v.Stream, v.Partition, v.End)
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = end, end, v.Earliest
			switch {
			case rp.FetchOffset < v.Earliest:
				sp.ErrorCode = kafka.CodeOffsetOutOfRange
			case rp.FetchOffset < end && total < maxBytes:
				limit := min(int(rp.PartitionMaxBytes), maxBytes-total)
				if rp.PartitionMaxBytes <= 0 {
					limit = maxBytes - total
				}
				// Below the table's mark from the table, above it from
				// the cloud's sequenced WAL objects (tail.go).
				var b []byte
				var err error
				from := "table"
				if rp.FetchOffset < v.End {
					b, err = cs.batches.fetch(ctx, v, rp.FetchOffset, limit, total == 0, reader)
				} else {
					from = "cloud tail"
					b, err = cs.fetchTail(ctx, v.Stream, v.Partition, rp.FetchOffset, limit)
				}
				if err != nil {
					cs.log.Warn("kafka: read "+from, "topic", rt.Topic, "partition", rp.Partition, "offset", rp.FetchOffset, "err", err)
					sp.ErrorCode = kafka.CodeUnknownServerError
					break
				}
				if len(b) > 0 {
					sp.RecordBatches = b
					total += len(b)
				}
			}
			errs = errs || sp.ErrorCode != 0
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, total, errs
}
