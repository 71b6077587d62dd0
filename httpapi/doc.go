// Package httpapi is Tributary's HTTP front door to the stream tables:
// produce at the edge (Producer, Confluent REST v3 compatible) and read
// in the cloud (Reader: long-poll reads, Server-Sent Events, partitions
// and their offsets, offsets by timestamp, consumer-group offsets), both
// described by the OpenAPI document both serve at /openapi.yaml. The JSON
// shapes are package httpapi/wire's; `node` mounts the Producer on the
// edge's HTTP port, `cloud` the Reader on its HTTP listener.
//
// # Invariants
//
//   - A delivery report with error_code 200 is written only after the
//     record is durable in the WAL (and on the replicas the cluster
//     requires): the Appender's Append has returned. Reports come in the
//     order the records were sent, one per record.
//   - Offset N read here is the row whose offset column is N, the Kafka
//     offset N and Pulsar entry N: every read goes through the one
//     tables.Reader the other consume servers share, and nothing at or
//     past a partition's committed mark is served.
//   - A bad request is answered with a clear error (400 naming the
//     field, 404 for an unknown stream or partition, 413 for a body or
//     record over its cap, 415 for a content type that is not JSON, 416
//     for an offset out of range) and changes nothing; in a produce
//     stream, the records before a malformed one stay accepted and
//     reported.
//   - Everything a client controls is bounded: the bytes of a record
//     (max_record_bytes) and of a non-streamed body, the bytes decoded
//     ahead of the WAL per stream, the time a stream may be idle
//     (IdleTimeout, read deadline) and a write may block (WriteTimeout:
//     a client that does not read its reports or events is cut off), the
//     concurrent streams (max_streams, 429 beyond), the records and bytes
//     of one read and the wait of a long poll. Nothing outlives the
//     token it authenticated with: a long poll waiting past it is 401,
//     an event stream ends with an error event (auth.ErrExpired).
//   - Back-pressure (WAL budget, replication, a partition being taken
//     over) is 429 (budget) or 503 with Retry-After and the reason, never
//     a silent drop.
//
// # Outline
//
// produce.go decodes a request body as a stream of JSON records on one
// goroutine and appends them in batches on another (what one fsync
// covers), writing each batch's reports and flushing; read.go answers
// partitions, offsets and long-poll reads; sse.go streams records as
// events; groups.go stores group offsets in package offsets' table (the
// Kafka groups' own).
package httpapi
