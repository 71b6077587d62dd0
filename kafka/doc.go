// Package kafka speaks the Kafka wire protocol on both ends of Tributary.
// The produce side (Server, on edge nodes): factory gateways produce to it
// exactly as to a Kafka broker, and their records land in the WAL — and
// from there in the stream's table — with the same dense offsets as MQTT
// traffic. The consume side (CloudServer, in the cloud): Kafka consumers
// read the stream tables directly.
//
// # Invariants of the consume side
//
//  1. Offsets are stable. Offset N served here is the row whose `offset`
//     column is N, which is the offset the edge WAL assigned: record
//     batches are built from the table's rows with base offset = the first
//     row's offset, never renumbered.
//  2. Nothing beyond the committed mark. A partition's high-water mark is
//     its committed mark (the table property tributary.hwm.P, written in
//     the same catalog transaction as the data); no offset at or above it
//     is served or reported, so a consumer never sees a row that a reader
//     of the table at that snapshot would not.
//  3. Committed group offsets are durable. An OffsetCommit is answered
//     after its offsets are committed to tributary_group_offsets in the
//     catalog's SQL database (offsets_store.go); the server itself is
//     stateless, and any server resumes every group from there.
//     Group membership is soft state in the coordinator's memory.
//
// The consume side reads through tables.Reader and its caches: table metadata per stream,
// reloaded at most every 100 ms (MetadataMaxAge) or on a long-poll tick;
// per partition the index of its data files (from manifest bounds); a
// 256 MiB (RowCacheBytes) LRU of decoded row groups (sized by payload
// bytes plus a per-record overhead; a sequential reader past the middle of
// a row group has the next one decoded ahead, and concurrent readers of
// one row group share a single decode); an LRU of 4096 Parquet footers.
// Data files are immutable, so these never go stale.
//
// # Invariants of the produce side
//
//  1. Durable before acknowledged. A Produce response (acks 1 or -1) is
//     written only after Backend.Append returned, i.e. after the records are
//     fsynced in the WAL. With acks 0 the append still completes before the
//     connection's next request is read. An error response means nothing of
//     that partition's batch was appended.
//  2. Dense offsets. Offsets are assigned by the backend (the WAL), never by
//     this package; a batch's records get consecutive offsets and the
//     response's base offset is the offset of its first record.
//  3. Exactly once per idempotent producer. For each (stream, partition,
//     producer id), a batch is appended only if its sequence follows the
//     last appended one in the current epoch; a retry of one of the last
//     five appended batches is answered with its original base offset and
//     not appended again; older epochs are fenced. The state is rebuilt at
//     Start from Backend.ProducerRuns, which the node derives from the WAL
//     records (they carry producer id, epoch and sequence, so the state is
//     written in the same transaction as the data) plus its snapshot.
//  4. Bad input stays local. A malformed frame or request closes only its
//     connection; a bad batch fails only its partition.
//
// # Outline
//
// Server accepts TCP connections; each connection is served by one
// goroutine that reads a size-prefixed frame (bounded by MaxFrameBytes),
// decodes the header and body with franz-go's kmsg, handles it and writes
// the response before reading the next request, so requests of a connection
// are handled in order, as Kafka does, while connections run concurrently
// and their appends share the WAL's group commits.
//
// Produce side APIs, one file each: ApiVersions (api_versions.go), Metadata
// (metadata.go), Produce (produce.go), InitProducerId
// (init_producer_id.go), and Fetch (fetch.go), advertised for librdkafka but
// refused. Record batches are decoded in batch.go (CRC-32C,
// gzip/snappy/lz4/zstd with a decompression bound); idempotence lives in
// producers.go; the node plugs in through Backend (backend.go).
//
// CloudServer (cloud.go) shares the framing and connection loop of Server
// (server.go) with its own API table, so ApiVersions advertises only what
// each side implements. Consume side APIs, one file each: ApiVersions
// (api_versions.go), Metadata (cloud_metadata.go), ListOffsets
// (list_offsets.go), Fetch (cloud_fetch.go, batches built in encode.go),
// FindCoordinator (find_coordinator.go, rendezvous hash over the peers),
// JoinGroup, SyncGroup, Heartbeat, LeaveGroup (join_group.go,
// sync_group.go, heartbeat.go, leave_group.go over the state machine of
// groups.go), OffsetCommit and OffsetFetch (offset_commit.go,
// offset_fetch.go over offsets_store.go). Reading tables and the caches
// are tables.Reader's, shared with the other protocol servers.
package kafka
