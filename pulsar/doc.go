// Package pulsar serves Pulsar consumers from the stream tables: the cloud
// server speaks the Apache Pulsar binary protocol, so that Pulsar
// applications read the very same Iceberg tables as Kafka consumers and
// query engines. Producing is not offered: messages enter at the edge.
//
// # Invariants
//
//  1. Message ids are offsets. The message id of offset N of partition P is
//     (ledger 1, entry N, partition P); the broker entry metadata index is
//     N. Ledger 1 is the partition's generation: never -1 or MaxInt64,
//     which clients read as earliest and latest.
//  2. Nothing beyond the committed mark. Messages are the table's rows
//     below the partition's committed high-water mark, read through
//     tables.Reader (the same reader, and caches, as the Kafka server).
//  3. Payloads are byte-exact: the value column is the payload; headers
//     become properties, the Kafka key the partition key.
//  4. Bad input stays local: a malformed or oversize frame, a bad
//     checksum, or a command before CONNECT closes that connection only.
//
// # Outline
//
// Server (server.go) accepts connections; each conn (conn.go) reads frames
// (frame.go: size-prefixed BaseCommand, payload frames with the 0x0e01
// CRC32C magic and 0x0e02 broker entry metadata) on one goroutine and
// handles them in order, one file per command (cmd_*.go); everything it
// sends goes through one ordered write queue drained by a writer
// goroutine. Topic names persistent://<catalog>/<namespace>/<stream> map
// onto stream namespace.stream; every stream is a partitioned topic
// (partitions = the table's), so <topic>-partition-N is Kafka partition N.
// Each SUBSCRIBE becomes a consumer (consumer.go) of a Subscription owned
// by the Manager; source.go adapts tables.Reader to the Source a
// subscription reads. The protocol's protobuf types are in package pb
// (generated from pb/PulsarApi.proto, a subset of Apache Pulsar's).
package pulsar
