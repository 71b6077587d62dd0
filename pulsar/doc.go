// Package pulsar serves Pulsar consumers from the stream tables: the cloud
// server speaks the Apache Pulsar binary protocol, so that Pulsar
// applications read the very same Iceberg tables as Kafka consumers and
// query engines. With Config.Produce (the cloud write path) it serves
// producers too; without, PRODUCER is NotAllowedError and messages enter
// at the edge.
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
//  4. Bad input stays local: a malformed or oversize frame or a command
//     before CONNECT closes that connection only; a SEND with a bad
//     checksum or payload is refused alone (SEND_ERROR).
//  5. Produced is stored once, answered in order. A SEND is one write
//     through the write contract (tributary.Appender), named by its
//     producer's name and sequence ids (tributary.Dedup) and following
//     the producer's previous SEND: a resend at or below the last stored
//     sequence id is not stored again (the state is the write path's,
//     shared by every server), its receipt's message id is the first
//     record's offset, and a producer's receipts and errors go back in
//     SEND order (cmd_send.go).
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
// subscription reads. PRODUCER, SEND and CLOSE_PRODUCER are
// cmd_producer.go and cmd_send.go (batches and compression are decoded by
// package wire). The protocol's protobuf types are in package pb
// (generated from pb/PulsarApi.proto, a subset of Apache Pulsar's).
//
// # Authentication and authorization
//
// With Config.Auth (an auth.Authority), CONNECT authenticates the client
// (auth.go): auth_method_name "token" with a JWT in auth_data, a verified
// TLS client certificate (method "tls", or none, on a pulsar+ssl://
// listener with a client CA), or nothing (anonymous, when allowed). A
// refusal answers ERROR AuthenticationError — pulsar-client-go gives up
// on anything but CONNECTED — and closes the connection; the listener's
// handshake deadline is met only by an authenticated CONNECT. When a
// token expires, a client that announced supports_auth_refresh gets
// AUTH_CHALLENGE and must answer AUTH_RESPONSE with a later token of the
// same principal within a grace period; otherwise, and for clients
// without the feature, the connection is closed. SUBSCRIBE
// needs auth.Consume on the stream with the subscription name as Group;
// PARTITIONED_METADATA and LOOKUP of a stream the principal may not
// consume are AuthorizationError, GET_TOPICS_OF_NAMESPACE leaves such
// streams out. Failures and denials are the Authority's audit lines and
// metrics. Nil Auth: anonymous clients with every right.
//
// # Subscriptions
//
// The subscriptions are package subscription's (moved there so the gRPC
// API serves the same ones; subscription.go here names its types): a
// Manager owns every subscription of the server. Each
// Subscription runs one dispatch goroutine that reads its
// Source from the read position as its consumers' permits allow (at most
// 500 entries a read), tails new commits by asking End at most every 50 ms
// while some consumer has permits, and makes every Consumer callback
// itself, outside its lock and never before the consumer's first FLOW. An
// offset is at any time acknowledged, pending on exactly one consumer, or
// in the replay set, which goes out before anything newer. Exclusive admits
// one consumer. Failover has one active consumer (on a non-partitioned
// topic the first subscribed; on partition N the one at N mod k among the
// k best-priority consumers sorted by name), announces it with
// ACTIVE_CONSUMER_CHANGE and rewinds everything unacknowledged to a new
// active consumer. Shared gives turns of up to 20 messages round-robin
// among the best-priority consumers with permits. Key_Shared
// hashes the message key with Murmur3_32 (seed 0, sign bit
// cleared; no key hashes as the empty key) into 65536 slots split among
// the consumers in auto-split ranges; it never gives a slot to a consumer
// while another holds an unacknowledged message of it, holds back later
// messages of a held-back slot so that each key stays in order, and gives
// a newly joined consumer nothing at or after its join point until
// everything before it is acknowledged (the broker's recently-joined
// rule). Messages of a leaving consumer and negatively acknowledged ones
// are redelivered with their redelivery count increased (on Exclusive and
// Failover a redelivery request rewinds everything unacknowledged, as the
// broker does); cumulative acks are refused on Shared and Key_Shared.
// Cursors are a mark-delete offset plus the individually
// acknowledged ranges above it. Durable ones live in table
// tributary_pulsar_cursors of the catalog database (via
// tables.OpenStateDB) and are saved at most every 100 ms, when the last
// consumer leaves, on Seek and on Close. A cursor holds at most 10,000
// ranges, in memory too: an individual ack that would open one more is
// refused (TooManyRequests in ACK_RESPONSE; the message is delivered
// again, never lost), and a consumer holding 50,000 unacknowledged
// messages gets nothing more until it acknowledges, whatever its permits.
// A
// subscription whose last consumer leaves is dropped from memory (a
// durable one after saving; a reader's cursor ends with it), so any
// server reopens it from the store.
package pulsar
