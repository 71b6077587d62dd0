// Package consume is the consume side of Tributary's Kafka protocol, run
// by the cloud server (package cloud): Kafka consumers read the stream
// tables directly, with consumer groups and committed offsets, from any
// cloud server. The wire plumbing (connection loop, framing, ApiVersions,
// error codes) is package kafka's; the produce side (kafka/produce) is
// separate and never imported.
//
// # Invariants
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
//  3. Only what the principal may read. Fetch, ListOffsets, Metadata,
//     OffsetCommit and OffsetFetch answer a stream the connection's
//     principal may not consume (auth.Consume) with
//     TOPIC_AUTHORIZATION_FAILED, and every group API a group it may not
//     use with GROUP_AUTHORIZATION_FAILED; listings (Metadata, ListGroups,
//     OffsetFetch of all topics) leave those out.
//  4. Committed group offsets are durable. An OffsetCommit is answered
//     after its offsets are committed to tributary_group_offsets in the
//     catalog's SQL database (package offsets); the server itself is
//     stateless, and any server resumes every group from there.
//     Group membership is soft state in the coordinator's memory.
//
// The consume side reads through tables.Reader and its caches: table metadata per stream,
// reloaded at most every 100 ms (MetadataMaxAge) or on a long-poll tick;
// per partition the index of its data files (from manifest bounds); a
// 256 MiB (RowCacheBytes) LRU of decoded row groups (sized by payload
// bytes plus a per-record overhead; concurrent readers of one row group
// share a single decode); an LRU of 4096 Parquet footers. On top of them
// the consume side keeps its own 256 MiB (BatchCacheBytes) cache of the
// record batches encoded from each row group (batches.go: straight from
// the Parquet pages by internal/pqkafka, the reader's decoded rows only
// for files of another layout; a segmented LRU a scan cannot flush), and encodes
// the next row groups of a partition ahead of its fetchers, several at
// once. Data files are immutable, so these never go stale.
//
// # Outline
//
// Server (server.go) owns the API table and dispatches each request of
// the kafka.Server connection loop. One file per API key, each opening
// with its supported versions: Metadata (metadata.go), ListOffsets
// (list_offsets.go), Fetch (fetch.go, batches built by kafka.AppendBatch and cached per row group in batches.go),
// FindCoordinator (find_coordinator.go, rendezvous hash over the peers),
// JoinGroup, SyncGroup, Heartbeat, LeaveGroup (join_group.go,
// sync_group.go, heartbeat.go, leave_group.go over the state machine of
// groups.go), DescribeGroups and ListGroups (describe_groups.go,
// list_groups.go), OffsetCommit and OffsetFetch (offset_commit.go,
// offset_fetch.go over package offsets), and Produce (produce.go),
// advertised for librdkafka but refused. ApiVersions is
// kafka.HandleApiVersions. Consumer-group lag for /metrics is lag.go.
package consume
