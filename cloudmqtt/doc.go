// Package cloudmqtt is the cloud MQTT listener: MQTT 3.1.1 and 5
// subscribers (TCP and WebSocket) served from the stream tables, with
// replay and persistent sessions. It is read-only and stateless: any
// cloud server can serve any subscriber, because everything a session
// keeps lives in the catalog database.
//
// # Addressing
//
// A subscription filter `$stream/<namespace.stream>/<topic filter>`
// subscribes to the rows of one stream whose original MQTT (or Kafka)
// topic matches the filter, with the usual + and # wildcards. The stream
// part takes no wildcards; an unknown stream is refused (SUBACK 0x8F with
// a reason string). `$share/<group>/<filter>` splits a filter's rows among
// the group's members on any cloud server (share.go). A plain topic filter reads the streams the edge nodes
// route matching topics to: each node records its route filters in the
// stream tables' properties (tables.PublishRoutes), and the filter reads
// every stream one of whose filters overlaps it (Server.resolve), among
// those the principal may read. The ACL decides each
// filter with auth's `subscribe` action on the topic filter and the
// stream: a rule's topics must cover the filter (so `#` needs a rule
// granting `#`), its streams, when it lists any, the stream, and its
// groups, when it lists any, a `$share` group.
//
// # Start position
//
// A new subscription starts where the MQTT 5 SUBSCRIBE user property
// `stream-offset` says: `earliest`, `latest` (the default), an offset N
// (every partition), `P:N,P:N` (per partition; others at latest) or an
// RFC 3339 time (the first row accepted at or after it). A re-subscription
// of a filter the session has, without the property, keeps its position.
// A partition that appears after the subscription is read from its start.
// With the user property `stream-latest=true` the newest row of each
// matching topic (among the last 100,000 rows of each partition, at most
// 10,000 topics) is sent first, with the retain flag, outside the
// positions.
//
// # Delivery
//
// Each row becomes a PUBLISH with the row's original topic and its payload
// byte for byte; MQTT 5 clients get the row's headers as user properties
// (values as strings) followed by `offset`, `partition` and `timestamp`
// (RFC 3339, µs, UTC), and the subscription identifier if one was given.
// QoS 0 and 1 are granted (2 is granted as 1). Rows are sent in offset
// order per partition; the QoS 1 messages a client has not acknowledged
// are at most min(its Receive Maximum, Config.MaxInflight). Rows bigger
// than the client's Maximum Packet Size are skipped (counted).
//
// # Sessions
//
// A session is persistent when its expiry interval is above zero (MQTT 5
// Session Expiry Interval; MQTT 3.1.1 clean session false gets
// Config.MaxSessionExpiry). Its subscriptions and, per subscription and
// partition, its position — the lowest offset sent at QoS 1 and not
// acknowledged, or the next offset to read — are stored in the catalog
// database (see store.go). Positions advance only on PUBACK (QoS 1) or on
// sending (QoS 0), and are written in group commits a few milliseconds
// after the acknowledgement; a reconnect to any cloud server, also after
// kill -9 of the one it was connected to, resumes from the stored
// positions: QoS 1 is at-least-once, and the only rows received twice are
// those not acknowledged (or acknowledged within the last position write
// before a crash). A session belongs to its principal: a client id whose
// session, stored or connected here, is another principal's is refused
// (0x87) before anything is ended or deleted, Clean Start included
// (Server.take). A resumed session's subscriptions are authorised again
// under the rules in force; refused ones are dropped with their
// positions (MQTT 5: CONNACK user property subscription-dropped). Two
// cloud servers serving one client id at the same moment are not
// detected (the newest connection on one server takes over an older one
// of the same principal there, 0x8E).
//
// # Read-only
//
// PUBLISH is refused: MQTT 5 QoS 1 / 2 get PUBACK / PUBREC 0x87 with a
// reason string saying the listener is read-only, the connection stays;
// a QoS 0 publish, and any publish of an MQTT 3.1.1 client (which has no
// way to be refused), end the connection (DISCONNECT 0x87 for MQTT 5). A
// CONNECT with a will is refused (CONNACK 0x87 / 0x05).
//
// # Bounds
//
// Every listener goes through package listen (connection caps, CONNECT
// deadline, TLS, panic recovery, write timeout). A packet a client sends
// is at most Config.MaxPacketBytes; a session has at most
// Config.MaxSubscriptions subscriptions. A subscriber that never
// acknowledges holds MaxInflight small entries (offsets, not rows: rows
// are read from the shared tables.Reader's cache on demand), so memory per
// client is bounded whatever the backlog. Idle sessions cost nothing: one
// watcher loop looks at the committed marks of the streams some session
// waits on once per reader metadata age and wakes only the sessions of a
// stream that moved.
package cloudmqtt
