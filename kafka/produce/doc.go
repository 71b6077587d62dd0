// Package produce is the produce side of Tributary's Kafka protocol, run
// by edge nodes (package node): factory gateways produce to it exactly as
// to a Kafka broker, and their records land in the WAL — and from there in
// the stream's table — with the same dense offsets as MQTT traffic. The
// wire plumbing (connection loop, framing, ApiVersions, error codes) is
// package kafka's; the consume side (kafka/consume) is separate and never
// imported.
//
// # Invariants
//
//  1. Durable before acknowledged. A Produce response (acks 1 or -1) is
//     written only after the tributary.Appender reported the append done
//     (Submit, Durable), i.e. after the records are fsynced in the WAL. A connection's requests are
//     pipelined (kafka.Starter): their appends are queued in request order
//     and their responses written in request order. An error response
//     means nothing of that partition's batch was appended.
//  2. Dense offsets. Offsets are assigned by the appender (the WAL), never by
//     this package; a batch's records get consecutive offsets and the
//     response's base offset is the offset of its first record.
//  3. Exactly once per idempotent producer. For each (stream, partition,
//     producer id), a batch is appended only if its sequence follows the
//     last appended one (or reserved by one being appended) in the
//     current epoch, and never unless the producer's previous batch was
//     appended (the appends are chained); a retry of one of the last
//     five appended batches is answered with its original base offset and
//     not appended again; older epochs are fenced. The state is rebuilt at
//     Start from Backend.ProducerRuns, which the node derives from the WAL
//     records (they carry producer id, epoch and sequence, so the state is
//     written in the same transaction as the data) plus its snapshot.
//  4. Only what the principal may do. A Produce to a stream the
//     connection's principal may not produce to (auth.Produce) is
//     TOPIC_AUTHORIZATION_FAILED and appends nothing; the stream is
//     neither looked up nor auto-created for it, and Metadata lists only
//     the streams it may produce to. Every record carries the principal
//     (Record.Principal), and an idempotent producer id is usable only by
//     the principal it was handed to (producers.go).
//  5. Bad input stays local. A malformed frame or request closes only its
//     connection; a bad batch fails only its partition.
//
// # Outline
//
// Server (server.go) owns the API table and dispatches each request of
// the kafka.Server connection loop. One file per API key, each opening
// with its supported versions: Metadata (metadata.go), Produce
// (produce.go), InitProducerId (init_producer_id.go), and Fetch
// (fetch.go), advertised for librdkafka but refused. ApiVersions is
// kafka.HandleApiVersions. Record batches are decoded by kafka.ParseBatch
// (CRC-32C, gzip/snappy/lz4/zstd with a decompression bound); idempotence
// lives in producers.go; the node plugs in its tributary.Appender (the
// log) and a Backend (backend.go: topics, brokers, producer ids).
package produce
