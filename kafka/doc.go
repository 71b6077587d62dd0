// Package kafka is the Kafka wire protocol plumbing that both ends of
// Tributary share; what the requests mean lives in two sub-packages that
// never import each other:
//
//   - kafka/produce, the edge side: factory gateways produce to an edge
//     node exactly as to a Kafka broker, and their records land in the WAL
//     with the same dense offsets as MQTT traffic (Produce, Metadata,
//     InitProducerId, and Fetch advertised but refused).
//   - kafka/consume, the cloud side: Kafka consumers read the stream
//     tables directly (Fetch, ListOffsets, Metadata, consumer groups,
//     committed offsets, and Produce advertised but refused).
//
// The split follows the data path: the produce side writes the WAL and
// knows nothing of tables beyond partition ownership; the consume side
// reads tables and knows nothing of the WAL's producers. A node composes
// the produce side (package node), a cloud server the consume side
// (package cloud).
//
// # What is here
//
// Server (server.go) is the connection machinery: the accept loop (with
// backoff on temporary errors), one goroutine per connection that reads a
// size-prefixed frame (bounded by MaxFrameBytes; frames above 1 MiB are
// read incrementally), decodes header and body with franz-go's kmsg
// against the side's API table (DecodeRequest), hands the Request to the
// side's Handler and writes the response before reading the next request
// — so requests of a connection are handled in order, as Kafka does,
// while connections run concurrently — and a graceful Close that lets each
// connection finish the request it is handling. ApiVersions
// (api_versions.go) is answered from the same API table, so each side
// advertises exactly what it implements. Also here: the protocol's error
// codes and API keys, the listener Config, BrokerID and TopicID
// (ids.go).
//
// # Authentication and authorization
//
// SASL is answered by the Server itself (sasl.go), for both sides:
// SaslHandshake v0–v1 and SaslAuthenticate v0–v2 with PLAIN,
// SCRAM-SHA-256, SCRAM-SHA-512 (against the password file of
// Config.Auth, an auth.Authority) and OAUTHBEARER (a JWT); without SASL a
// verified TLS client certificate names the principal, else the client
// is anonymous. Each side lists the two SASL keys in its API table so
// that ApiVersions advertises them, but its Handler never sees them.
// Every other request reaches the Handler with Request.Principal set;
// handlers ask Request.Authorize (audited denial) or Request.Allowed (for
// filtering listings) about a stream or a group, and answer a denial with
// TOPIC_AUTHORIZATION_FAILED or GROUP_AUTHORIZATION_FAILED. A nil
// Config.Auth admits every client as anonymous with every right.
//
// # Invariants
//
//  1. Bad input stays local. A malformed frame, an unknown API key or a
//     version outside the table closes only its connection; an
//     ApiVersions request of an unknown version is answered with
//     UNSUPPORTED_VERSION and our ranges instead, as Kafka does.
//  2. In order per connection. A connection's next request is read only
//     after the previous response was written (or dropped, for acks=0).
//  3. Close answers what it accepted: in-flight requests finish and their
//     responses are written unless Close's context ends first.
//  4. Nothing before authentication. When the Authority refuses
//     anonymous clients, no request but ApiVersions and SASL reaches a
//     Handler before the connection authenticated (the connection is
//     closed with nothing written), a failed authentication closes the
//     connection after SASL_AUTHENTICATION_FAILED with a generic message,
//     and no token-authenticated connection outlives its token.
//
// The record-batch codec (message format v2) is here too: the decoder
// (batch.go: CRC-32C, gzip/snappy/lz4/zstd with a decompression bound),
// which the produce side uses, and the encoder (encode.go), which the
// consume side uses to serve table rows.
package kafka
